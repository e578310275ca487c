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

from typing import Callable, Optional

RANK_START_WAIT_S = 60
SETTLE_S = 5.0
MODES = ("mp", "dp", "ray")


def rank_is_up(active_for_s: float, head_listening: Callable[[], bool] = lambda: False, *,
               settle_s: float = SETTLE_S) -> bool:
    """A started rank's unit (running, not restarted) counts as up: active for SETTLE_S, or
    the head listening on the coordination port (asked only when not yet settled)."""
    return active_for_s >= settle_s or head_listening()


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
