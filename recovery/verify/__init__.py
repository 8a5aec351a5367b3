"""Offline, read-only integrity check of a whole store (``rmqtool verify``).

Every problem becomes a :class:`Finding` with a stable code from :data:`CODES`; nothing
here prints. The checks, in order:

* **layout** - the file name/size sequence of every directory (``Store.issues``).
* **commitlog** - each file is walked like the broker's recovery walk
  (``CommitLog.checkMessageAndReturnSize`` per record, CRC on, RECOVERY.md §2, §4): where the
  walk stops, and what lies after (zeros, garbage, intact records). After a stop the walk
  goes on in *salvage* mode (resync: magic, the record validates, PHYSICALOFFSET equals
  file base + position) and every intact record beyond the damage is counted. Per record:
  the stored PHYSICALOFFSET, SYSFLAG bits, the properties' encoding and the 5.2+
  ``__CRC32#`` whole-record CRC when present.
* **consumequeue** - every unit against the record it points to (numpy, gathered at the
  units' offsets with ``searchsorted``), holes, fill-blank units, and commitlog messages
  missing from their queue (dispatch lag when the broker's own start-up would dispatch
  them, RECOVERY.md §4, §5, §9.5).
* **index** - header, slots and hash chains (vectorised pointer jumping), every entry
  against the keys of the record it points to (``formats.javahash`` in batches), and
  messages missing from the index.
* **checkpoint** - decoded and compared with the data; the recovery outlook says where
  normal and abnormal recovery would start and how much they would scan (RECOVERY.md §4,
  §5.1, STORE_FORMAT §16).
* **lock/abort** - a broker holding the lock, an abort file, an unfinished rmqtool
  transaction.

The commitlog walk is the hot loop. It runs per *part* (a range of one file, 64 MiB by
default) so that ``jobs`` processes share big files too; a part other than the first of a
file starts by resyncing, and the parts are stitched back into exactly the sequential walk
(a part whose start does not continue the chain of the part before is recomputed). Inside a
part, one ``struct`` unpack per record gives TOTALSIZE, magic, BODYCRC and BODYLENGTH and
``formats.crc.crc32_raw`` (zlib-ng or zlib) checks the body; everything else is the one
batch decoder's (:mod:`recovery.batch`), numpy over the whole run: the header columns and
the length rule (:mod:`recovery.batch.header`), TAGS (tagsCode), the schedule topic's
delivery times, UNIQ_KEY and KEYS (index key hashes) from the joined properties
(:meth:`recovery.batch.BatchDecoder.properties`), the entries the parser drops
(:mod:`recovery.batch.properties`). A record the decoder is unsure of goes to the one slow
path, :func:`recovery.check.check_record`, so the outcome is the broker's.

Modules: :mod:`.report` (codes, findings, the report), :mod:`.records` and :mod:`.walk`
(one part's walk), :mod:`.props` (a validated run's columns and property checks),
:mod:`.parts` (parts run and stitched, the record table), :mod:`.queues`, :mod:`.outlook`,
:mod:`.commitlog`, :mod:`.consumequeue` and :mod:`.index` (the findings of each check, with
:mod:`.spans`), :mod:`.state` (checkpoint, lock, abort), :mod:`.run` (:func:`verify_store`).
"""

from __future__ import annotations

from ...formats.crc import crc32_raw as crc32_raw  # (old name, kept importable)
from ..batch import GroupedWords as _Grouped  # noqa: F401  (old names, kept importable)
from ..scan import queue_hint_runs as queue_hint_runs  # (repair imports it from here)
from .commitlog import _REASON_CODES as _REASON_CODES
from .commitlog import _REASON_TEXT as _REASON_TEXT
from .commitlog import _ClCheck as _ClCheck
from .commitlog import _commitlog_findings as _commitlog_findings
from .commitlog import _commitlog_spans as _commitlog_spans
from .commitlog import _layout_findings as _layout_findings
from .commitlog import _record_anomalies as _record_anomalies
from .commitlog import _record_runs as _record_runs
from .commitlog import _zero_length_lost as _zero_length_lost
from .commitlog import _zeroed_properties_tail as _zeroed_properties_tail
from .commitlog import walk_summary as walk_summary
from .consumequeue import _Broker as _Broker
from .consumequeue import _cq_findings as _cq_findings
from .consumequeue import _CqCheck as _CqCheck
from .consumequeue import _deleted_topics as _deleted_topics
from .consumequeue import _KeyMatch as _KeyMatch
from .consumequeue import _q1_tags as _q1_tags
from .consumequeue import _QueueUnits as _QueueUnits
from .consumequeue import _units_records as _units_records
from .index import _CHAIN_LOCAL_TEST as _CHAIN_LOCAL_TEST
from .index import _INT_MAX as _INT_MAX
from .index import _chains as _chains
from .index import _index_findings as _index_findings
from .index import _IndexCheck as _IndexCheck
from .index import _IndexFile as _IndexFile
from .index import _read_index_header as _read_index_header
from .outlook import _process_offset as _process_offset
from .outlook import recovery_outlook as recovery_outlook
from .parts import FileScan as FileScan
from .parts import Records as Records
from .parts import _i32 as _i32
from .parts import _mp_context as _mp_context
from .parts import _part_bytes as _part_bytes
from .parts import _plan_parts as _plan_parts
from .parts import _queue_keys as _queue_keys
from .parts import _rel as _rel
from .parts import _relabel as _relabel
from .parts import _relabel_ok as _relabel_ok
from .parts import _run_parts as _run_parts
from .parts import _stitch as _stitch
from .parts import _Table as _Table
from .parts import scan_commitlog as scan_commitlog
from .props import _ALTERNATING as _ALTERNATING
from .props import _FP_MUL as _FP_MUL
from .props import _NOT_SEPARATORS as _NOT_SEPARATORS
from .props import _PROPS_BATCH as _PROPS_BATCH
from .props import _check_props as _check_props
from .props import _index_keys as _index_keys
from .props import _keep as _keep
from .props import _one_by_one as _one_by_one
from .props import _prop_crc_scan as _prop_crc_scan
from .props import _Props as _Props
from .props import _props_checks as _props_checks
from .props import _props_vec as _props_vec
from .props import _record_checks as _record_checks
from .props import _topic_ids as _topic_ids
from .queues import Queue as Queue
from .queues import cq_recover_max_phy as cq_recover_max_phy
from .queues import load_queues as load_queues
from .records import _AR9 as _AR9
from .records import _CRC_TAG as _CRC_TAG
from .records import _INTACT_FAILURES as _INTACT_FAILURES
from .records import _KNOWN_SYSFLAG_BITS as _KNOWN_SYSFLAG_BITS
from .records import _LAYOUT as _LAYOUT
from .records import _MASK31 as _MASK31
from .records import _SCHEDULE as _SCHEDULE
from .records import _V4 as _V4
from .records import DAMAGED as DAMAGED
from .records import DEFAULT_PART_SIZE as DEFAULT_PART_SIZE
from .records import INNER_BATCH as INNER_BATCH
from .records import MAIN as MAIN
from .records import MAX_PER_PART as MAX_PER_PART
from .records import PHYS as PHYS
from .records import SALVAGED as SALVAGED
from .records import TX_BITS as TX_BITS
from .records import TX_SHIFT as TX_SHIFT
from .records import Event as Event
from .records import Gap as Gap
from .records import Part as Part
from .records import ScanOptions as ScanOptions
from .records import _Ctx as _Ctx
from .records import _Rec as _Rec
from .records import _tx_flags as _tx_flags
from .records import to_queue as to_queue
from .records import tx_type as tx_type
from .report import CODES as CODES
from .report import ERROR as ERROR
from .report import WARNING as WARNING
from .report import CheckSummary as CheckSummary
from .report import Finding as Finding
from .report import Progress as Progress
from .report import VerifyReport as VerifyReport
from .report import _int_or_none as _int_or_none
from .report import _plain as _plain
from .report import finding as finding
from .report import severity_of as severity_of
from .run import _cap as _cap
from .run import _Checked as _Checked
from .run import _code_counts as _code_counts
from .run import _cross_checks as _cross_checks
from .run import _report as _report
from .run import verify_store as verify_store
from .spans import MAX_RUNS as MAX_RUNS
from .spans import _runs as _runs
from .spans import _Spans as _Spans
from .spans import in_sorted as in_sorted
from .state import _checkpoint_findings as _checkpoint_findings
from .state import _state_findings as _state_findings
from .state import lock_held as lock_held
from .walk import _HOSTS_V6 as _HOSTS_V6
from .walk import _SYS_FLAG_AT as _SYS_FLAG_AT
from .walk import _TORN_HEAD as _TORN_HEAD
from .walk import _V4_BODY_AT as _V4_BODY_AT
from .walk import _V4_BODY_LEN_AT as _V4_BODY_LEN_AT
from .walk import PartScan as PartScan
from .walk import PartTask as PartTask
from .walk import _add_damaged as _add_damaged
from .walk import _body_crc_failures as _body_crc_failures
from .walk import _finish as _finish
from .walk import _first_prop_crc_stop as _first_prop_crc_stop
from .walk import _header_info as _header_info
from .walk import _rec_info as _rec_info
from .walk import _resync as _resync
from .walk import _scan as _scan
from .walk import _validate as _validate
from .walk import scan_part as scan_part

__all__ = [
    "CODES",
    "ERROR",
    "WARNING",
    "Finding",
    "CheckSummary",
    "VerifyReport",
    "verify_store",
    "scan_commitlog",
    "scan_part",
    "PartTask",
    "ScanOptions",
    "Records",
    "FileScan",
    "recovery_outlook",
    "lock_held",
    "severity_of",
    "DEFAULT_PART_SIZE",
]
