"""The broker's recovery and dispatch rules, in one place.

rmqtool's copies of the RocketMQ store methods that decide what a broker keeps, cuts and
dispatches after a start. Each function is named after the Java method it mirrors (in
snake_case) and its docstring names the class and method and the versions where the rule
differs (those differences are :class:`~recovery.versions.BrokerProfile` properties).
``recover`` runs these functions, and ``verify``'s recovery outlook and ``reput`` call the
same ones, so the three cannot drift apart.

Only ``formats``, numpy and :mod:`recovery.versions` / :mod:`recovery.store` are imported.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ..formats import commitlog as cl
from ..formats.checkpoint import Checkpoint
from ..formats.consumequeue import CQ_UNIT_SIZE
from ..formats.errors import RecoveryError
from ..formats.indexfile import IndexHeader, read_header
from ..formats.names import index_name_after
from .store import StoreFile
from .versions import BrokerProfile

__all__ = [
    "MODE_NORMAL",
    "MODE_ABNORMAL",
    "CqRecovery",
    "consume_queue_recover",
    "mapped_file_queue_load",
    "truncate_dirty_files",
    "truncate_dirty_logic_files",
    "first_unit_where",
    "first_invalid_unit",
    "mapped_file_matched_recover",
    "is_mapped_file_matched_recover",
    "abnormal_threshold",
    "abnormal_start_index",
    "rocks_abnormal_start_index",
    "start_file_index",
    "goes_to_consume_queue",
    "goes_to_index",
    "goes_to_consume_queue_batch",
    "goes_to_index_batch",
    "index_header_load",
    "index_file_deleted_at_load",
    "parse_index_file_name",
    "new_index_file_name",
]

MODE_NORMAL = "normal"
MODE_ABNORMAL = "abnormal"

FIRST_CHUNK = 1 << 12  # units looked at first by the unit scans (the chunk doubles after each)

_F = TypeVar("_F")


# ======================================================================================
# Dispatch predicates (CommitLogDispatcherBuildConsumeQueue / BuildIndex; RECOVERY §9.1)

_TX_MASK = cl.TRANSACTION_MASK
_TX_NOT = 0x0  # MessageSysFlag.TRANSACTION_NOT_TYPE
_TX_COMMIT = 0x8  # MessageSysFlag.TRANSACTION_COMMIT_TYPE


def goes_to_consume_queue(sys_flag: int) -> bool:
    """``CommitLogDispatcherBuildConsumeQueue.dispatch`` (DefaultMessageStore, every
    version): NOT_TYPE and COMMIT records are put into their consume queue, PREPARED and
    ROLLBACK never (RECOVERY §9.1)."""
    return (sys_flag & _TX_MASK) in (_TX_NOT, _TX_COMMIT)


def goes_to_index(sys_flag: int) -> bool:
    """``IndexService.buildIndex`` (every version): everything but a ROLLBACK record is
    indexed (RECOVERY §9.1, §9.3)."""
    return bool((sys_flag & _TX_MASK) != cl.TRANSACTION_ROLLBACK)


def goes_to_consume_queue_batch(sys_flags: np.ndarray) -> np.ndarray:
    """:func:`goes_to_consume_queue` for an array of SYSFLAG values (a bool array)."""
    tx = np.asarray(sys_flags) & _TX_MASK
    return (tx == _TX_NOT) | (tx == _TX_COMMIT)  # type: ignore[no-any-return]


def goes_to_index_batch(sys_flags: np.ndarray) -> np.ndarray:
    """:func:`goes_to_index` for an array of SYSFLAG values (a bool array)."""
    return (np.asarray(sys_flags) & _TX_MASK) != cl.TRANSACTION_ROLLBACK  # type: ignore[no-any-return]


# ======================================================================================
# Consume queues: ConsumeQueue.recover, truncateDirtyFiles, truncateDirtyLogicFiles


def _first_in_chunks(n: int, start: int, bad: Callable[[int, int], np.ndarray]) -> int:
    """The first index ``i >= start`` where ``bad(lo, hi)[i - lo]`` holds, ``n`` if none:
    looked at in chunks that double, so that a scan that stops early costs little."""
    i = start
    step = FIRST_CHUNK
    while i < n:
        j = min(n, i + step)
        hit = np.flatnonzero(bad(i, j))
        if len(hit):
            return i + int(hit[0])
        i = j
        step *= 2
    return n


def first_unit_where(units: Any, start: int, bad: Callable[[Any], np.ndarray]) -> int:
    """Index of the first unit at or after ``start`` where ``bad`` holds (``len(units)``
    when none): the broker's unit-by-unit scan, in chunks that double, so that a queue's
    file of a few units (mostly zeros, often holes) costs a few units, not the whole file."""
    return _first_in_chunks(len(units), start, lambda i, j: bad(units[i:j]))


def first_invalid_unit(offsets: np.ndarray, sizes: np.ndarray, start: int = 0) -> int:
    """The first unit at or after ``start`` that fails the broker's only validity rule
    (``offset >= 0 && size > 0``; ConsumeQueue.recover, every version)."""
    return _first_in_chunks(len(offsets), start, lambda i, j: (offsets[i:j] < 0) | (sizes[i:j] <= 0))


class CqRecovery(NamedTuple):
    """Where ``ConsumeQueue.recover`` leaves a queue: the file (an index into the files
    given) its scan ended in, the valid units in that file and maxPhysicOffset (-1: none)."""

    stop_file: int
    valid_units: int
    max_physic_offset: int


def consume_queue_recover(
    n_files: int, units_of: Callable[[int], tuple[np.ndarray, np.ndarray]], file_size: int
) -> CqRecovery:
    """``ConsumeQueue.recover`` (RocketMQ 4.6.0-5.3.3, unchanged; RECOVERY §3): scan from
    the third-last file; the first unit with ``offset < 0 or size <= 0`` ends the queue;
    a file that is entirely valid continues into the next one. ``units_of(i)``: the
    (commitlog offsets, sizes) of file ``i``'s units, at least up to its first invalid one
    (the units after it are never looked at). The write position is
    ``files[stop_file].base + valid_units * CQ_UNIT_SIZE``; with no files it is
    ``CqRecovery(-1, 0, -1)``."""
    if n_files <= 0:
        return CqRecovery(-1, 0, -1)
    i = max(0, n_files - 3)
    max_phy = -1
    while True:
        off, size = units_of(i)
        n = first_invalid_unit(off, size)
        if n:
            max_phy = int(off[n - 1]) + int(size[n - 1])
        if n * CQ_UNIT_SIZE == file_size and i + 1 < n_files:
            i += 1
            continue
        return CqRecovery(i, n, max_phy)


def mapped_file_queue_load(files: Sequence[StoreFile], file_size: int, profile: BrokerProfile) -> StoreFile | None:
    """``MappedFileQueue.load`` (every version): the first of ``files`` (name order) whose
    length is not the mapped file size, which fails the load (the broker changes nothing
    and does not start), or None when every file loads. 5.1.3 and later
    (``MappedFileQueue.doLoad``) first delete a zero-length last file
    (``profile.zero_length_last_file_deleted``)."""
    for i, f in enumerate(files):
        if f.size == file_size:
            continue
        if f.size == 0 and i == len(files) - 1 and profile.zero_length_last_file_deleted:
            continue
        return f
    return None


def truncate_dirty_files(
    files: Sequence[_F], bases: Sequence[int], file_size: int, offset: int
) -> tuple[list[_F], list[_F]]:
    """``MappedFileQueue.truncateDirtyFiles(offset)`` (every version): the files kept and
    the files deleted, those that begin after ``offset`` (a file holding ``offset`` is
    kept; its write position moves there)."""
    kept: list[_F] = []
    removed: list[_F] = []
    for f, base in zip(files, bases, strict=True):
        (removed if base + file_size > offset and offset < base else kept).append(f)
    return kept, removed


def truncate_dirty_logic_files(
    units_of: Callable[[int], np.ndarray], bases: list[int], file_size: int, phy: int
) -> tuple[int, int | None, int]:
    """``ConsumeQueue.truncateDirtyLogicFiles(phy)`` (RocketMQ 4.6.0-5.3.3, unchanged;
    RECOVERY §7.1) on a queue whose files start at ``bases`` (ascending); ``units_of(base)``:
    that file's units (``CQ_DTYPE``). Returns (files kept, write offset or None,
    maxPhysicOffset). ``file_size`` is not needed by the rule (the signature mirrors the
    other consume-queue rules).

    Quirks kept: the first unit of the last file is not validated (an all-zero first unit
    is kept when phy > 0); the scan returns at the first invalid unit."""
    max_phy = phy
    n = len(bases)
    while n:
        base = bases[n - 1]
        u = units_of(base)
        off = u["commitlog_offset"]
        size = u["size"]
        if int(off[0]) >= phy:
            n -= 1  # the whole file goes
            continue
        max_phy = int(off[0]) + int(size[0])
        k = first_unit_where(
            u, 1, lambda r: (r["commitlog_offset"] < 0) | (r["size"] <= 0) | (r["commitlog_offset"] >= phy)
        )
        # (k: units kept in this file)
        if k > 1:
            max_phy = int(off[k - 1]) + int(size[k - 1])
        return n, base + k * CQ_UNIT_SIZE, max_phy
    return 0, None, max_phy


# ======================================================================================
# CommitLog recovery: the start file (RECOVERY §4.1, §4.2, §5.1)

_MAGIC_AT = cl.HEADER_OFFSETS[0]["magic"]
_SYSFLAG_AT = cl.HEADER_OFFSETS[0]["sys_flag"]
_SYSFLAG_END = _SYSFLAG_AT + cl.SYSFLAG.size
_I32 = cl.SYSFLAG  # a big-endian int32
_STORE_TS_SIZE = 8
# bytes of a file's head that hold the first record's store timestamp, whatever its hosts
MATCH_HEAD_SIZE = max(h["store_timestamp"] for h in cl.HEADER_OFFSETS) + _STORE_TS_SIZE


def mapped_file_matched_recover(head: bytes, profile: BrokerProfile, threshold: int) -> bool:
    """``CommitLog.isMappedFileMatchedRecover`` on the first bytes of a commitlog file
    (``MATCH_HEAD_SIZE`` or fewer): only the first record's magic and store timestamp are
    looked at; a zero store timestamp never matches. 4.x takes the V1 magic only, 5.1.0+
    the V2 magic too (``profile.accepts_v2``). ``threshold``: :func:`abnormal_threshold`."""
    if len(head) < _SYSFLAG_END:
        return False
    magic = _I32.unpack_from(head, _MAGIC_AT)[0]
    if magic != cl.MAGIC_V1 and not (profile.accepts_v2 and magic == cl.MAGIC_V2):
        return False
    sys_flag = _I32.unpack_from(head, _SYSFLAG_AT)[0]
    at = cl.HEADER_OFFSETS[(sys_flag & 0x30) >> 4]["store_timestamp"]
    if len(head) < at + _STORE_TS_SIZE:
        return False
    store_ts = int.from_bytes(head[at : at + _STORE_TS_SIZE], "big", signed=True)
    if store_ts == 0:
        return False
    return store_ts <= threshold


def is_mapped_file_matched_recover(f: StoreFile, profile: BrokerProfile, threshold: int) -> bool:
    """:func:`mapped_file_matched_recover` on commitlog file ``f``."""
    with open(f.path, "rb") as fh:
        head = fh.read(MATCH_HEAD_SIZE)
    return mapped_file_matched_recover(head, profile, threshold)


def abnormal_threshold(ckpt: Checkpoint, message_index_safe: bool) -> int:
    """``StoreCheckpoint.getMinTimestamp`` (min of physic and logics, - 3 s) or, with
    messageIndexSafe, ``getMinTimestampIndex`` (also min with indexMsgTimestamp)."""
    return int(ckpt.min_timestamp_index if message_index_safe else ckpt.min_timestamp)


def abnormal_start_index(files: list[StoreFile], profile: BrokerProfile, ckpt: Checkpoint) -> int:
    """``CommitLog.recoverAbnormally``'s start file (every version): the last file whose
    first record matches (:func:`is_mapped_file_matched_recover`) against the profile's
    messageIndexSafe threshold (:func:`abnormal_threshold`), else the first file."""
    threshold = abnormal_threshold(ckpt, profile.message_index_safe)
    for i in range(len(files) - 1, -1, -1):
        if is_mapped_file_matched_recover(files[i], profile, threshold):
            return i
    return 0


_PHY_AT = cl.HEADER_OFFSETS[0]["physical_offset"]


def rocks_abnormal_start_index(files: list[StoreFile], checkpoint: int) -> int:
    """``CommitLog.recoverAbnormally``'s start file on a storeType=defaultRocksDB store before
    5.4.0 (5.2.0-5.3.3, ``isMappedFileMatchedRecover`` under ``isEnableRocksDBStore``): the last
    file whose first bytes carry a message's magic code (V1 or V2; nothing else of the record
    is read, not its store timestamp) and whose PHYSICALOFFSET field is at or below the RocksDB
    consume queue's dispatch checkpoint; the first file when none is."""
    for i in range(len(files) - 1, -1, -1):
        with open(files[i].path, "rb") as fh:
            head = fh.read(_PHY_AT + 8)
        if len(head) < _PHY_AT + 8 or _I32.unpack_from(head, _MAGIC_AT)[0] not in cl.MESSAGE_MAGICS:
            continue
        if int.from_bytes(head[_PHY_AT : _PHY_AT + 8], "big", signed=True) <= checkpoint:
            return i
    return 0


def first_record_matched_recover(
    f: StoreFile,
    profile: BrokerProfile,
    ckpt: Checkpoint,
    normal: bool,
    max_cq: int,
    message_index_safe: bool,
    check_crc: bool,
    rocks_cq: bool = False,
) -> bool:
    """5.4.0+ ``CommitLog.isMappedFileMatchedRecover(mappedFile, recoverNormally)``
    (``profile.recovery_start_checks_first_record``): the file's first record read by
    ``checkMessageAndReturnSize`` (every check of the walk, the body CRC under
    checkCRCOnRecover) must be a message with a store timestamp other than 0; with
    messageIndexSafe (messageIndexEnable is on: rmqtool refuses it off) its store timestamp
    must not pass the checkpoint's indexMsgTimestamp (5.5.0+: IndexService's rule, the same);
    then the consume queue store's rule: normal recovery, its PHYSICALOFFSET field at or
    below maxPhyOffsetOfCQ; abnormal recovery, 5.4.0 its store timestamp at or below
    min(physic, logics) - 3 s, 5.5.0+ (``profile.abnormal_start_by_logics_offset``) its
    PHYSICALOFFSET at or below the checkpoint's logicsPhysicalOffset, or where that is 0 or
    less its store timestamp at or below logicsMsgTimestamp. ``rocks_cq`` (storeType=defaultRocksDB:
    the queue store is RocksDBConsumeQueueStore, whose rule is the PHYSICALOFFSET field at or below
    its dispatch checkpoint, ``max_cq``, in both modes)."""
    from . import check as ck  # (check does not import this module; kept local all the same)
    from .store import MappedFile

    if f.size < 8:
        return False
    with MappedFile(f.path) as mf:
        c = ck.check_record(mf.buf, 0, mf.size, profile, check_crc=check_crc, read_body=True)
        if not c.is_message or c.rec is None:
            return False
        ts, phy = int(c.rec.store_timestamp), int(c.rec.physical_offset)
        del c
    if ts == 0:
        return False
    if message_index_safe and ts > ckpt.index_msg_timestamp:
        return False
    if normal or rocks_cq:
        return phy <= max_cq
    if profile.abnormal_start_by_logics_offset:
        if ckpt.logics_physical_offset <= 0:
            return ts <= ckpt.logics_msg_timestamp
        return phy <= ckpt.logics_physical_offset
    return ts <= ckpt.min_timestamp


def _start_by_first_record(
    files: list[StoreFile],
    profile: BrokerProfile,
    ckpt: Checkpoint,
    normal: bool,
    max_cq: int,
    safe: bool,
    check_crc: bool,
    rocks_cq: bool = False,
) -> int:
    """5.4.0+ recoverNormally / recoverAbnormally: from the last file back, the first file
    :func:`first_record_matched_recover` takes, looking at no more than
    ``profile.recovery_start_file_limit`` files (commitLogRecoverMaxNum: the last one looked
    at is taken); normal recovery never looks at the first file (it is taken when nothing
    later is), abnormal recovery takes the first file when no file matched."""
    limit = profile.recovery_start_file_limit or len(files)
    i = len(files) - 1
    left = limit
    while i > 0 if normal else i >= 0:
        left -= 1
        if (
            first_record_matched_recover(files[i], profile, ckpt, normal, max_cq, safe, check_crc, rocks_cq)
            or left <= 0
        ):
            break
        i -= 1
    return max(i, 0)


def start_file_index(
    files: list[StoreFile],
    profile: BrokerProfile,
    ckpt: Checkpoint,
    mode: str,
    max_cq: int,
    rocks_cq: bool = False,
) -> tuple[int, str]:
    """The commitlog file the broker's recovery starts from, and the rule that chose it:
    ``CommitLog.recoverNormally`` (the third-last file; 5.3.2+, ``profile.normal_recovery_walkback``:
    the last file starting at or below maxPhyOffsetOfCQ; 5.4.0+ the first record's test,
    :func:`first_record_matched_recover`) or ``CommitLog.recoverAbnormally``
    (:func:`abnormal_start_index`; 5.4.0+ :func:`first_record_matched_recover`). The one
    place recover's plan and verify's (and repair's) recovery outlook take it from;
    messageIndexSafe and checkCRCOnRecover are the profile's. ``rocks_cq``: a
    storeType=defaultRocksDB store, ``max_cq`` its RocksDB queue's dispatch checkpoint, which
    its abnormal recovery's start file is chosen by too (:func:`rocks_abnormal_start_index`
    before 5.4.0)."""
    safe = profile.message_index_safe
    if profile.recovery_start_checks_first_record and files:
        crc = profile.check_crc_on_recover
        normal = mode == MODE_NORMAL
        i = _start_by_first_record(files, profile, ckpt, normal, max_cq, safe, crc, rocks_cq)
        limit = f", at most {profile.recovery_start_file_limit} files from the last (commitLogRecoverMaxNum)"
        if normal:
            what = "whose PHYSICALOFFSET is at or below maxPhyOffsetOfCQ"
        elif rocks_cq:
            what = f"whose PHYSICALOFFSET is at or below the RocksDB consume queue's dispatch checkpoint {max_cq}"
        elif profile.abnormal_start_by_logics_offset and ckpt.logics_physical_offset > 0:
            what = f"whose PHYSICALOFFSET is at or below the checkpoint's logicsPhysicalOffset {ckpt.logics_physical_offset}"
        elif profile.abnormal_start_by_logics_offset:
            what = f"stored at or before the checkpoint's logicsMsgTimestamp {ckpt.logics_msg_timestamp}"
        else:
            what = f"stored at or before min(physic, logics) - 3 s = {ckpt.min_timestamp}"
        index = f", not after indexMsgTimestamp {ckpt.index_msg_timestamp} (messageIndexSafe)" if safe else ""
        return i, f"last file whose first record reads as a message {what}{index}{limit} ({profile.label})"
    if mode == MODE_NORMAL:
        if profile.normal_recovery_walkback:
            i = len(files) - 1
            while i > 0 and files[i].base > max_cq:
                i -= 1
            return i, "last file starting at or below maxPhyOffsetOfCQ (5.3.2+)"
        return max(0, len(files) - 3), "third-last file"
    if rocks_cq:
        return (
            rocks_abnormal_start_index(files, max_cq),
            "last file whose first record has a message's magic code and a PHYSICALOFFSET at or below the RocksDB "
            f"consume queue's dispatch checkpoint {max_cq} (storeType=defaultRocksDB), else the first",
        )
    threshold = abnormal_threshold(ckpt, safe)
    what = "min(physic, logics, index) - 3 s (messageIndexSafe)" if safe else "min(physic, logics) - 3 s"
    return (
        abnormal_start_index(files, profile, ckpt),
        f"last file whose first message is stored at or before {what} = {threshold}",
    )


# ======================================================================================
# Index files: the header (IndexHeader.load) and the names of new files


def index_header_load(f: StoreFile) -> IndexHeader:
    """``IndexHeader.load`` (every version): the header of index file ``f`` (zeros past the
    end of a file shorter than 40 bytes; the stored indexCount, see
    ``IndexHeader.loaded_index_count`` for what the broker makes of it)."""
    return read_header(f.path)


def index_file_deleted_at_load(header: IndexHeader, ckpt: Checkpoint) -> bool:
    """``IndexService.load(lastExitOK=false)`` (every version; RECOVERY §8): after an
    abnormal exit the load deletes an index file whose endTimestamp is later than the
    checkpoint's indexMsgTimestamp."""
    return bool(int(header.end_timestamp) > ckpt.index_msg_timestamp)


def parse_index_file_name(name: str, tz: _dt.tzinfo | None = None) -> int | None:
    """Inverse of ``formats.names.index_file_name`` (``IndexService`` names a new file
    ``UtilAll.timeMillisToHumanString(now)``): ms since the epoch in ``tz`` (UTC when None),
    or None for a name that is not 17 digits of a valid time."""
    if len(name) != 17 or not name.isascii() or not name.isdigit():
        return None
    try:
        t = _dt.datetime(
            int(name[0:4]),
            int(name[4:6]),
            int(name[6:8]),
            int(name[8:10]),
            int(name[10:12]),
            int(name[12:14]),
            tzinfo=tz or _dt.UTC,
        )
    except ValueError:
        return None
    return int(t.timestamp()) * 1000 + int(name[14:17])


def new_index_file_name(
    ms: int, tz: _dt.tzinfo | None, floor: str | None, taken: Collection[str] = ()
) -> tuple[int, str]:
    """The name of an index file rmqtool creates, and the time it stands for: the broker
    names a new file after its wall clock (``IndexService.getAndCreateLastIndexFile``);
    rmqtool, deterministically, after ``ms`` (the store timestamp of the record that
    created the file) in zone ``tz``, bumped by 1 ms until it sorts after ``floor`` and is
    not in ``taken`` (RECOVERY §14.4)."""
    while True:  # (each pass past a taken name is one step: taken is small)
        found = index_name_after(ms, floor, tz)
        if found is None:
            raise RecoveryError(
                f"no index file name sorts after {floor!r}: rename or remove that index file "
                "(the broker orders index files by name)",
                "index",
            )
        ms, name = found
        if name not in taken:
            return ms, name
        ms += 1
