"""The one batch decoder of commitlog records: from a buffer and record starts, the
columns every command needs, read with numpy gathers over the memory map.

* :class:`BatchDecoder` decodes a run of consecutive record starts into
  :class:`DispatchColumns` (header fields at the schema's offsets, topics, TAGS code or the
  schedule topic's delivery time, KEYS, UNIQ_KEY, the index keys hashed) and a ``sure``
  mask; :func:`first_unsure` gives the index of the first record it is unsure of, which
  goes to the one slow path (:func:`recovery.check.check_record`).
* :func:`hash_spans` is Java ``String.hashCode`` of byte spans, eight bytes at a time;
  :func:`index_keys` splits KEYS and hashes the index keys as ``IndexService.buildIndex``.
* :func:`plain_records` is the broker's validity rule for a chain of starts that needs no
  properties parsed (``recover``'s walk); :func:`crc_failures` checks their bodies.
* :class:`Words` reads big-endian words at arbitrary positions of
  a buffer (``verify`` reads its header fields through it).
* :mod:`.blocks` holds the numpy helpers of dump's and export's block decoders.
* :func:`.plainrun.plain_run` decodes a run of plain records into the columns and byte
  spans (topic, properties and their values, body, hosts) that dump's JSON lines and
  export's Arrow batches render; :func:`.plainrun.plain_record` is the same rule one
  record at a time (dump's per-record lines).

Header offsets and dtypes come from :mod:`formats.commitlog` (``HEADER_OFFSETS``, derived
from the construct schemas) and the powers of 31 from :mod:`formats.javahash`.
tests/test_batch_decoder.py holds the decoder to ``check_record`` on every real fixture
and on generated shapes.
"""

from typing import TYPE_CHECKING

from ..lazy import LazyExports

if TYPE_CHECKING:
    from .blocks import body_crcs_match, v1_lengths
    from .columns import DispatchColumns, IndexKeys, LazyValues, PropertyColumns
    from .decoder import MAX_RUN, BatchDecoder, first_unsure
    from .hashing import add_index_keys, hash_spans, index_keys, join_spans, last_per_record
    from .plain import Plain, crc_failures, plain_records
    from .words import GroupedWords, Words

# start-up time: each submodule is imported at the first use of one of its names (recover's
# walk needs plain, dump the blocks, only the dispatch and verify the decoder)
_FROM = {
    ".blocks": ("body_crcs_match", "v1_lengths"),
    ".columns": ("DispatchColumns", "IndexKeys", "LazyValues", "PropertyColumns"),
    ".decoder": ("MAX_RUN", "BatchDecoder", "first_unsure"),
    ".hashing": ("add_index_keys", "hash_spans", "index_keys", "join_spans", "last_per_record"),
    ".plain": ("Plain", "crc_failures", "plain_records"),
    ".words": ("GroupedWords", "Words"),
}
__getattr__ = LazyExports(__name__, {name: mod for mod, names in _FROM.items() for name in names})

__all__ = [
    "MAX_RUN",
    "BatchDecoder",
    "Plain",
    "DispatchColumns",
    "GroupedWords",
    "IndexKeys",
    "LazyValues",
    "PropertyColumns",
    "Words",
    "add_index_keys",
    "body_crcs_match",
    "crc_failures",
    "first_unsure",
    "hash_spans",
    "index_keys",
    "join_spans",
    "last_per_record",
    "plain_records",
    "v1_lengths",
]
