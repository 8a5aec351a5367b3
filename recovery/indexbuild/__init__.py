"""Reput writers: turn a stream of dispatch requests into ConsumeQueue and Index file bytes.

This is the dispatch half of RocketMQ's reput (RECOVERY.md §9), reproduced so that the rebuilt
files are byte-identical to what RocketMQ 4.9.4 writes:

* :class:`ConsumeQueueWriter` - one ``consumequeue/<topic>/<queueId>`` queue, ``cq_put`` of
  RECOVERY §9.2 (dedup on ``offset + size <= maxPhysicOffset``, expected position
  ``cqOffset * 20``, file creation and naming, fill-blank units, the "[BUG]" append-anyway case).
* :class:`ConsumeQueueSet` - all queues, routing by ``(topic, queue_id)`` and applying the
  dispatcher filter of RECOVERY §9.1 (``sys_flag & 0xC`` in {NOT_TYPE, COMMIT}).
* :class:`IndexBuilder` - ``IndexService.buildIndex`` / ``IndexFile.putKey`` of RECOVERY §9.3 and
  STORE_FORMAT §15, producing :class:`IndexFileImage` objects (header, slots, entries) that
  can be turned into file bytes.
* :class:`ReputWriters` - both, fed from one stream.

The sections are modules of this package: ``common`` (layouts, DispatchRequest, naming,
batching helpers), ``cq``, ``image`` (IndexFileImage), ``builder`` (IndexBuilder) and
``writers`` (ReputWriters); every name stays importable from ``recovery.indexbuild``.

Everything is vectorised with numpy for the common case; every sequential rule of the broker
is either shown to be a prefix scan (see :meth:`IndexBuilder.add_columns`) or checked on the
fly, with an exact scalar path for the records where the fast path's assumptions do not hold.
"""

from __future__ import annotations

from ..broker import goes_to_consume_queue, goes_to_index
from .builder import IndexBuilder, key_hash, record_key_hashes
from .common import (
    CQ_UNIT_SIZE,
    FILL_BLANK_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    INT_MAX,
    DispatchRequest,
    TopicList,
    cq_file_name,
    cq_unit_dtype,
    index_entry_dtype,
    index_file_size,
    index_header_dtype,
    take_names,
    write_zeros,
)
from .cq import CQ_APPENDED, CQ_SKIPPED_BEHIND, CQ_SKIPPED_DEDUP, ConsumeQueueSet, ConsumeQueueWriter, CqWarning
from .image import IndexFileImage
from .writers import ReputWriters

__all__ = [
    "DispatchRequest",
    "cq_unit_dtype",
    "index_entry_dtype",
    "index_header_dtype",
    "CQ_UNIT_SIZE",
    "FILL_BLANK_SIZE",
    "INDEX_HEADER_SIZE",
    "INDEX_ENTRY_SIZE",
    "goes_to_consume_queue",
    "goes_to_index",
    "cq_file_name",
    "index_file_size",
    "CqWarning",
    "ConsumeQueueWriter",
    "ConsumeQueueSet",
    "IndexFileImage",
    "IndexBuilder",
    "ReputWriters",
    # used by the other recovery modules and the tests (not part of the original list)
    "CQ_APPENDED",
    "CQ_SKIPPED_BEHIND",
    "CQ_SKIPPED_DEDUP",
    "INDEX_SLOT_SIZE",
    "INT_MAX",
    "TopicList",
    "key_hash",
    "record_key_hashes",
    "take_names",
    "write_zeros",
]
