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

from .commitlog import walk_summary as walk_summary
from .outlook import recovery_outlook as recovery_outlook
from .parts import FileScan as FileScan
from .parts import Records as Records
from .parts import scan_commitlog as scan_commitlog
from .queues import Queue as Queue
from .queues import cq_recover_max_phy as cq_recover_max_phy
from .queues import load_queues as load_queues
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
from .records import to_queue as to_queue
from .records import tx_type as tx_type
from .report import CODES as CODES
from .report import ERROR as ERROR
from .report import WARNING as WARNING
from .report import CheckSummary as CheckSummary
from .report import Finding as Finding
from .report import Progress as Progress
from .report import VerifyReport as VerifyReport
from .report import finding as finding
from .report import severity_of as severity_of
from .run import verify_store as verify_store
from .spans import MAX_RUNS as MAX_RUNS
from .spans import in_sorted as in_sorted
from .state import lock_held as lock_held
from .walk import PartScan as PartScan
from .walk import PartTask as PartTask
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
