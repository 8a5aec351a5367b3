"""The broker's own configuration file (``mqbroker -c broker.conf``), read as the broker
reads it, and the one table that decides, for every setting of ``MessageStoreConfig`` and
``BrokerConfig`` of RocketMQ 4.6.0-5.5.1, what rmqtool does with it.

Reading: ``java.util.Properties.load(InputStream)`` (ISO-8859-1, ``#``/``!`` comments,
``=``/``:``/white-space separators, backslash continuation lines and escapes, the last
occurrence of a key wins), then ``MixAll.properties2Object``: a key is a setter name with
its first letter lower-cased; an int or long value goes through ``Integer.parseInt`` /
``Long.parseLong`` *untrimmed* (a value the parser rejects leaves the default in place,
silently, in the broker; rmqtool says so); a boolean is ``Boolean.parseBoolean`` (``true``
in any case, anything else is false); a String is trimmed; an enum (``brokerRole``,
``flushDiskType``) goes through its String setter, ``valueOf``.

Deciding: each setting is one of
  location    where the store is (honoured: STORE, the commitlog directory),
  geometry    file sizes and index slots/entries (honoured: as the geometry options),
  recovery    changes what recovery or the dispatch decides (honoured exactly, or refused
              when rmqtool does not implement the value given),
  irrelevant  a running broker's service (flush, HA, clean-up, network, timers, POP, ...)
              that never changes what recovery reads, cuts or writes.
A setting whose value rmqtool does not implement makes every command refuse the store
(exit 8, nothing changed): :func:`refusals`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats.errors import RmqToolError
from .brokersetters import SAMPLED, SETTERS
from .findingcodes import FindingCode
from .javaprops import BrokerConfigError, load_properties
from .versions import DEFAULT_DELAY_LEVELS, BrokerProfile, parse_delay_levels, parse_version

LOCATION = "location"
GEOMETRY = "geometry"
RECOVERY = "recovery"
IRRELEVANT = "irrelevant"

# the setters of the sampled releases (SAMPLED: letter -> version) are in brokersetters.py


@dataclass(frozen=True)
class Setting:
    name: str
    owner: str  # MessageStoreConfig | BrokerConfig
    type: str  # int long boolean double String
    seen_in: tuple[str, ...]  # sampled releases that have the setter


def _load_setters() -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for line in SETTERS.strip().splitlines():
        tag, name, typ, seen = line.split()
        out[name] = Setting(
            name, "MessageStoreConfig" if tag == "S" else "BrokerConfig", typ, tuple(SAMPLED[c] for c in seen)
        )
    return out


SETTINGS: dict[str, Setting] = _load_setters()


def _delay_levels(text: str) -> tuple[int, ...]:
    """messageDelayLevel as the profile holds it: the delay of each level in ms (an empty
    value: the broker's 18 levels)."""
    return tuple(parse_delay_levels(text or DEFAULT_DELAY_LEVELS))


@dataclass(frozen=True)
class Road:
    r"""How an honoured setting reaches the code that honours it, and the one way it does:
    broker.conf, unless the rmqtool option that mirrors it is given (an explicit option
    wins), lands either in a ``BrokerProfile`` field (``field``: every rule of recovery,
    verify's outlook and the dispatch reads it there; ``dataclasses.replace(profile, ...)``
    sets it) or, where it is no broker behaviour, in a parameter of the command (``param``
    alone: the store's geometry, repair's filler size). rmqtool/cli/brokeropts.py walks these
    roads in one loop and declares the options of the ``group``\ s it owns."""

    flag: str  # the option as --help spells it ("STORE": the argument)
    param: str  # the parameter click passes the option as (the profile field's value comes from it)
    field: str | None = None  # the BrokerProfile field it sets
    negated: bool = False  # the option states the setting's opposite (--no-crc: checkCRCOnRecover=false)
    convert: Callable[[Any], Any] | None = None  # the setting's value -> the field's (ValueError: a bad value)
    # the option stack that declares it: "every" (brokeropts: every store command), "recovery"
    # (brokeropts: the commands that run or predict the broker's recovery), "" (the command
    # itself, or options.store_argument)
    group: str = ""
    only: str = ""  # the commands that have the option, when not every store command (the man page says so)
    toggle: bool = False  # a --X/--no-X pair, unset by default (else a plain flag, or a value with metavar)
    metavar: str | None = None
    help: str = ""  # --help of an option brokeropts declares

    @property
    def option(self) -> str:
        return f"{self.flag} ({self.only})" if self.only else self.flag


@dataclass(frozen=True)
class Decision:
    kind: str
    what: str  # what the setting changes and what rmqtool does with it
    road: Road | None = None  # how rmqtool honours it: the option that mirrors it and where its value lands
    default: Any = None  # the broker's default (of the typed value)
    refuse: str | None = None  # name of the refusal rule (see _REFUSE)

    @property
    def option(self) -> str | None:
        """The rmqtool option that mirrors the setting (as the man pages name it)."""
        return self.road.option if self.road is not None else None


# The settings rmqtool reads. Everything else in SETTINGS is IRRELEVANT (see _irrelevant_why).
DECISIONS: dict[str, Decision] = {
    # -- where the store is --------------------------------------------------------------
    # (both read through BrokerConf.store_root and BrokerConf.commitlog_dir)
    "storePathRootDir": Decision(LOCATION, "the store root: STORE when STORE is not given", Road("STORE", "store")),
    "storePathCommitLog": Decision(
        LOCATION,
        "the commitlog directory (default STORE/commitlog; 4.6.0-4.9.3: "
        "~/store/commitlog whatever storePathRootDir says); several directories "
        "separated by ',' (5.x multi-path) are refused",
        None,
        None,
        "multi_path",
    ),
    "readOnlyCommitLogStorePaths": Decision(
        LOCATION,
        "extra read-only commitlog directories of the multi-path commitlog: refused when set",
        None,
        None,
        "non_empty",
    ),
    "storePathDLedgerCommitLog": Decision(
        LOCATION,
        "the DLedger data directory (4.9.x+; default STORE/dledger-<dLegerSelfId>/data): the entries are read "
        "from it; recover, repair and rebuild-index refuse one outside the store",
    ),
    "dLegerSelfId": Decision(
        LOCATION, "the DLedger member's id: its files are STORE/dledger-<dLegerSelfId> (chooses among several)"
    ),
    "dLegerGroup": Decision(
        LOCATION, "the DLedger group: a member directory named <dLegerGroup>-<dLegerSelfId> is read too"
    ),
    "storePathEpochFile": Decision(
        LOCATION,
        "the controller-mode epoch file (default STORE/epochFileCheckpoint): neither read nor changed by rmqtool",
    ),
    "storePathBrokerIdentity": Decision(LOCATION, "the broker identity file: neither read nor changed by rmqtool"),
    # -- geometry ------------------------------------------------------------------------
    "mappedFileSizeCommitLog": Decision(
        GEOMETRY, "commitlog file size", Road("--commitlog-file-size", "commitlog_file_size"), 1 << 30
    ),
    "mappedFileSizeConsumeQueue": Decision(
        GEOMETRY,
        "consume queue file size (rounded up to 20-byte units)",
        Road("--cq-file-size", "cq_file_size"),
        6_000_000,
    ),
    "maxHashSlotNum": Decision(
        GEOMETRY, "index hash slots per file", Road("--index-slots", "index_slot_num"), 5_000_000
    ),
    "maxIndexNum": Decision(GEOMETRY, "index entries per file", Road("--index-entries", "index_num"), 20_000_000),
    "mappedFileSizeConsumeQueueExt": Decision(
        GEOMETRY, "ConsumeQueueExt file size: only with enableConsumeQueueExt, which is refused"
    ),
    "bitMapLengthConsumeQueueExt": Decision(
        GEOMETRY, "ConsumeQueueExt filter bitmap: only with enableConsumeQueueExt, which is refused"
    ),
    "mapperFileSizeBatchConsumeQueue": Decision(
        GEOMETRY,
        "BatchConsumeQueue file size: dump, info and verify read batchconsumequeue/ files by their own size "
        "(the most common size of a queue's files); rebuild-index writes files of this size (without it: the size "
        "of the store's batch queue files, else the default), and so does recover where a batch queue has no file "
        "left; repair refuses a store with them",
    ),
    # -- what recovery and the dispatch do -------------------------------------------------
    "checkCRCOnRecover": Decision(
        RECOVERY,
        "the recovery walk checks body CRCs (false: recover walks as with "
        "--no-crc, and the recovery outlook of verify, repair and info --deep with it)",
        Road(
            "--no-crc",
            "no_crc",
            "check_crc_on_recover",
            negated=True,
            group="recovery",
            help="Mirrors checkCRCOnRecover=false: the walk of the broker's recovery, which this command runs or "
            "predicts, does not stop at a record whose body CRC fails (verify still checks and reports every "
            "CRC; default: --broker-config, else CRC on).",
        ),
        True,
    ),
    "forceVerifyPropCRC": Decision(
        RECOVERY,
        "5.2.0+: the recovery walk checks each whole record against its "
        "__CRC32# property instead of the body CRC, and cuts at a record without "
        "one (5.2.0-5.3.1: also at __CRC32# 0); ignored by older brokers",
        Road(
            "--force-verify-prop-crc",
            "force_verify_prop_crc",
            "force_verify_prop_crc",
            group="every",
            toggle=True,
            help="Mirrors forceVerifyPropCRC (5.2.0+): recovery checks each whole record against its __CRC32# "
            "property instead of the body CRC (default: false, or the broker config).",
        ),
        False,
    ),
    "enabledAppendPropCRC": Decision(
        RECOVERY,
        "5.2.0+: the broker appends __CRC32# to every record it writes; "
        "recovery checks it only under forceVerifyPropCRC",
        None,
        False,
    ),
    "messageIndexSafe": Decision(
        RECOVERY,
        "abnormal recovery's start file also honours the index timestamp "
        "(recover, and the recovery outlook of verify, repair and info --deep)",
        Road(
            "--message-index-safe",
            "message_index_safe",
            "message_index_safe",
            group="recovery",
            help="Mirrors messageIndexSafe=true: the abnormal start file of the broker's recovery, which this "
            "command runs or predicts, also honours the checkpoint's indexMsgTimestamp (default: "
            "--broker-config, else false).",
        ),
        False,
    ),
    "messageIndexEnable": Decision(
        RECOVERY, "the dispatch writes index files: false is refused (rmqtool always indexes)", None, True, "is_false"
    ),
    "messageDelayLevel": Decision(
        RECOVERY,
        "the delay levels: SCHEDULE_TOPIC_XXXX tagsCode (delivery time) of the "
        "consume queue units recovery and rebuild-index write",
        Road(
            "--message-delay-level",
            "message_delay_level",
            "delay_levels",
            convert=_delay_levels,
            group="every",
            metavar="LEVELS",
            help='Mirrors messageDelayLevel: the delay levels, e.g. "1s 5s 10s 30s 1m" (default: the broker\'s '
            "18 levels, or the broker config).",
        ),
        DEFAULT_DELAY_LEVELS,
    ),
    "recheckReputOffsetFromCq": Decision(
        RECOVERY,
        "5.x: the start-up reput catches up from the consume queues' max offset, as 4.x always does",
        Road(
            "--recheck-reput-offset-from-cq",
            "recheck_reput_offset_from_cq",
            "recheck_reput_offset_from_cq",
            group="every",
            toggle=True,
            help="Mirrors recheckReputOffsetFromCq (5.x): the start-up reput catches up from the consume queues' "
            "max offset, as 4.x always does (default: false, or the broker config).",
        ),
        False,
    ),
    "duplicationEnable": Decision(
        RECOVERY,
        "recovery cuts at a record without a DUP_INFO property and dispatches "
        "only up to the confirm offset: true is refused",
        None,
        False,
        "is_true",
    ),
    "enableDLegerCommitLog": Decision(
        RECOVERY,
        "the commitlog is a DLedger log (dledger-<selfId>/data, after a mixed store's classic files): read as one; "
        "true on a store without DLedger data (the broker's first DLedger start, which pads the last classic file "
        "and starts the log after it) and false on a store holding DLedger data (the broker would not read it) "
        "are refused",
        None,
        False,
    ),
    "storeType": Decision(
        RECOVERY,
        "5.1+: defaultRocksDB keeps the consume queues in RocksDB: anything but default is refused",
        None,
        "default",
        "not_default_store",
    ),
    "enableConsumeQueueExt": Decision(
        RECOVERY,
        "ConsumeQueueExt (consumequeue_ext/), recovered and truncated with the consume queues: true is refused",
        None,
        False,
        "is_true",
    ),
    "rocksdbCQDoubleWriteEnable": Decision(
        RECOVERY, "5.3+: the dispatch also writes a RocksDB consume queue: true is refused", None, False, "is_true"
    ),
    "enableMultiDispatch": Decision(
        RECOVERY,
        "4.9.3+: LMQ multi-dispatch to the queues named in INNER_MULTI_DISPATCH: true is refused",
        None,
        False,
        "is_true",
    ),
    "enableLmq": Decision(
        RECOVERY, "4.9.3+: light message queues (%LMQ% topics): true is refused", None, False, "is_true"
    ),
    "maxLmqConsumeQueueNum": Decision(RECOVERY, "LMQ queue limit: only with enableLmq, which is refused"),
    "enableControllerMode": Decision(
        RECOVERY,
        "5.x controller mode: recovery dispatches only up to the confirm offset: true is refused",
        None,
        False,
        "is_true",
    ),
    "messageStorePlugIn": Decision(
        RECOVERY,
        "message store plug-ins wrap the store and may change what it writes: any value is refused",
        None,
        "",
        "non_empty",
    ),
    "brokerRole": Decision(
        RECOVERY,
        "ASYNC_MASTER, SYNC_MASTER or SLAVE: recovery runs the same for each; read and reported only",
        None,
        "ASYNC_MASTER",
    ),
    "maxMessageSize": Decision(
        RECOVERY,
        "checked when a message is put, never by recovery (which reads records "
        "of any size); repair writes no filler record longer",
        Road("--max-message-size", "max_message_size", only="repair"),
        4 * 1024 * 1024,
    ),
    "timerWheelEnable": Decision(
        RECOVERY,
        "5.x timer messages: the broker keeps them in its timer store (timerwheel, timerlog/, config/timercheck), "
        "which rmqtool timers, verify and info read; false: the broker refuses timer messages and never loads "
        "the timer store (rmqtool still reads what an earlier run left)",
        None,
        True,
    ),
    "timerPrecisionMs": Decision(
        RECOVERY,
        "the timer wheel's slot width: a slot holds delivery time / precision, and the timer store's recovery "
        "reads the wheel from now - 604,800 slots on (rmqtool timers, verify, info)",
        Road(
            "--timer-precision-ms",
            "timer_precision_ms",
            "timer_precision_ms",
            convert=int,
            group="timer",
            metavar="MS",
            help="Mirrors timerPrecisionMs: the timer wheel's slot width in ms (default: 1000, or the broker config).",
        ),
        1000,
    ),
    "timerRollWindowSlot": Decision(
        RECOVERY,
        "how far ahead (in slots) a timer message goes into the wheel at its time; further ones are rolled "
        "(rmqtool timers' next-start model)",
        Road(
            "--timer-roll-window-slot",
            "timer_roll_window_slot",
            "timer_roll_window_slot",
            convert=int,
            group="timer",
            metavar="SLOTS",
            help="Mirrors timerRollWindowSlot: the timer's roll window in slots (default: 172800, or the broker "
            "config).",
        ),
        3600 * 24 * 2,
    ),
    "mappedFileSizeTimerLog": Decision(
        RECOVERY,
        "the timer log's file size (timerlog/): the broker refuses to load a file of another size",
        Road(
            "--timer-log-file-size",
            "timer_log_file_size",
            "timer_log_file_size",
            convert=int,
            group="timer",
            metavar="BYTES",
            help="Mirrors mappedFileSizeTimerLog: the timer log's file size (default: 100 MiB, or the broker config).",
        ),
        100 * 1024 * 1024,
    ),
    "appendTopicForTimerDeleteKey": Decision(
        RECOVERY,
        "5.4.0+: a timer cancel (TIMER_DEL_UNIQKEY) names its message by REAL_TOPIC+UNIQ_KEY instead of the "
        "UNIQ_KEY alone (5.3.2-5.3.3 always do): which message a cancel drops (rmqtool timers)",
        Road(
            "--append-topic-for-timer-delete-key",
            "append_topic_for_timer_delete_key",
            "append_topic_for_timer_delete_key",
            group="timer",
            toggle=True,
            help="Mirrors appendTopicForTimerDeleteKey (5.4.0+): a timer cancel names its message by topic and key "
            "(default: false, or the broker config).",
        ),
        False,
    ),
    "timerRocksDBEnable": Decision(
        RECOVERY,
        "5.4.0+: timer messages kept in the RocksDB timer store (rocksdbstore/, column family timer) instead "
        "of the timer wheel, which rmqtool does not read: true is refused",
        None,
        False,
        "is_true",
    ),
    "timerWheelSnapshotFlush": Decision(
        RECOVERY,
        "5.4.0+: the timer wheel is loaded from its newest snapshot (timerwheel.<position>) and the timer "
        "log's recovery starts at that position, which rmqtool does not model: true is refused",
        None,
        False,
        "is_true",
    ),
    "timerSkipUnknownError": Decision(
        RECOVERY,
        "the timer skips a message it cannot handle instead of retrying it for ever (read; rmqtool timers "
        "reports such messages either way)",
        None,
        False,
    ),
    "commitLogRecoverMaxNum": Decision(
        RECOVERY,
        "5.4.0+: the recovery's search for its start file looks at most at this many commitlog "
        "files from the last (<= 0 counts as 10): any other value than 10 is refused",
        None,
        10,
        "not_ten",
    ),
    "enableAcceleratedRecovery": Decision(
        RECOVERY,
        "5.4.0+: recovery starts its walk at the dispatch offset inside its start file "
        "(5.4: RocksDB consume queues only; 5.5.0+: abnormal recovery of any store): true is refused",
        None,
        False,
        "is_true",
    ),
    "checkCommitLogOffsetOnRecover": Decision(
        RECOVERY,
        "5.5.0+: abnormal recovery also stops at a record whose PHYSICALOFFSET field lies outside "
        "its file: true is refused",
        None,
        False,
        "is_true",
    ),
    "indexFileWriteEnable": Decision(
        RECOVERY,
        "5.4.0+: the dispatch writes index files: false is refused (rmqtool always indexes)",
        None,
        True,
        "is_false",
    ),
    "indexRocksDBEnable": Decision(
        RECOVERY,
        "5.4.0+: the dispatch also writes a RocksDB index, which also chooses the recovery's start "
        "file: true is refused",
        None,
        False,
        "is_true",
    ),
    "transRocksDBEnable": Decision(
        RECOVERY,
        "5.4.0+: transaction half messages indexed in RocksDB, which also chooses the recovery's "
        "start file: true is refused",
        None,
        False,
        "is_true",
    ),
    "maxTopicLength": Decision(RECOVERY, "5.x put-side limit; recovery reads V1 and V2 records alike (5.1.0+)", None),
    "autoMessageVersionOnTopicLen": Decision(
        RECOVERY,
        "5.1+: the broker writes V2 records for topics longer than 127 bytes; recovery reads both (put side only)",
        None,
    ),
}

_IRRELEVANT_FAMILIES = [
    (
        r"^(flush|commit|wake|warm|transientStore|fastFail|osPageCache|useReentrant|useABS|spinLock|putMessage|"
        r"putMsg|maxAsyncPut|syncFlush)",
        "flushing and committing of a running broker (what reached the disk is what counts offline)",
    ),
    (
        r"^(clean|delete|destroy|redelete|disk|fileReserved|maxBatchDelete|logicalDiskSpace|enableCleanExpired)",
        "clean-up of expired files by a running broker",
    ),
    (
        r"^(ha|sync|inSync|minInSync|totalReplicas|allAck|asyncLearner|enableAutoInSync|maxHa|maxSlave|slave|"
        r"offsetCheckInSlave|replicasPerDisk|maxChecksumRange|controller|brokerElection|enableSlaveActing|"
        r"checkSyncStateSet|dLeger|preferredLeader|enableBatchPush)",
        "replication (HA, DLedger election, controller) of a running broker",
    ),
    (
        r"^(timer|disappearTimeAfterStart)",
        "the running services of the 5.x timer store (threads, flushing, metrics, flow control): never read by "
        "its recovery",
    ),
    (
        r"^(compaction|enableCompaction|maxOffsetMap)",
        "the 5.x compaction store (compaction/), which rmqtool neither reads nor changes",
    ),
    (
        r"(?i)rocksdb|memTable|bottomMost|statRocks|cleanRocks|realTimePersist",
        "RocksDB tuning (a RocksDB consume queue is refused through storeType)",
    ),
    (
        r"^(pop|revive|ack|enablePop|maxPop|initPop|retrieveMessageFromPop|enableNotify|enableSkipLong|"
        r"waitTimeMillsInAck|appendAck|appendCk|skipWhenCKRePut|defaultPop)",
        "POP consumption of a running broker",
    ),
    (
        r"^(maxTransfer|accessMessageInMemory|defaultQueryMaxNum|maxMsgsNumBatch|pullBatchMaxMessageCount|"
        r"travelCq|readUnCommitted|searchBcq|maxConsumeQueueScan|dataReadAhead|cold|sampl|cgCold|globalCold|"
        r"usePIDCold|maxFilterMessageSize)",
        "the read path of a running broker (pull, query, cold data)",
    ),
    (r"(?i)swap", "memory-map swapping of a running broker"),
    (
        r"^(dispatch|enableAsyncReput|enableBuildConsumeQueueConcurrently|batchDispatch|topicQueueLockNum|"
        r"putConsumeQueueDataByFileChannel|correctLogicMinOffset|recoverConcurrently|recoverThreadPoolNums)",
        "how a running broker schedules the dispatch and recovery (same files, same bytes)",
    ),
    (r"^(enableSchedule|scheduleAsync)", "delivery of delayed messages by a running broker"),
    (r"^maxRecoveryCommitlogFiles$", "5.x: read only by the controller-mode/HA truncation, not by recovery"),
    (r"^debugLockEnable$|^diskFallRecorded$|^enableRocksDBLog$", "diagnostics"),
]


def _irrelevant_why(name: str) -> str:
    for pat, why in _IRRELEVANT_FAMILIES:
        if re.search(pat, name):
            return why
    s = SETTINGS.get(name)
    if s is not None and s.owner == "BrokerConfig":
        return "a broker service setting (network, thread pools, name server, ACL, transactions, POP, metrics): never read by the store's recovery"
    return "a running broker's service: never read by the store's recovery"


# The honoured settings and how each travels (one row each; tests/test_settings_road.py).
ROADS: dict[str, Road] = {name: d.road for name, d in DECISIONS.items() if d.road is not None}


def decision(name: str) -> Decision:
    d = DECISIONS.get(name)
    if d is not None:
        return d
    return Decision(IRRELEVANT, _irrelevant_why(name))


# ---------------------------------------------------------------------------------------
# java.util.Properties.load


# ---------------------------------------------------------------------------------------
# properties2Object


def _java_int(text: str, bits: int) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body or not all(ch.isdecimal() for ch in body):
        return None
    v = int(text)
    return v if -(1 << (bits - 1)) <= v < (1 << (bits - 1)) else None


def convert(setting: Setting, raw: str) -> tuple[Any, str | None]:
    """The value properties2Object sets, or (None, why) when the conversion throws and the
    broker silently keeps the default."""
    t = setting.type
    if t == "int" or t == "long":
        v = _java_int(raw, 32 if t == "int" else 64)
        if v is None:
            return (
                None,
                f"{'Integer.parseInt' if t == 'int' else 'Long.parseLong'}({raw!r}) fails: the broker keeps the default",
            )
        return v, None
    if t == "boolean":
        return raw.lower() == "true", None
    if t == "double":
        try:
            return float(raw.strip()), None
        except ValueError:
            return None, f"Double.parseDouble({raw!r}) fails: the broker keeps the default"
    text = raw.strip()
    if setting.name == "brokerRole" and text not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        return None, f"BrokerRole.valueOf({text!r}) fails: the broker keeps the default"
    if setting.name == "flushDiskType" and text not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
        return None, f"FlushDiskType.valueOf({text!r}) fails: the broker keeps the default"
    return text, None


@dataclass
class BrokerConf:
    """A parsed broker.conf: the typed values the broker sets, and notes about the rest."""

    path: Path
    raw: dict[str, str]
    values: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def has(self, name: str) -> bool:
        return name in self.values

    def dledger_hint(self) -> Any:
        """What the file says of the DLedger member (recovery.dledger.layout.Hint): its
        selfId, group and data directory, when enableDLegerCommitLog is true."""
        from .dledger.layout import Hint

        if not self.values.get("enableDLegerCommitLog"):
            return None
        data = self.values.get("storePathDLedgerCommitLog")
        return Hint(
            self.values.get("dLegerSelfId") or None,
            self.values.get("dLegerGroup") or None,
            Path(data) if data else None,
        )

    @property
    def store_root(self) -> Path | None:
        v = self.values.get("storePathRootDir")
        return Path(v) if v else None  # (Java does not expand "~": neither does rmqtool)

    def commitlog_dir(self, version: tuple[int, int, int] | None = None) -> Path | None:
        """``getStorePathCommitLog``: the configured directory; unset: STORE/commitlog
        (None here), except in 4.6.0-4.9.3, whose default is ~/store/commitlog whatever
        the root (MessageStoreConfig's field initialiser; 4.9.4 made it follow the root)."""
        v = self.values.get("storePathCommitLog")
        if v:
            return Path(v)
        if version is not None and BrokerProfile(version).commitlog_default_under_home and self.store_root is not None:
            return Path.home() / "store" / "commitlog"  # System.getProperty("user.home")
        return None

    @property
    def sets_commitlog_dir(self) -> bool:
        """The file sets storePathCommitLog (to anything, an empty value too)."""
        return self.has("storePathCommitLog")

    def home_commitlog_dir(self, version: tuple[int, int, int]) -> tuple[Path, str] | None:
        """Where ``version`` reads the commitlog when the file leaves storePathCommitLog
        unset but not the root (:meth:`commitlog_dir`: 4.6.0-4.9.3, ~/store/commitlog), and
        a note saying so; None when that is STORE/commitlog."""
        if self.sets_commitlog_dir:
            return None
        cl_dir = self.commitlog_dir(version)
        if cl_dir is None:
            return None
        return cl_dir, (
            f"storePathCommitLog is not set: RocketMQ {'.'.join(map(str, version))} reads the commitlog from "
            f"{cl_dir} (its default up to 4.9.3, whatever storePathRootDir says)"
        )

    def commitlog_outside_store(self, cl_dir: Path) -> Refusal:
        """The refusal of a commitlog directory outside STORE/commitlog (a command that
        changes the store handles only one laid out under one root)."""
        return Refusal(
            FindingCode.UNSUPPORTED_SETTING,
            str(self.path),
            f"storePathCommitLog={cl_dir}: a commitlog outside STORE/commitlog "
            "(rmqtool changes only stores laid out under one root)",
        )


def read_broker_conf(path: str | Path) -> BrokerConf:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise BrokerConfigError("no such file", p) from None
    except IsADirectoryError:
        raise BrokerConfigError("a directory, not a properties file", p) from None
    except OSError as exc:
        raise BrokerConfigError(exc.strerror or str(exc), p) from None
    try:
        raw = load_properties(data.decode("latin-1"))
    except BrokerConfigError as exc:
        raise BrokerConfigError(exc.message, p) from None
    conf = BrokerConf(p, raw)
    for key, value in raw.items():
        s = SETTINGS.get(key)
        if s is None:
            conf.notes.append(
                f"{key}: not a setting of MessageStoreConfig or BrokerConfig 4.6.0-5.5.1 "
                "(a netty setting or a typo): ignored"
            )
            continue
        v, why = convert(s, value)
        if why is not None:
            conf.notes.append(f"{key}: {why}")
            continue
        conf.values[key] = v
    return conf


# ---------------------------------------------------------------------------------------
# refusals


def _refuse_rule(rule: str, value: Any) -> bool:
    if rule == "is_true":
        return value is True
    if rule == "is_false":
        return value is False
    if rule == "non_empty":
        return bool(value)
    if rule == "not_default_store":
        return isinstance(value, str) and value != "default"
    if rule == "not_ten":
        return isinstance(value, int) and value > 0 and value != 10
    if rule == "multi_path":
        return isinstance(value, str) and "," in value
    return False


def setting_refusals(conf: BrokerConf | None, version: tuple[int, int, int] | None = None) -> list[str]:
    """One line per setting whose value rmqtool does not implement (the store is refused)."""
    if conf is None:
        return []
    out = []
    for name, value in conf.values.items():
        d = DECISIONS.get(name)
        if d is None or d.refuse is None:
            continue
        s = SETTINGS[name]
        if version is not None and not _known_in(s, version):
            continue  # the broker of that version has no such setter: it ignores it
        if _refuse_rule(d.refuse, value):
            out.append(f"{name}={conf.raw.get(name, value)!s}: {d.what}")
    return out


def _known_in(s: Setting, version: tuple[int, int, int]) -> bool:
    """Whether the setter may exist in ``version``: the release is newer than the last
    sampled release before the first one that has it (a setter that came in between
    samples counts as present: a refusal too many rather than one too few)."""
    samples = [parse_version(v) for v in SAMPLED.values()]
    first = min(parse_version(v) for v in s.seen_in)
    before = [v for v in samples if v < first]
    return version > max(before) if before else True


@dataclass(frozen=True)
class Refusal:
    """A store layout or setting rmqtool does not handle."""

    code: FindingCode  # LAYOUT_DLEDGER, LAYOUT_ROCKSDB_CQ, LAYOUT_CQ_EXT, LAYOUT_BATCH_CQ, LAYOUT_COMPACTION, UNSUPPORTED_SETTING (and, from --broker-version auto, LAYOUT_NEWER_RELEASE, VERSION_CONTRADICTION)
    path: str
    message: str


class UnsupportedStoreError(RmqToolError):
    """A store rmqtool refuses to act on (exit 8)."""


ROCKSDB_EXTRA = "reading it needs rocksdict, the rocksdb extra: pip install 'rmqtool[rocksdb]'"
# why rebuild-index refuses a RocksDB consume queue (issue 35; man rmqtool-rebuild-index, The RocksDB
# consume queue): neither road to the broker's own reput rebuilding it is proved
ROCKSDB_REBUILD_REFUSAL = (
    "the broker's start cannot be made to rebuild it without writing RocksDB: its reput starts at the "
    "commitlog's end, a database moved aside comes back empty and its next start dispatches every record but "
    "one at commitlog offset 0; rmqtool can write a database the broker opens (the entries its reput writes, "
    "in table format 5: shown by the oracle), but rebuild-index does not write it yet (the backup and swap of "
    "the database directory are not built)"
)
_ROCKSDB_MARKERS = re.compile(r"^(CURRENT|IDENTITY|LOCK|MANIFEST-\d+|OPTIONS-\d+|\d+\.(sst|log))$")


def layout_refusals(root: Path, conf: BrokerConf | None = None) -> list[Refusal]:
    """Layouts rmqtool does not handle, seen in the store directory itself."""
    out: list[Refusal] = []
    if root.is_dir():
        out += dledger_refusals(root, conf)
        for name in ("consumequeue", "consumequeue_rocksdb"):
            cq = root / name
            if not cq.is_dir():
                continue
            hits = sorted(p.name for p in cq.iterdir() if p.is_file() and _ROCKSDB_MARKERS.match(p.name))
            if hits:
                out.append(
                    Refusal(
                        FindingCode.LAYOUT_ROCKSDB_CQ,
                        name,
                        f"a RocksDB consume queue (5.2+ storeType=defaultRocksDB or rocksdbCQDoubleWriteEnable: "
                        f"{', '.join(hits[:3])}): rmqtool reads it (dump consumequeue, info, verify; "
                        f"{ROCKSDB_EXTRA}) and recover leaves it to the broker's start, but does not repair, "
                        f"rebuild or truncate it",
                    )
                )
        ext = root / "consumequeue_ext"
        if ext.is_dir() and any(p.is_file() for p in ext.rglob("*")):
            out.append(
                Refusal(
                    FindingCode.LAYOUT_CQ_EXT,
                    "consumequeue_ext",
                    "ConsumeQueueExt files (enableConsumeQueueExt): rmqtool does not recover or truncate them",
                )
            )
        comp = root / "compaction"
        for sub in ("compactionLog", "compactionCq"):
            d = comp / sub
            if d.is_dir() and any(p.is_file() for p in d.rglob("*")):
                out.append(
                    Refusal(
                        FindingCode.LAYOUT_COMPACTION,
                        f"compaction/{sub}",
                        "a compaction topic's log (compaction/compactionLog, compaction/compactionCq: 5.x "
                        "topics with cleanup.policy=COMPACTION): rmqtool does not recover or truncate them "
                        "(compaction/position-checkpoint alone, which every 5.x broker writes, is no such log)",
                    )
                )
                break
        bcq = root / "batchconsumequeue"
        if bcq.is_dir() and any(p.is_file() for p in bcq.rglob("*")):
            out.append(
                Refusal(
                    FindingCode.LAYOUT_BATCH_CQ,
                    "batchconsumequeue",
                    "BatchConsumeQueue files (batchconsumequeue/: 5.x topics with queue.type=BatchCQ): "
                    "rmqtool reads them (dump consumequeue, info, verify), rebuild-index and recover write them, "
                    "but repair does not repair them",
                )
            )
    return out


def dledger_refusals(root: Path, conf: BrokerConf | None) -> list[Refusal]:
    """The DLedger layouts rmqtool does not decide on (recovery.dledger.layout): a member
    under an unknown name, several members and no selfId, data files of classic records;
    and the broker config's enableDLegerCommitLog against what the store holds."""
    from .dledger import layout as dlay
    from .store import Store

    hint = conf.dledger_hint() if conf is not None else None
    try:
        member = dlay.find_member(root, hint)
    except dlay.LayoutRefusal as exc:
        return [Refusal(FindingCode.LAYOUT_DLEDGER, exc.path, exc.message)]
    data: list[Any] = []
    if member is not None and member.data_dir.is_dir():
        data = sorted((p for p in member.data_dir.iterdir() if p.is_file() and p.name.isdigit()), key=lambda p: p.name)
        files = [Store.file_entry(p) for p in data]
        why = dlay.not_entries(files)
        if why is not None:
            return [Refusal(FindingCode.LAYOUT_DLEDGER, _relpath(member.data_dir, root), why)]
    if conf is not None and conf.has("enableDLegerCommitLog"):
        on = bool(conf.get("enableDLegerCommitLog"))
        if on and not data:
            return [
                Refusal(
                    FindingCode.UNSUPPORTED_SETTING,
                    str(conf.path),
                    f"enableDLegerCommitLog={conf.raw.get('enableDLegerCommitLog', 'true')} on a store without DLedger "
                    "data files: the broker's first DLedger start "
                    "(it recovers the classic commitlog as after a clean shutdown, pads its last file and starts the "
                    "DLedger log after it), which rmqtool does not emulate",
                )
            ]
        if not on and data:
            return [
                Refusal(
                    FindingCode.UNSUPPORTED_SETTING,
                    str(conf.path),
                    f"enableDLegerCommitLog={conf.raw.get('enableDLegerCommitLog', 'false')} on a store holding DLedger "
                    "data files: the broker would read only "
                    "commitlog/ and never the DLedger log (give the broker's real configuration)",
                )
            ]
    return []


def _relpath(p: Path, root: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def all_refusals(root: Path, conf: BrokerConf | None, version: tuple[int, int, int] | None = None) -> list[Refusal]:
    out = layout_refusals(root, conf)
    for line in setting_refusals(conf, version):
        out.append(Refusal(FindingCode.UNSUPPORTED_SETTING, str(conf.path) if conf else "broker.conf", line))
    return out


# ---------------------------------------------------------------------------------------
# the man pages' BROKER CONFIGURATION section (tests/test_identity.py checks every page has it)


def man_section() -> str:
    """The roff text of the BROKER CONFIGURATION section, generated from DECISIONS."""

    def esc(t: str) -> str:
        return t.replace("\\", "\\\\").replace("-", "\\-")

    lines = [
        ".SH BROKER CONFIGURATION",
        "With \\fB\\-\\-broker\\-config\\fR \\fIFILE\\fR, rmqtool reads the properties file the broker was",
        "started with (\\fBmqbroker \\-c\\fR \\fIFILE\\fR) as the broker reads it: java.util.Properties syntax",
        "(ISO\\-8859\\-1, comments, continuation lines, escapes; the last occurrence of a key wins), then",
        "MixAll.properties2Object (an int value the broker cannot parse, such as one with a trailing",
        "space, leaves the default in place: rmqtool says so). Options given on the command line win over",
        "the file. STORE may be omitted when the file sets storePathRootDir. Settings it reads, and what",
        "each changes:",
    ]
    for kind, title in ((LOCATION, "Where the store is"), (GEOMETRY, "Geometry"), (RECOVERY, "Recovery and dispatch")):
        lines.append(f".SS {title}")
        for name, d in DECISIONS.items():
            if d.kind != kind:
                continue
            lines.append(f".TP\n.B {name}")
            extra = f" (option {d.option})" if d.option else ""
            lines.append(esc(d.what + extra) + ".")
    lines += [
        ".SS Refused",
        "A store whose layout or settings rmqtool does not handle is refused before anything is read",
        "or changed: recover, repair, rebuild\\-index and restore exit 8; verify prints one finding naming the",
        "layout or setting (LAYOUT_DLEDGER, LAYOUT_ROCKSDB_CQ, LAYOUT_CQ_EXT, LAYOUT_BATCH_CQ,",
        "LAYOUT_COMPACTION, UNSUPPORTED_SETTING) and exits 8. Layouts: a DLedger member's directory",
        "under a name no DLedger release uses, several members without dLegerSelfId, DLedger data files",
        "holding classic records, a RocksDB consume queue (RocksDB files in consumequeue/ or",
        "consumequeue_rocksdb/: verify checks it instead, its RCQ_* findings, when rocksdict, the rocksdb",
        "extra, opens it; recover goes on where the broker's start alone changes the database, see The",
        "RocksDB consume queue; repair and rebuild\\-index refuse it with LAYOUT_ROCKSDB_CQ),",
        "consumequeue_ext/ files, batchconsumequeue/ files (verify checks these instead: its BCQ_*",
        "findings; rebuild\\-index and recover write them; repair refuses them with LAYOUT_BATCH_CQ), a",
        "compaction topic's log",
        "(compaction/compactionLog, compaction/compactionCq). With \\fB\\-\\-broker\\-version auto\\fR (the",
        "default), evidence of a release newer than rmqtool knows is refused too (LAYOUT_NEWER_RELEASE,",
        "VERSION_CONTRADICTION: see \\fBrmqtool\\fR(1), BROKER VERSIONS). Settings: the ones above marked",
        "refused, with the value given. A DLedger store (dledger\\-\\fIselfId\\fR/, after a mixed store's",
        "classic commitlog) is read as one.",
        ".SS Everything else",
        "Every other setting of MessageStoreConfig and BrokerConfig of 4.6.0 to 5.5.1 (flushing,",
        "clean\\-up, HA and controller replication, the timer store's services, compaction, POP, the read path,",
        "network, thread pools, metrics) is a running broker's service that never changes what recovery reads,",
        "cuts or writes: read and ignored. A key that is no setting of either class (a netty setting,",
        "a typo) is ignored, with a note.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m rmqtool.recovery.brokerconf: print the man section
    print(man_section(), end="")
