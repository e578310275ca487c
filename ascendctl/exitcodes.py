"""Process exit codes shared by every command (documented in `ascendctl --help`)."""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0             # success; every check passed
    FAILED = 1         # a check, task, gate or request failed
    USAGE = 2          # bad input (inventory, flags, files): nothing was done on any host
    WARNINGS = 3       # completed, but warnings were reported (preflight)
    UNREACHABLE = 4    # one or more hosts could not be reached
    LOCKED = 5         # another deploy holds the cluster lock
    ROLLED_BACK = 6    # deploy failed and every node was returned to the previous release
    INTERRUPTED = 130  # Ctrl-C


EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 failed; 2 bad input (nothing done); 3 warnings; "
    "4 host unreachable; 5 cluster locked by another deploy; "
    "6 deploy failed and was rolled back; 130 interrupted."
)
