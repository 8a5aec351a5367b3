"""The report: finding codes (:data:`CODES`), :class:`Finding`, :class:`VerifyReport`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..findingcodes import FindingCode

Progress = Callable[[int], None]

ERROR = "error"
WARNING = "warning"

# The finding codes (recovery.findingcodes.FindingCode, one entry each): code -> (severity,
# meaning). man/rmqtool-verify.1 lists exactly these.

CODES: dict[FindingCode, tuple[str, str]] = {
    # layout (recovery.store.Store.issues)
    FindingCode.FILE_STRAY: (
        ERROR,
        "an entry in commitlog/ or in a queue directory that is not an offset-named file (a directory, or a name that is not a decimal offset): the broker fails to load the store",
    ),
    FindingCode.GEOMETRY_ASSUMED: (
        WARNING,
        "the index files' size fits several geometries (maxHashSlotNum, maxIndexNum) and neither an option nor --broker-config gave one: the message names the one assumed; the index files' sizes are not judged by it",
    ),
    FindingCode.FILE_IGNORED: (
        WARNING,
        "an entry the broker ignores: a queue directory whose name is not an int, a file where a topic directory belongs, a directory or non-numeric name in index/",
    ),
    FindingCode.FILE_UNSAFE: (
        ERROR,
        "an entry rmqtool never opens: a FIFO, a device, a socket, a dangling or looping symlink, a symlink leaving the store, a directory that cannot be read, a directory named abort (the broker takes it for the abort file; rmqtool never removes a directory); a dangling symlink is named with its target (abort is a symbolic link to X, which does not exist), and where it is abort, lock or checkpoint the message says what the broker makes of it: its File.exists is false for such a link, so an abort link to nothing is no abort file to it (no STORE_ABORT: its next start recovers normally); recover, repair and rebuild-index refuse the store until it is removed or replaced by a regular file or directory",
    ),
    FindingCode.FILE_SYMLINK: (
        WARNING,
        "a symlink inside the store that resolves inside it: read-only commands read through it, recover and rebuild-index refuse to change the store while it is there",
    ),
    FindingCode.DIR_UNWRITABLE: (
        WARNING,
        "a directory that recover or rebuild-index would have to write in and cannot (no write permission): they refuse the store",
    ),
    FindingCode.TOPIC_BAD_NAME: (
        ERROR,
        "a message whose topic the broker could not have created (empty, a NUL byte, a slash, . or .., longer than 255 bytes): it can have no consume queue, and recover and rebuild-index never make a path of it",
    ),
    FindingCode.FILE_MISNAMED: (WARNING, "an offset-named file whose name is not 20 digits"),
    FindingCode.FILE_ZERO_LENGTH: (
        ERROR,
        "a zero-length commitlog, consume queue or index file: the broker fails to load the store, and its range holds no data",
    ),
    FindingCode.FILE_ZERO_LENGTH_LAST: (
        WARNING,
        "a zero-length last file of its directory, which 5.1.3 and later delete at load",
    ),
    FindingCode.FILE_ZERO_LENGTH_LOST: (
        ERROR,
        "a zero-length last commitlog file that consume queue units point into: 5.1.3 and later delete it at load and cut those units, so their messages are lost",
    ),
    FindingCode.FILE_WRONG_SIZE: (
        ERROR,
        "a file whose length is not the mapped file size (a truncated or extended file): the broker fails to load the store",
    ),
    FindingCode.FILE_GAP: (ERROR, "a missing range between two files of a directory (a missing file)"),
    FindingCode.FILE_OVERLAP: (ERROR, "two files of a directory whose ranges overlap"),
    FindingCode.FILE_MISALIGNED: (WARNING, "a file whose start offset is not a multiple of the mapped file size"),
    # commitlog records
    FindingCode.CL_BAD_MAGIC: (ERROR, "the record walk stops at a record whose magic is neither a message nor BLANK"),
    FindingCode.CL_V2_UNSUPPORTED: (
        ERROR,
        "a V2 record (5.1.0+ magic), which the emulated broker version cannot read: its walk stops there",
    ),
    FindingCode.CL_TRUNCATED_RECORD: (ERROR, "a record that runs past the end of its file"),
    FindingCode.CL_BAD_LENGTH: (ERROR, "a negative TOTALSIZE or topic length, or a field longer than the whole record"),
    FindingCode.CL_SIZE_MISMATCH: (
        ERROR,
        "TOTALSIZE differs from the length computed from the record's fields. Where the broker's "
        "walk stops there and TOTALSIZE is Integer.MAX_VALUE or one less (more than any JVM array holds), "
        "the finding says that the broker's start aborts there (OutOfMemoryError, quirk Q10, before "
        "5.3.2): it does not start until the record is cut (rmqtool recover)",
    ),
    FindingCode.CL_BODY_CRC: (
        ERROR,
        "the body CRC (crc32 & 0x7FFFFFFF) does not match the body. Under checkCRCOnRecover=false (--no-crc or --broker-config) the broker's recovery does not check it and keeps the record: the finding says so, and the recovery outlook walks on past it",
    ),
    FindingCode.CL_BAD_DELAY_LEVEL: (
        ERROR,
        "a SCHEDULE_TOPIC_XXXX record whose DELAY property is not an int: the broker rejects the record",
    ),
    FindingCode.CL_BAD_INNER_BATCH: (
        ERROR,
        "a 5.x inner-batch record whose INNER_NUM is not a Java short or INNER_BASE not a Java long",
    ),
    FindingCode.CL_PROP_CRC: (ERROR, "the 5.2+ __CRC32# property does not match the record bytes"),
    FindingCode.CL_PROP_CRC_PRE_5_2: (
        WARNING,
        "a __CRC32# property that does not match the record bytes, under a broker version "
        "before 5.2 (which neither writes nor checks it: for such a broker it is ordinary data)",
    ),
    FindingCode.CL_PHYS_OFFSET_MISMATCH: (
        ERROR,
        "a record's stored PHYSICALOFFSET differs from file base + position (queues and index point at the stored value)",
    ),
    FindingCode.CL_DATA_AFTER_END: (
        ERROR,
        "the record walk ends (an all-zero header, a file end without BLANK, or a damaged header read as BLANK) but intact records follow: a zeroed or lost region inside the data, which recovery cuts or skips",
    ),
    FindingCode.CL_TORN_TAIL: (
        WARNING,
        "after a crash (abort present), the last record of the data is incomplete or garbled (no readable message header); recovery cuts it",
    ),
    FindingCode.CL_TORN_MESSAGE: (
        ERROR,
        "after a crash (abort present), the last record of the data has a readable message header but fails the broker's check (torn body, CRC, __CRC32# under forceVerifyPropCRC): recovery cuts it and the message is lost (offset, topic, queue offset and msg id where readable)",
    ),
    FindingCode.LAYOUT_DLEDGER: (
        ERROR,
        "a DLedger layout rmqtool does not decide on: a member's directory under a name no DLedger release uses, "
        "several members and no dLegerSelfId, data files holding classic commitlog records: the store is refused "
        "(exit 8, nothing checked)",
    ),
    FindingCode.LAYOUT_ROCKSDB_CQ: (
        ERROR,
        "a 5.2+ RocksDB consume queue verify cannot read (rocksdict, the rocksdb extra, missing, or the database does not open): the store is refused (exit 8); one it reads is checked instead (the RCQ_ codes)",
    ),
    FindingCode.LAYOUT_CQ_EXT: (ERROR, "ConsumeQueueExt files (consumequeue_ext/): the store is refused (exit 8)"),
    FindingCode.LAYOUT_BATCH_CQ: (
        ERROR,
        "BatchConsumeQueue files (batchconsumequeue/): no longer refused; rebuild-index, recover and repair write them; verify checks them instead (the BCQ_ codes) and never reports this one",
    ),
    FindingCode.LAYOUT_COMPACTION: (
        ERROR,
        "a compaction topic's log (compaction/compactionLog, compaction/compactionCq): the store is refused (exit 8)",
    ),
    FindingCode.LAYOUT_NEWER_RELEASE: (
        ERROR,
        "--broker-version auto: a file, directory, topic field or attribute no supported release writes (a newer release wrote the store): the store is refused (exit 8); --broker-version of the newest supported release judges it as that one, at the operator's risk",
    ),
    FindingCode.VERSION_CONTRADICTION: (
        ERROR,
        "--broker-version auto: the store's evidence names no one release (files of a newer release, an index or config of an older one): the store is refused (exit 8) until --broker-version names the release",
    ),
    FindingCode.UNSUPPORTED_SETTING: (
        ERROR,
        "a broker.conf setting whose effect on recovery rmqtool does not implement: the store is refused (exit 8)",
    ),
    FindingCode.CL_ZEROED_RECORD_TAIL: (
        ERROR,
        "the last record of the data ends in zero bytes inside its properties, its last field (a tail zeroed, or a write torn, inside the record): the broker keeps the record with those properties, and whatever followed it, acknowledged messages included, is gone without another trace",
    ),
    FindingCode.CL_GARBAGE_AFTER_END: (WARNING, "non-zero bytes after the end of the data that hold no intact record"),
    FindingCode.CL_SALVAGEABLE_RECORDS: (
        WARNING,
        'intact records found beyond a point where the record walk stops (how many, where, and how many the broker\'s recovery throws away). Where the broker\'s recovery throws them away, the message (and that of the stop itself) says "rmqtool repair keeps them", or, when the bytes from the stop to the next intact record of the file are fewer than the smallest record the broker\'s walk accepts (91 bytes; 111 under forceVerifyPropCRC), "rmqtool repair cannot keep them either": no filler exists for such a gap (rmqtool-repair(1))',
    ),
    FindingCode.CL_BAD_BLANK: (WARNING, "a BLANK end-of-file record whose TOTALSIZE is not the rest of the file"),
    FindingCode.CL_SYSFLAG: (
        WARNING,
        "SYSFLAG with unknown bits, an invalid compression type, or inner-batch bits on a 4.x store",
    ),
    FindingCode.CL_PROPERTIES: (
        WARNING,
        "a properties string that is not valid UTF-8 or has entries the broker's parser drops",
    ),
    FindingCode.CL_QUEUE_OFFSET: (
        WARNING,
        "QUEUEOFFSET values of a queue that do not advance by one in commitlog order",
    ),
    # consume queues
    FindingCode.DL_LEDGER_CUT: (
        ERROR,
        "DLedger's own recovery (DLedgerMmapFileStore.recover) stops at this entry (its pos, size, body length, "
        "magic, index sequence or term order fails) and truncates the ledger there: the messages after it are lost",
    ),
    FindingCode.DL_INDEX_MISMATCH: (
        WARNING,
        "a DLedger index unit differs from its entry or is missing: DLedger's recovery truncates the index there "
        "and rewrites every later unit from the entries (nothing is lost)",
    ),
    FindingCode.DL_UNCOMMITTED: (
        WARNING,
        "entries past the DLedger checkpoint's committedIndex: a broker alone in its group commits and dispatches "
        "them at its next start; in a group of several members the new leader may truncate them",
    ),
    FindingCode.DL_CHECKPOINT: (
        WARNING,
        "the DLedger checkpoint is missing or holds no committedIndex: no committed index is loaded at start",
    ),
    FindingCode.DL_TERM: (
        WARNING,
        "the DLedger currterm is missing, unreadable, or below the last entry's term",
    ),
    FindingCode.DL_ENTRY_FIELDS: (
        WARNING,
        "DLedger entries whose channel, chainCrc or bodyCrc is not 0 (no DLedger release writes them)",
    ),
    FindingCode.DL_BROKER_EXITS: (
        ERROR,
        "the broker exits at its start (System.exit(-1) in DLedgerMmapFileStore): a data or index file of the "
        "wrong size, or a ledger that ends more than a file before the last data file",
    ),
    FindingCode.DL_LOAD_REFUSED: (
        ERROR,
        "the broker's load() fails on the DLedger store: data or index files not one mapped size apart, or a "
        "checkpoint committedIndex that is not a number",
    ),
    FindingCode.DL_CLASSIC_AFTER_DIVIDE: (
        WARNING,
        "a classic commitlog file at or after the DLedger data's first offset: the broker never reads it",
    ),
    FindingCode.CQ_HOLE: (
        ERROR,
        "an all-zero unit before the queue's last valid unit: the broker's queue recovery truncates the queue there",
    ),
    FindingCode.CQ_BAD_UNIT: (
        ERROR,
        "an invalid unit (negative offset or non-positive size) that is not the end marker, or a fill-blank unit after real units",
    ),
    FindingCode.CQ_BAD_POINTER: (ERROR, "a unit whose commitlog offset is not the start of any record"),
    FindingCode.CQ_WRONG_RECORD: (
        ERROR,
        "a unit pointing at a record of another topic/queue, with another size or queue offset, or at a PREPARED or ROLLBACK transaction record (never in a queue)",
    ),
    FindingCode.CQ_TAGS_CODE: (
        ERROR,
        "a unit whose tagsCode is not the hash of the record's TAGS (or the delivery time on SCHEDULE_TOPIC_XXXX)",
    ),
    FindingCode.CQ_TAGS_CODE_Q1: (
        WARNING,
        "a SCHEDULE_TOPIC_XXXX unit with the TAGS-hash tagsCode that 4.9.2-4.9.8 write during abnormal recovery (quirk Q1)",
    ),
    FindingCode.CQ_PAST_END: (ERROR, "a unit pointing past the end of the commitlog data (the message is gone)"),
    FindingCode.CQ_BEFORE_MIN: (
        ERROR,
        "a unit pointing below the commitlog's first file after units that point at live data",
    ),
    FindingCode.CQ_INTO_DAMAGE: (
        WARNING,
        "a unit pointing into a damaged or missing commitlog region reported by another finding (the message is lost)",
    ),
    FindingCode.CQ_DISPATCH_LAG: (
        WARNING,
        "messages missing from their queue that the broker dispatches itself at its next start (a crash left the queue behind the commitlog)",
    ),
    FindingCode.CQ_MISSING_MESSAGE: (
        ERROR,
        "messages missing from their queue that the broker will not dispatch again",
    ),
    FindingCode.CQ_TOPIC_DELETED: (
        WARNING,
        "messages of a topic with no consume queue file that config/topics.json does not list: a deleted topic, whose messages stay in the commitlog",
    ),
    # batch consume queues
    FindingCode.BCQ_UNIT_INVALID: (
        ERROR,
        "a BatchConsumeQueue unit that fails the broker's rule (offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0) with written units after it, or the first of those: the broker's recovery cuts the queue there",
    ),
    FindingCode.BCQ_NO_RECORD: (
        ERROR,
        "a BatchConsumeQueue unit pointing where no intact record starts (past the end of the data, inside a record or into damage)",
    ),
    FindingCode.BCQ_WRONG_RECORD: (
        ERROR,
        "a BatchConsumeQueue unit pointing at a record of another topic or queue, or of another size",
    ),
    FindingCode.BCQ_NOT_INNER_BATCH: (
        ERROR,
        "a BatchConsumeQueue unit of more than one message whose record has no inner-batch flag (sysflag 0x80)",
    ),
    FindingCode.BCQ_BATCH_MISMATCH: (
        ERROR,
        "a BatchConsumeQueue unit whose batch size or base offset is not its record's (INNER_NUM, INNER_BASE and the record's queue offset; 1 and the queue offset for a record without the inner-batch flag)",
    ),
    FindingCode.BCQ_OFFSET_GAP: (
        ERROR,
        "a BatchConsumeQueue unit whose base offset does not continue the previous unit's batch (its base offset plus batch size): messages missing from the queue, or counted twice",
    ),
    FindingCode.BCQ_UNIT_FIELDS: (
        WARNING,
        "a BatchConsumeQueue unit whose store time or tagsCode is not its record's (the broker's dispatch writes the record's)",
    ),
    FindingCode.BCQ_DISPATCH_LAG: (
        WARNING,
        "records of a BatchCQ topic missing from their batch consume queue that the broker dispatches itself at its next start",
    ),
    FindingCode.BCQ_MISSING_MESSAGE: (
        ERROR,
        "records of a BatchCQ topic missing from their batch consume queue that the broker will not dispatch again",
    ),
    # the RocksDB consume queue
    FindingCode.RCQ_NO_RECORD: (
        ERROR,
        "a RocksDB consume queue unit pointing where no intact record starts (past the end of the data, inside a record or into damage)",
    ),
    FindingCode.RCQ_WRONG_RECORD: (
        ERROR,
        "a RocksDB consume queue unit pointing at a record of another topic or queue, of another size or at another queue offset",
    ),
    FindingCode.RCQ_UNIT_FIELDS: (
        WARNING,
        "a RocksDB consume queue unit whose store time or tagsCode is not its record's (the broker's dispatch writes the record's)",
    ),
    FindingCode.RCQ_HOLE: (
        ERROR,
        "queue offsets without a unit between two units of a RocksDB consume queue: the broker's reads stop at the first missing one",
    ),
    FindingCode.RCQ_OFFSET_TABLE: (
        ERROR,
        "a RocksDB consume queue's offset table max entry that is not its last unit (missing, before it or past it): the broker serves the queue up to that entry only",
    ),
    FindingCode.RCQ_CHECKPOINT: (
        ERROR,
        "the RocksDB consume queue's dispatch checkpoint (CHECKPOINT_TOPIC in the offset column family) past the end of the commitlog's data",
    ),
    FindingCode.RCQ_MALFORMED: (
        ERROR,
        "a key or value of the RocksDB consume queue not of the broker's layout (skipped by the broker's reads)",
    ),
    FindingCode.RCQ_DISPATCH_LAG: (
        WARNING,
        "records missing from the RocksDB consume queue that the broker dispatches itself at its next start",
    ),
    FindingCode.RCQ_MISSING_MESSAGE: (
        ERROR,
        "records missing from the RocksDB consume queue that the broker will not dispatch again",
    ),
    # index
    FindingCode.IDX_HEADER: (
        ERROR,
        "an index header inconsistent with its entries (counts, begin/end timestamps or offsets, entries after indexCount)",
    ),
    FindingCode.IDX_SLOT_COUNT_VERSION: (
        WARNING,
        "an index header's hashSlotCount follows the other versions' rule (4.6.0-4.7.0 count every put, "
        "later versions the slots in use): the file was written by a version other than --broker-version",
    ),
    FindingCode.IDX_SLOT_RANGE: (ERROR, "a hash slot or a chain link pointing outside [0, indexCount)"),
    FindingCode.IDX_CHAIN_CYCLE: (ERROR, "a chain link that does not point to an older entry (a possible cycle)"),
    FindingCode.IDX_CHAIN_BROKEN: (
        ERROR,
        "an entry not reachable from the hash slot of its key, or a chain shared or orphaned",
    ),
    FindingCode.IDX_BAD_ENTRY: (ERROR, "an entry pointing to no record start, or with a negative key hash"),
    FindingCode.IDX_PAST_END: (ERROR, "an entry pointing past the end of the commitlog data"),
    FindingCode.IDX_INTO_DAMAGE: (
        WARNING,
        "an entry pointing into a damaged or missing commitlog region reported by another finding",
    ),
    FindingCode.IDX_WRONG_HASH: (
        ERROR,
        "an entry whose key hash matches none of the keys (topic#UNIQ_KEY, topic#KEYS) of the record it points to",
    ),
    FindingCode.IDX_TIME_DIFF: (WARNING, "an entry whose timeDiff does not match the record's store timestamp"),
    FindingCode.IDX_DISPATCH_LAG: (
        WARNING,
        "messages missing from the index that the broker indexes itself at its next start",
    ),
    FindingCode.IDX_MISSING_KEYS: (
        ERROR,
        "messages (or some of their keys) missing from the index that the broker will not index again",
    ),
    # checkpoint
    FindingCode.CKPT_MISSING: (
        WARNING,
        "no checkpoint file (the broker creates a zero one; an abnormal recovery then scans every commitlog file)",
    ),
    FindingCode.CKPT_SIZE: (WARNING, "a checkpoint file whose size is not 4096 bytes"),
    FindingCode.CKPT_ZERO: (
        ERROR,
        "an all-zero checkpoint on a store with data that was shut down cleanly: it was lost or overwritten",
    ),
    FindingCode.CKPT_AHEAD: (
        WARNING,
        "checkpoint values beyond the data (a timestamp newer than every record, or a confirm offset past the end): flushed data is missing",
    ),
    # controller mode: the epoch file
    FindingCode.EPOCH_START_FAILS: (
        ERROR,
        "the epoch file (epochFileCheckpoint, controller mode) has a line that is not a number, or is empty: CheckpointFile.read throws NumberFormatException, which nothing catches, and the broker's store does not start (the .bak is not read)",
    ),
    FindingCode.EPOCH_UNREADABLE: (
        ERROR,
        "neither the epoch file nor its .bak can be used (a count or CRC that does not match, malformed UTF-8, no entries): the broker starts with no epochs and its next handshake as a slave copies everything from the master",
    ),
    FindingCode.EPOCH_BAK_USED: (
        WARNING,
        "the epoch file has no entries or fails its count or CRC: the broker reads epochFileCheckpoint.bak instead",
    ),
    FindingCode.EPOCH_PAST_END: (
        ERROR,
        "an epoch of the epoch file starts past the end of the commitlog after the next start's recovery: the data it says the replica holds is not there",
    ),
    FindingCode.EPOCH_NOT_RECORD_START: (
        ERROR,
        "an epoch of the epoch file starts inside the commitlog at an offset where no record starts: a handshake that takes it as the consistent point fails (truncateFiles refuses an offset that is not aligned)",
    ),
    # store state
    FindingCode.STORE_LOCKED: (
        WARNING,
        "a process holds store/lock: a broker seems to be running (results may be inconsistent)",
    ),
    FindingCode.STORE_ABORT: (
        WARNING,
        "the abort file is present: the broker did not shut down cleanly and runs abnormal recovery at its next start",
    ),
    FindingCode.STORE_PENDING_JOURNAL: (
        WARNING,
        "an unfinished rmqtool transaction journal (run rmqtool recover to finish or roll it back)",
    ),
    FindingCode.STORE_REPAIR_WORKDIR: (
        WARNING,
        "a work directory an interrupted rmqtool repair left beside the store (.STORE.rmqtool-repair-*): the real "
        "run of any destructive rmqtool command removes it, repair --yes for one (one a running rmqtool still "
        "holds is not reported)",
    ),
    # offset config files (config/consumerOffset.json, lmqConsumerOffset.json, delayOffset.json)
    FindingCode.CFG_UNREADABLE: (
        ERROR,
        "an offset config file that is empty, truncated, not JSON or has bytes after its JSON object: the broker loads its .bak instead (older offsets)",
    ),
    FindingCode.CFG_TABLE_LOST: (
        ERROR,
        "an offset config file the broker cannot use with no usable .bak, or one that decodes to null: the broker starts with an empty offset table",
    ),
    FindingCode.CFG_LOAD_FAILS: (
        ERROR,
        "neither an offset config file nor its .bak decodes: the broker's load fails and it does not start. Or a config file every start loads (topics.json, consumerOffset.json, subscriptionGroup.json, consumerFilter.json, delayOffset.json; its .bak where the file is missing or empty) is a FIFO: the broker's start blocks opening it (its FileInputStream waits for a writer) and never ends; rmqtool never opens it",
    ),
    FindingCode.CFG_BAK_UNREADABLE: (
        WARNING,
        "the .bak of an offset config file does not decode (the broker uses the main file)",
    ),
    FindingCode.CFG_ROCKSDB: (
        WARNING,
        "a 5.x RocksDB config store (config/consumerOffsets, config/rdb) whose offsets rmqtool does not read (rocksdict missing, or it does not open read-only)",
    ),
    # the 5.x timer store and the schedule queues (recovery.verify.timers)
    FindingCode.TIMER_FILE: (
        ERROR,
        "a timer file the broker cannot load: a timer log file of another size than mappedFileSizeTimerLog (MappedFileQueue.load fails), a timer wheel of another length than 38,707,200 bytes (TimerWheel throws), a file that is not a regular file or whose name is not an offset: the broker does not start",
    ),
    FindingCode.TIMER_LOG_CUT: (
        WARNING,
        "the broker's timer recovery ends the timer log before written units: at a unit whose size or magic is wrong (a zeroed or damaged page), dropping the units and files after it; the messages the timer queue still holds past the recovered queue offset are enqueued again, the others are lost",
    ),
    FindingCode.TIMER_UNIT_PAST_END: (
        ERROR,
        "a timer log unit the broker's next start reads (its slot is dequeued or still waits) points at a commitlog record that is gone (past the commitlog's end after the broker's recovery, or before its start): its message is lost",
    ),
    FindingCode.TIMER_UNIT_NOT_TIMER: (
        ERROR,
        "a timer log unit points at a commitlog record that is not a timer message (not in rmq_sys_wheel_timer): the broker delivers that record at the slot's time",
    ),
    FindingCode.TIMER_CHAIN_LOOP: (
        ERROR,
        "a timer wheel slot's chain of timer log units comes back to a unit it passed: the broker's dequeue goes round it for ever and the timer stops",
    ),
    FindingCode.TIMER_CHAIN_OUTSIDE: (
        WARNING,
        "a timer wheel slot the broker reads points outside the timer log (past its recovered end or into no file): the dequeue reads nothing there, whatever the slot held is lost",
    ),
    FindingCode.TIMER_CKPT_AHEAD: (
        ERROR,
        "the timer checkpoint is ahead of its data: a read time later than now (the slots before it are never dequeued), a flushed position past the timer log's end, or a queue offset past the timer queue's end",
    ),
    FindingCode.TIMER_CKPT_BEHIND: (
        WARNING,
        "the timer checkpoint is behind its queue: the broker's next start enqueues timer messages again that its timer log already holds (the broker was killed before the timer's checkpoint was flushed)",
    ),
    FindingCode.TIMER_LOST: (
        ERROR,
        "timer or delay messages that nothing will deliver: their commitlog record, their timer log unit or their slot is gone, or their slot lies before the read time the broker's next start begins at",
    ),
    FindingCode.TIMER_DELIVERED_TWICE: (
        WARNING,
        "messages already delivered (a copy is in their real topic) that the broker's next start delivers again",
    ),
    FindingCode.DELAY_OFFSET_PAST_END: (
        WARNING,
        "a delay level's offset in config/delayOffset.json is past its schedule queue's end (or before its start): the broker corrects it into the queue at its load",
    ),
}


def severity_of(code: FindingCode) -> str:
    return CODES[code][0]


@dataclass(frozen=True)
class Finding:
    """One problem: a stable code, its severity, where, and a one-line explanation."""

    code: FindingCode
    severity: str
    file: str | None
    pos: int | None
    physical_offset: int | None
    message: str
    details: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "file": self.file,
            "pos": self.pos,
            "physical_offset": self.physical_offset,
            "message": self.message,
            "details": _plain(dict(self.details)),
        }


def _plain(v: Any) -> Any:
    """JSON-ready values: numpy scalars become Python ones."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def finding(
    code: FindingCode, file: str | None, pos: int | None, physical_offset: int | None, message: str, **details: Any
) -> Finding:
    return Finding(
        code,
        CODES[code][0],
        file,
        _int_or_none(pos),
        _int_or_none(physical_offset),
        message.replace("\n", " "),
        details,
    )


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


@dataclass
class CheckSummary:
    """Counts for one check (one row of the summary table)."""

    name: str
    items: int = 0
    errors: int = 0
    warnings: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "error" if self.errors else "warning" if self.warnings else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "items": self.items,
            "errors": self.errors,
            "warnings": self.warnings,
            "stats": self.stats,
        }


@dataclass
class VerifyReport:
    store: str
    broker_version: str
    checks: list[CheckSummary]
    findings: list[Finding]
    summary: dict[str, Any]

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == WARNING)

    def problems(self, strict: bool = False) -> bool:
        """True when the report means "problems found": any error, or any warning with strict."""
        return self.errors > 0 or (strict and self.warnings > 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "broker_version": self.broker_version,
            "checks": [c.to_dict() for c in self.checks],
            "findings": [f.to_dict() for f in self.findings],
            "summary": self.summary,
        }
