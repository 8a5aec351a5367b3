"""The reput pass: ConsumeQueue and Index rebuilt from the commitlog, as the broker's
``ReputMessageService.doReput`` and dispatcher chain build them (RECOVERY.md §9).

* :func:`iter_dispatch` (:mod:`.walk`) walks the commitlog the way ``doReput`` does
  (RECOVERY §9.5): region by region (a file from the reput offset to its end, or to
  ``to_offset``), every record checked with ``checkMessageAndReturnSize(checkCRC=false,
  readBody=false)`` (:func:`recovery.check.check_record`), BLANK -> next file, ``(N,
  False)`` -> the ``[BUG]`` accounting quirk Q13, ``(-1, False)`` -> the rest of the region
  skipped (what a master broker does). It yields the dispatch requests in column form
  (:class:`DispatchColumns`). Damage is recorded as :class:`ReputProblem` (:mod:`.model`),
  never raised.
* The fast path (default) finds record boundaries with one ``struct`` unpack per record,
  then decodes whole runs of records with numpy gathers over the memory map
  (:mod:`recovery.batch`: the header layout is derived from ``formats.commitlog.MESSAGE_V1``)
  and finds TAGS, KEYS, UNIQ_KEY and DELAY with one regular-expression pass over the runs'
  properties. Any record it is not sure about (IPv6 hosts, V2, a length that does not add
  up, a DELAY to parse, a 5.x inner batch, a legacy-parser ambiguity) is decided by
  ``check_record``; a test asserts that both paths dispatch exactly the same requests.
* :func:`iter_dispatch_parallel` (:mod:`.pieces`): the same requests, decoded in pieces by
  worker processes.
* :func:`load_state` (:mod:`.state`) reads what the broker would continue from at
  start-up: each consume queue after ``ConsumeQueue.recover`` (RECOVERY §3) and the index
  files after ``IndexService.load`` (§8).
* :func:`reput` (:mod:`.driver`) feeds :mod:`recovery.indexbuild`'s ``ConsumeQueueSet``
  and ``IndexBuilder`` and returns the resulting files and checkpoint timestamps
  (:class:`ReputResult`, :mod:`.output`); it writes nothing.
"""

from __future__ import annotations

from ..batch import DispatchColumns, IndexKeys, LazyValues
from .driver import feed_cq, feed_index, reput, split_batch
from .model import BAD_TOPIC, FILE_GAP, SIZE_ACCOUNTING, STOPPED, Progress, ReputProblem, ReputStats, Span, WalkArgs
from .output import CqFileOut, IndexFileOut, ReputResult, updated_checkpoint
from .pieces import PARALLEL_MIN_BYTES, PIECE_SIZE, iter_dispatch_parallel
from .state import IndexState, QueueState, ReputState, index_files_after_load, load_state
from .walk import iter_dispatch

__all__ = [
    "BAD_TOPIC",
    "FILE_GAP",
    "PARALLEL_MIN_BYTES",
    "PIECE_SIZE",
    "SIZE_ACCOUNTING",
    "STOPPED",
    "CqFileOut",
    "DispatchColumns",
    "IndexFileOut",
    "IndexKeys",
    "IndexState",
    "LazyValues",
    "Progress",
    "QueueState",
    "ReputProblem",
    "ReputResult",
    "ReputState",
    "ReputStats",
    "Span",
    "WalkArgs",
    "feed_cq",
    "feed_index",
    "index_files_after_load",
    "iter_dispatch",
    "iter_dispatch_parallel",
    "load_state",
    "reput",
    "split_batch",
    "updated_checkpoint",
]
