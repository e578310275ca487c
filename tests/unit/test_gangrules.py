"""The rules of starting a serving group exist once (runtime/ascendctl_runtime/gangrules.py)
and both the deploy's switch and the head's gang supervisor judge a rank by them."""

from __future__ import annotations

import pytest

from ascendctl.deploy import engines
from ascendctl_runtime import gangrules, supervisor


def test_a_rank_is_up_once_settled_or_when_the_head_listens():
    asked = []

    def listening() -> bool:
        asked.append(True)
        return True

    assert not gangrules.rank_is_up(gangrules.SETTLE_S - 0.1)
    assert gangrules.rank_is_up(gangrules.SETTLE_S - 0.1, listening)   # the head, early
    assert asked == [True]
    assert gangrules.rank_is_up(gangrules.SETTLE_S, listening)
    assert asked == [True]            # settled: no port probe (a remote call) is made
    assert not gangrules.rank_is_up(7.0, lambda: False, settle_s=8.0)


def test_the_port_the_head_opens_for_its_peers_by_mode():
    ports = dict(master_port=29500, data_parallel_rpc_port=13355, ray_port=6379)
    assert gangrules.coordination_port("mp", 2, **ports) == 29500
    assert gangrules.coordination_port("dp", 4, **ports) == 13355
    assert gangrules.coordination_port("ray", 1, **ports) == 6379   # Ray waits even alone
    assert gangrules.coordination_port("mp", 1, **ports) is None
    with pytest.raises(ValueError, match="unknown serving mode 'tp'"):
        gangrules.coordination_port("tp", 2, **ports)


def test_the_deploy_and_the_supervisor_share_the_rule_rather_than_copy_it():
    assert engines.rank_is_up is gangrules.rank_is_up
    assert supervisor.gangrules is gangrules
