"""Exit codes shared by every command (man page EXIT STATUS).

The statuses are a bitmask, as e2fsck's: 1 (the store was changed) and 4 (problems were
found and left) combine to 5, so cron can tell a run that changed the store from one that
did not, whatever else it found."""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # sound / nothing to do (warnings allowed)
    REPAIRED = 1  # the store was changed (recover, rebuild-index, restore)
    USAGE = 2  # bad command line
    PROBLEMS = 4  # problems found and left uncorrected
    OPERATIONAL = 8  # unreadable input, not a store, store locked by a live broker, I/O error
    INTERRUPTED = 130  # SIGINT

    @staticmethod
    def combine(*, changed: bool, problems: bool) -> "Exit | int":
        """The status of a run: CHANGED (1) | PROBLEMS (4), 0 when neither."""
        return (Exit.REPAIRED if changed else 0) | (Exit.PROBLEMS if problems else 0)


CHANGED = Exit.REPAIRED

# The EXIT STATUS table every man page starts its EXIT STATUS section with, word for word
# (tests/test_operator_cli.py checks it); what a status means for one command follows it.
MAN_TABLE = r""".SH EXIT STATUS
The statuses are bits, as e2fsck's, and this table is the same for every rmqtool
command; a run exits with the sum of the bits that apply:
.TP
.B 0
Sound, nothing to do, or a dry run that found nothing (warnings allowed).
.TP
.B 1
The store was changed (\fBrecover\fR, \fBrepair\fR, \fBrebuild\-index\fR, \fBrestore\fR,
\fBoffsets \-\-set\fR). For
\fBdump\fR, which never changes a store: nothing matched the filters (grep's
convention; a line on stderr says so).
.TP
.B 2
Usage error: a bad command line, a malformed id, time or offset.
.TP
.B 4
Problems found and left uncorrected.
.TP
.B 5
1 + 4: the store was changed, but problems remain (cron can tell that the store changed).
.TP
.B 8
Operational error or refusal: not a store, unreadable input, a live broker holds
\fISTORE\fR/lock, a destructive command without \fB\-\-yes\fR and without a terminal
to ask on, an I/O error.
.TP
.B 130
Interrupted (a line on stderr says whether the store changed and what the next run does).
"""
