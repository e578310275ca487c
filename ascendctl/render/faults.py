"""faults.json for every node: what its fault monitor reads and the merged policy table
(docs/faults.md). The site's policy file (serving.health.fault_policy) is read with the
bounded reader and checked by the strict loader; a bad file is an InputError naming its
lines, before anything reaches a node.

Pure but for reading the site's file: the same inventory and file give the same bytes.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from ascendctl_runtime import layout
from ascendctl_runtime.contract import FaultsConfig
from ascendctl_runtime.faults.policy import PolicyError, PolicyTable, load_policy, table_to_dict
from ascendctl_runtime.nodeutil import http_url

from ascendctl.errors import InputError
from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.inputfile import read_input_bytes
from ascendctl.render.files import RenderedFile

POLICY_FIELD = "serving.health.fault_policy"


def site_policy_path(inv: Inventory) -> Optional[Path]:
    name = inv.serving.health.fault_policy
    if name is None:
        return None
    path = Path(name)
    if not path.is_absolute() and inv.path is not None:
        path = Path(inv.path).parent / path
    return path


@lru_cache(maxsize=8)
def _policy(site: Optional[str]) -> PolicyTable:
    if site is None:
        return load_policy()
    text = read_input_bytes(site, what="fault policy file", field=POLICY_FIELD)
    try:
        return load_policy(site, text.decode("utf-8", "replace"))
    except PolicyError as err:
        raise InputError(f"the fault policy file is refused:\n{err}", file=site,
                         field=POLICY_FIELD) from None


def policy_table(inv: Inventory) -> PolicyTable:
    path = site_policy_path(inv)
    return _policy(None if path is None else str(path))


def faults_config(inv: Inventory, host: Host, *, serving_groups: int) -> RenderedFile:
    """HOST's faults.json; INV may be the host's group view, SERVING_GROUPS counts every
    group of the cluster (with one, the policy cannot drain or isolate)."""
    npus = list(range(inv.cluster.npus_per_node))
    config = FaultsConfig(
        cluster=inv.cluster.name, node=host.name, root=inv.deploy.root, npus=npus,
        ports=npus, policy=table_to_dict(policy_table(inv)), serving_groups=serving_groups,
        interval_s=float(inv.serving.health.fault_interval_s),
        engine_metrics_url=http_url("127.0.0.1", inv.serving.port, "/metrics")
        if host.is_head else None)
    return RenderedFile(layout.FAULTS_CONFIG, config.to_json().encode())
