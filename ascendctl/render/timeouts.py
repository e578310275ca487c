"""Timeouts that must agree with each other and with the start-up order.

Deploy starts ranks in order (head first) and waits up to RANK_START_WAIT_S for each
rank's unit to be running before starting the next. The last rank therefore starts up to
(nodes - 1) x RANK_START_WAIT_S after the first; HCCL gives up with EI0006 when a peer has
not connected within HCCL_CONNECT_TIMEOUT, so that timeout must exceed the spread, plus a
margin for ranks loading weights at different speeds (FACTS.md failure 1).
"""

from __future__ import annotations

from ascendctl_runtime.gangrules import RANK_START_WAIT_S

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory

LOAD_SKEW_MARGIN_S = 120      # HCCL's own default connect timeout, kept as the margin
STOP_GRACE_S = 90             # SIGTERM to SIGKILL for the engine unit
RESTART_SEC = 15
START_LIMIT_BURST = 5
HCCL_CONNECT_RANGE = (120, 7200)


def start_spread_s(inv: Inventory) -> int:
    """Between the first and the last rank of one serving group starting."""
    return (inv.group_size - 1) * RANK_START_WAIT_S


def start_limit_interval_s(inv: Inventory) -> int:
    """Long enough that START_LIMIT_BURST failed starts in a row stop the restart loop."""
    return START_LIMIT_BURST * (RESTART_SEC + RANK_START_WAIT_S) + inv.serving.startup_timeout


def check_timeouts(inv: Inventory) -> list[str]:
    """Raise InputError when the values cannot work; return warnings when they are tight."""
    s = inv.serving
    spread = start_spread_s(inv)
    source = inv.source

    def fail(message: str, key: str) -> InputError:
        path = ("all", "vars", "serving", key)
        return InputError(message, file=str(inv.path), line=source.line_of(path),
                          field=f"serving.{key}")

    if s.hccl_connect_timeout <= spread:
        raise fail(f"HCCL_CONNECT_TIMEOUT {s.hccl_connect_timeout} s does not exceed the rank "
                   f"start-up spread: {inv.group_size} nodes started in order, "
                   f"{RANK_START_WAIT_S} s apart = {spread} s; use at least "
                   f"{spread + LOAD_SKEW_MARGIN_S}", "hccl_connect_timeout")
    warnings = []
    if s.hccl_connect_timeout < spread + LOAD_SKEW_MARGIN_S:
        warnings.append(f"hccl_connect_timeout {s.hccl_connect_timeout} s leaves less than "
                        f"{LOAD_SKEW_MARGIN_S} s beyond the {spread} s start-up spread for "
                        "ranks that load weights more slowly")
    low, high = HCCL_CONNECT_RANGE
    if not low <= s.hccl_connect_timeout <= high:
        warnings.append(f"hccl_connect_timeout {s.hccl_connect_timeout} s is outside HCCL's "
                        f"documented range {low}-{high} s")
    if s.hccl_exec_timeout < s.hccl_connect_timeout:
        warnings.append(f"hccl_exec_timeout {s.hccl_exec_timeout} s is shorter than "
                        f"hccl_connect_timeout {s.hccl_connect_timeout} s: a collective may "
                        "time out while a slow rank is still joining")
    if s.startup_timeout < spread + RANK_START_WAIT_S:
        raise fail(f"startup_timeout {s.startup_timeout} s is shorter than the time needed "
                   f"just to start {inv.group_size} ranks in order "
                   f"({spread + RANK_START_WAIT_S} s)", "startup_timeout")
    return warnings
