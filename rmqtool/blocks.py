"""The numpy helpers of dump's and export's block decoders: now
:mod:`recovery.batch.blocks` (the one batch decoder's home); the names stay importable
from here."""

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

__all__ = ["body_crcs_match", "distinct", "gather", "host_keys", "host_of_key", "row_groups", "rows", "v1_lengths",
           "v1_run_starts"]
