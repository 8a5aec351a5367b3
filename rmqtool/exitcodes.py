"""Exit codes shared by every command (man page EXIT STATUS)."""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # sound / nothing to do (warnings allowed)
    REPAIRED = 1  # recover: the store was repaired
    USAGE = 2  # bad command line
    PROBLEMS = 4  # problems found and left uncorrected
    OPERATIONAL = 8  # unreadable input, not a store, store locked by a live broker, I/O error
    INTERRUPTED = 130  # SIGINT
