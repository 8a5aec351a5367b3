"""The numpy helpers of dump's and export's block decoders: now
:mod:`recovery.batch.blocks` (the one batch decoder's home). This name is that module
(an alias in ``sys.modules``), so that ``rmqtool.blocks.X`` and patches of it are the
new module's; the imports below are for readers and type checkers."""

import sys

from .recovery.batch.blocks import (
    body_crcs_match,
    distinct,
    gather,
    host_keys,
    host_of_key,
    row_groups,
    rows,
    v1_lengths,
    v1_run_starts,
)

__all__ = [
    "body_crcs_match",
    "distinct",
    "gather",
    "host_keys",
    "host_of_key",
    "row_groups",
    "rows",
    "v1_lengths",
    "v1_run_starts",
]

sys.modules[__name__] = sys.modules[body_crcs_match.__module__]
