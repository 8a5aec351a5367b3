"""``rmqtool recover``: the broker's start-up recovery, run offline, planned first.

The plan (:func:`plan_recovery`) is a pure computation from the store's bytes, in the
broker's order (RECOVERY.md §1.1, §1.5):

1. ConsumeQueue recovery per queue (§3): from the third-last file, the unit validity rule
   ``offset >= 0 and size > 0``, the queue's write position and maxPhysicOffset; later
   files are deleted (here: moved to the backup).
2. ``maxPhyOffsetOfCQ`` over all queues.
3. CommitLog recovery, normal (§4.1: the third-last file; §4.2 5.3.2+: the walk-back start)
   or abnormal (§5.1: the checkpoint-timestamp start rule with its 3 s margin, or the
   messageIndexSafe variant; §5.2 scan). Records are checked as
   ``checkMessageAndReturnSize(checkCRC=checkCRCOnRecover, readBody=true)`` does
   (:func:`recovery.check.check_record`); the walk is split over worker processes (each
   file, or each slice of a big file, is walked independently and the pieces are joined).
4. ``truncate_dirty_files`` for the commitlog (§6) and ``truncate_dirty_logic_files`` for
   every queue (§7.1, only when ``maxPhyOffsetOfCQ >= processOffset``), quirks included.
5. Index files after an abnormal exit (§8): the broker's rule picks the files it deletes.
6. The dispatch: abnormal recovery's own dispatch from the start file (quirk Q1: 4.9.2-4.9.8
   dispatch SCHEDULE_TOPIC_XXXX records with maxDelayLevel 0), then the 4.x start-up reput
   from the consume queues' max physical offset (§9.5).
7. The checkpoint as the broker leaves it after that start and a clean shutdown (§12), and
   no abort file.

Applying (:func:`apply_recovery`) goes through :class:`recovery.safety.StoreTransaction`:
a backup with a manifest, staging, renames, fsync and a journal in the store, so a kill at
any point followed by a rerun completes the recovery and ``rmqtool restore`` gives the
original bytes back.

Deviations from the broker, by design (each reported in the plan, or in the run's output
where applying finds it):

* The commitlog bytes after the end offset are zero-filled in place (after being copied to
  the backup), so the file keeps its mapped size and the cut records can never come back
  (the broker only moves its write position, quirk Q5). ConsumeQueue units past a queue's
  end are zero-filled the same way. Where the cut units the broker keeps would pin its
  every later start's reput at the end offset (a queue taken whole counts it), recover,
  having zero-filled them, also does the reput of the broker's next start on its result,
  so an intact record whose unit was cut gets it back and a second run has nothing to do.
* Deleted files (commitlog files after the end, consume queue files after a queue's end,
  the index files the broker discards) are moved to the backup, not deleted.
* The broker loses the index entries of the records between the last index file it keeps
  and the recovery start file (RocketMQ issues #3868, #8007; RECOVERY §8). Unless
  ``reindex=False``, those records are re-indexed, so every message stays findable by key.
* New index files are named after the store timestamp of the record that created them
  (the broker uses its wall clock; RECOVERY §14.4), in the time zone inferred from the
  existing index file names.
* Quirk Q1 is reproduced by default (byte-identical CQ files); ``correct_delay_tags=True``
  writes the real delivery time instead. Either way, the units whose tagsCode differs
  from the real delivery time are counted.

Only ``formats``, the stdlib and numpy are imported here; the CLI lives in
``rmqtool/cli/commands/recover.py``. Progress is a plain callback ``progress(n_bytes)``.

Modules: :mod:`.model` (the plan's records), :mod:`.queues` (step 1, and a queue while
applying), :mod:`.walk` (step 3, the parallel walk), :mod:`.indexfiles` (index file reads),
:mod:`.salvage` (the cut region's records, ``--salvage-to``), :mod:`.planning` with
:mod:`.planstate`, :mod:`.plancommitlog` and :mod:`.planindex` (the plan's steps),
:mod:`.applying` with :mod:`.applystate` and :mod:`.writing` (applying it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import LazyExports
from .indexfiles import infer_index_tz
from .model import (
    LAYOUT,
    UNREAD_DAMAGE,
    CommitlogCut,
    DispatchRange,
    FileScan,
    IndexDiscard,
    IndexKept,
    IndexTruncation,
    Problem,
    Progress,
    QueuePlan,
    RecoveryContext,
    RecoveryPlan,
    RemovedFile,
)
from .planning import plan_recovery
from .queues import frozen_queues, recover_queue
from .salvage import write_salvage
from .unloadable import (
    refuse_repair_at_unknown_cq_size,
    refuse_unknown_cq_size,
    refuse_unloadable,
    refused_commitlog_file,
)
from .walk import recovery_stop, scan_files

__all__ = [
    "LAYOUT",
    "UNREAD_DAMAGE",
    "ApplyResult",
    "CommitlogCut",
    "DispatchRange",
    "FileScan",
    "IndexDiscard",
    "IndexKept",
    "IndexTruncation",
    "Problem",
    "Progress",
    "QueuePlan",
    "RecoveryContext",
    "RecoveryPlan",
    "RemovedFile",
    "apply_recovery",
    "frozen_queues",
    "infer_index_tz",
    "plan_recovery",
    "recover_queue",
    "recovery_stop",
    "refuse_repair_at_unknown_cq_size",
    "refuse_unknown_cq_size",
    "refuse_unloadable",
    "refused_commitlog_file",
    "scan_files",
    "write_salvage",
]

if TYPE_CHECKING:
    from .applying import apply_recovery
    from .applystate import ApplyResult

# start-up time: applying (reput, the writers) is imported at the first use of one of its
# names, which a plan alone (rmqtool info, verify, recover with nothing to do) never makes
__getattr__ = LazyExports(__name__, {"apply_recovery": ".applying", "ApplyResult": ".applystate"})
