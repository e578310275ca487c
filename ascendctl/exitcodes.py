"""Process exit codes shared by every command (documented in `ascendctl --help`)."""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0             # success; every check passed
    FAILED = 1         # a check, task, gate or request failed
    USAGE = 2          # bad input (inventory, flags, files): nothing was done on any host
    WARNINGS = 3       # completed, but warnings were reported (preflight); status: degraded
    UNREACHABLE = 4    # one or more hosts could not be reached
    LOCKED = 5         # another deploy holds the cluster lock
    ROLLED_BACK = 6    # deploy failed and every node was returned to the previous release
    INTERRUPTED = 130  # Ctrl-C


EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 failed; 2 bad input (nothing done); 3 warnings; "
    "4 host unreachable; 5 cluster locked by another deploy; "
    "6 deploy failed and was rolled back; 130 interrupted."
)

# `ascendctl status` maps its verdict onto the codes above (docs/health.md).
STATUS_EXIT_CODES_HELP = (
    "Exit codes: 0 healthy (a real completion through the API key answered and nothing is "
    "wrong); 3 degraded (it serves, but NPU health, RoCE links, HBM held by a foreign "
    "process, releases or the recovery supervisor need attention); 1 down (no completion, "
    "a rank's engine is not running, or the group is being restarted; the reasons name the "
    "node and rank); 4 a node unreachable (the verdict is then down or degraded); 2 bad "
    "input. See docs/health.md."
)
