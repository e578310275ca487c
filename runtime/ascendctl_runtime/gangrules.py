"""The rules of starting a serving group that the deploy and the gang supervisor share
(standard library only): how long a rank may take to come up before the next one starts,
when a started rank counts as up, and which port the head opens for its peers.

    rank start  the units start in rank order (head first); each must be up within
                RANK_START_WAIT_S before the next starts — HCCL_CONNECT_TIMEOUT is sized
                for that spread (ascendctl/render/timeouts.py)
    up          active for SETTLE_S without a restart, or (the head) listening on the
                coordination port: the head waits for its peers before it finishes
                loading, so waiting for more would push the followers past the timeout
"""

from typing import Optional

RANK_START_WAIT_S = 60
SETTLE_S = 5.0
MODES = ("mp", "dp", "ray")


def coordination_port(mode: str, group_size: int, *, master_port: int,
                      data_parallel_rpc_port: int, ray_port: int) -> Optional[int]:
    """The port the head of a serving group of GROUP_SIZE nodes listens on for its peers
    once its engine (or Ray) is up; None when nothing waits for peers (one node)."""
    if mode not in MODES:
        raise ValueError(f"unknown serving mode {mode!r}")
    if mode == "ray":
        return ray_port
    if group_size < 2:
        return None
    return master_port if mode == "mp" else data_parallel_rpc_port
