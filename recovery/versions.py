"""Broker-version profiles: every version-dependent branch of the spec, in one place.

RECOVERY.md §14.1 lists the branches; STORE_FORMAT.md gives the versions. A profile is
built from a RocketMQ release string such as ``4.9.4``, ``5.1.4`` or ``5.3.3``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from ..formats.javanum import java_long

DEFAULT_VERSION = "4.9.4"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


# Every Apache RocketMQ release rmqtool emulates, in order. A version string must name one
# of them: "4.9" is not a release (it would silently have meant 4.9.0, outside the 4.9.2-4.9.8
# quirk range), "5.3.99" neither.
RELEASES: tuple[tuple[int, int, int], ...] = (
    (4, 6, 0),
    (4, 6, 1),
    (4, 7, 0),
    (4, 7, 1),
    (4, 8, 0),
    (4, 9, 0),
    (4, 9, 1),
    (4, 9, 2),
    (4, 9, 3),
    (4, 9, 4),
    (4, 9, 5),
    (4, 9, 6),
    (4, 9, 7),
    (4, 9, 8),
    (5, 0, 0),
    (5, 1, 0),
    (5, 1, 1),
    (5, 1, 2),
    (5, 1, 3),
    (5, 1, 4),
    (5, 2, 0),
    (5, 3, 0),
    (5, 3, 1),
    (5, 3, 2),
    (5, 3, 3),
    (5, 4, 0),
    (5, 5, 0),
    (5, 5, 1),
)
NEWEST = RELEASES[-1]


def version_label(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def supported_range() -> str:
    """The supported releases as one span, e.g. ``4.6.0-5.5.1`` (every message and man page says it)."""
    return f"{version_label(RELEASES[0])}-{version_label(NEWEST)}"


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"(?:rocketmq-all-)?(\d+)\.(\d+)\.(\d+)", text.strip())
    if not m:
        if re.fullmatch(r"(?:rocketmq-all-)?\d+\.\d+", text.strip()):
            raise ValueError(f"{text!r} is not a release: give all three parts (e.g. 4.9.4, not 4.9)")
        raise ValueError(f"not a RocketMQ version: {text!r} (expected e.g. 4.9.4 or 5.3.3)")
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if v not in RELEASES:
        raise ValueError(
            f"{text} is not a supported RocketMQ release (supported: {supported_range()}; a newer release: "
            f"give the nearest, {version_label(NEWEST)}, at your own risk: man rmqtool, BROKER VERSIONS)"
        )
    return v


def parse_delay_levels(text: str) -> list[int]:
    """``messageDelayLevel`` -> delay in ms per level (level i is index i-1)."""
    out = []
    for part in text.split(" "):
        if not part:
            continue
        unit = _UNITS.get(part[-1])
        if unit is None:
            raise ValueError(f"bad delay level {part!r}")
        out.append(int(part[:-1]) * unit)
    return out


# the version-dependent decisions of recovery, dispatch and rebuild (recovery_signature)
RECOVERY_DECISIONS = (
    "checks_inner_batch",
    "reput_stops_at_end_offset",
    "accepts_v2",
    "remaining_checks",
    "new_properties_parser",
    "has_prop_crc",
    "prop_crc_zero_accepted",
    "delay_table_in_abnormal_recovery",
    "normal_recovery_walkback",
    "startup_reput_from_cq",
    "hash_slot_count_every_put",
    "index_flushed_at_shutdown",
    "zero_length_last_file_deleted",
    "indexes_tags",
    "recovery_start_checks_first_record",
    "abnormal_start_by_logics_offset",
    "checkpoint_persists_logics_physical_offset",
)


def _version_rule(test: Callable[[tuple[int, int, int]], bool], doc: str | None = None) -> cached_property[bool]:
    """A decision that depends on the release only: ``test(version)``, cached per profile."""

    def decide(self: BrokerProfile) -> bool:
        return test(self.version)

    decide.__doc__ = doc
    return cached_property(decide)


@dataclass(frozen=True)
class BrokerProfile:
    """What the emulated broker version does at each version-dependent point."""

    version: tuple[int, int, int]
    delay_levels: tuple[int, ...] = tuple(parse_delay_levels(DEFAULT_DELAY_LEVELS))
    # broker settings (broker.conf) that change what recovery decides; see recovery/brokerconf.py
    force_verify_prop_crc: bool = False  # forceVerifyPropCRC (has an effect from 5.2.0 only)
    recheck_reput_offset_from_cq: bool = False  # recheckReputOffsetFromCq (5.x)
    check_crc_on_recover: bool = True  # checkCRCOnRecover: the recovery walk checks body CRCs
    message_index_safe: bool = False  # messageIndexSafe: abnormal recovery's start file honours indexMsgTimestamp

    @classmethod
    def for_version(cls, text: str = DEFAULT_VERSION) -> BrokerProfile:
        """The profile of release ``text`` with the broker's default settings. A setting
        travels one road: ``dataclasses.replace(profile, field=value)`` (the CLI does it
        from broker.conf and its options through recovery.brokerconf.DECISIONS)."""
        return cls(parse_version(text))

    @cached_property
    def verify_prop_crc(self) -> bool:
        """The recovery walk checks the whole record against ``__CRC32#`` instead of the body
        CRC: forceVerifyPropCRC on a 5.2.0+ broker (older ones have no such setting)."""
        return self.has_prop_crc and self.force_verify_prop_crc

    def recovery_signature(self, ignore: frozenset[str] | set[str] = frozenset()) -> tuple[bool, ...]:
        """Every version-dependent decision recovery, dispatch and rebuild make: two versions
        with the same signature recover a store the same way. ``ignore``: decisions shown
        not to matter for a given store (recovery.identify)."""
        return tuple(getattr(self, name) for name in RECOVERY_DECISIONS if name not in ignore)

    zero_length_last_file_deleted = _version_rule(
        lambda v: v >= (5, 1, 3),
        """5.1.3+: MappedFileQueue.load deletes a zero-length last file (RECOVERY §1.2).""",
    )

    checkpoint_persists_confirm_offset = _version_rule(
        lambda v: v >= (5, 1, 1),
        """5.1.1+: StoreCheckpoint.flush writes confirmPhyOffset (STORE_FORMAT §16).""",
    )

    checkpoint_persists_logics_physical_offset = _version_rule(
        lambda v: v >= (5, 5, 0),
        """5.5.0+: StoreCheckpoint keeps logicsPhysicalOffset at byte 40 (read at load, written
        by flush): the commitlog offset of the last record a consume queue took, set with
        logicsMsgTimestamp (ConsumeQueue.putMessagePositionInfoWrapper sets both as
        "tmp" values; FlushConsumeQueueService copies them at its thorough flushes).""",
    )

    @cached_property
    def checkpoint_flushed_bytes(self) -> int:
        """How many leading bytes of the checkpoint StoreCheckpoint.flush writes: 4.x the
        three timestamps (24), 5.0.0+ also masterFlushedOffset (32), 5.1.1+ also
        confirmPhyOffset (40), 5.5.0+ also logicsPhysicalOffset (48) (STORE_FORMAT §16)."""
        if self.checkpoint_persists_logics_physical_offset:
            return 48
        if self.checkpoint_persists_confirm_offset:
            return 40
        return 32 if self.checkpoint_persists_master_flushed_offset else 24

    checkpoint_persists_master_flushed_offset = _version_rule(
        lambda v: v >= (5, 0, 0),
        """5.0.0+: StoreCheckpoint.flush also writes masterFlushedOffset at byte 24
        (STORE_FORMAT §16); 4.x writes the three timestamps only.""",
    )

    handshake_truncates_epoch_file = _version_rule(
        lambda v: v < (5, 4, 0),
        """5.0.0-5.3.3: AutoSwitchHAClient.doTruncate cuts the slave's epoch file at the
        consistent point after truncateFiles (EpochFileCache.truncateSuffixByOffset, which
        rewrites the file and its .bak even when it removes nothing). 5.4.0+ does so only
        when the point is below the store's max offset read after truncateFiles, which has
        just been set to the point: the epoch file is never cut by the handshake.""",
    )

    commitlog_default_under_home = _version_rule(
        lambda v: v < (4, 9, 4),
        """4.6.0-4.9.3: an unset storePathCommitLog defaults to ~/store/commitlog whatever
        the store root (MessageStoreConfig's field initialiser); 4.9.4 made it follow the root.""",
    )

    @cached_property
    def label(self) -> str:
        return ".".join(map(str, self.version))

    checks_inner_batch = _version_rule(
        lambda v: v >= (5, 0, 0),
        """5.0.0+: ``CommitLog.checkMessageAndReturnSize`` ends with ``setBatchSizeIfNeeded``:
        a record whose properties hold both INNER_NUM and INNER_BASE is unreadable (-1) when
        ``Short.parseShort(INNER_NUM)`` or ``Long.parseLong(INNER_BASE)`` throws (RECOVERY
        §2 step 13). 4.x has no inner batches and reads such properties as any others.""",
    )

    writes_inner_batches = _version_rule(
        lambda v: v >= (5, 0, 0),
        """5.0.0+: inner-batch records exist (the 5.x send path of BatchConsumeQueue topics
        sets MessageSysFlag's INNER_BATCH_FLAG 0x80 and NEED_UNWRAP_FLAG 0x40, STORE_FORMAT
        §6); a 4.x broker has no inner batches, so those bits on a 4.x store are an anomaly
        (verify: CL_SYSFLAG).""",
    )

    reput_stops_at_end_offset = _version_rule(
        lambda v: v >= (5, 0, 0),
        """5.0.0+: ``ReputMessageService.doReput`` stops for good at a record that ends beyond
        the reput's end offset (``reputFromOffset + size > getConfirmOffset()``, later
        ``getReputEndOffset()``; RECOVERY §9.5); 4.x dispatches it.""",
    )

    accepts_v2 = _version_rule(
        lambda v: v >= (5, 1, 0),
        """MESSAGE_MAGIC_CODE_V2 exists from 5.1.0.""",
    )

    remaining_checks = _version_rule(
        lambda v: v >= (5, 3, 2),
        """5.3.2+: checkMessageAndReturnSize refuses records that cannot fit the buffer.""",
    )

    new_properties_parser = _version_rule(
        lambda v: v >= (4, 9, 1),
        """4.9.1+ scanner parser; the 4.6.0-4.9.0 split parser before.""",
    )

    properties_trailing_separator = _version_rule(lambda v: v < (4, 9, 1) or v >= (5, 2, 0))

    has_prop_crc = _version_rule(lambda v: v >= (5, 2, 0))

    prop_crc_zero_accepted = _version_rule(lambda v: v >= (5, 3, 2))

    delay_table_in_abnormal_recovery = _version_rule(
        lambda v: not ((4, 9, 2) <= v < (5, 0, 0)),
        """Quirk Q1: 4.9.2-4.9.8 parse the delay table after recover(), so maxDelayLevel is 0
        while abnormal recovery dispatches.""",
    )

    normal_recovery_walkback = _version_rule(
        lambda v: v >= (5, 3, 2),
        """5.3.2+: normal recovery starts at the last file with from <= maxPhyOffsetOfCQ and
        dispatches records beyond it (RECOVERY §4.2).""",
    )

    @cached_property
    def startup_reput_from_cq(self) -> bool:
        """4.x catches up from the consume queues' max offset at start-up; 5.x does not
        (unless recheckReputOffsetFromCq)."""
        return self.version < (5, 0, 0) or self.recheck_reput_offset_from_cq

    indexes_tags = _version_rule(
        lambda v: v >= (5, 4, 0),
        """5.4.0+: IndexService.buildIndex also puts a record's TAGS property (the whole
        value, when not empty) under the key ``topic#T#tags`` (MessageConst.INDEX_TAG_TYPE),
        after its UNIQ_KEY and KEYS keys; rollback records are skipped as before.""",
    )

    recovery_start_checks_first_record = _version_rule(
        lambda v: v >= (5, 4, 0),
        """5.4.0+: CommitLog.isMappedFileMatchedRecover reads a file's first record with
        checkMessageAndReturnSize (body CRC under checkCRCOnRecover, every check of the walk)
        and takes the file only where that succeeds with a message; normal recovery then
        compares that record's PHYSICALOFFSET field with maxPhyOffsetOfCQ (5.3.2-5.3.3: the
        file's own offset), messageIndexSafe acts in normal recovery too, and both searches
        look at no more than commitLogRecoverMaxNum (10) files from the last
        (recovery_start_file_limit).""",
    )

    @cached_property
    def recovery_start_file_limit(self) -> int | None:
        """5.4.0+: how many commitlog files, from the last, the recovery's search for its
        start file looks at (commitLogRecoverMaxNum, default 10; rmqtool refuses any other
        value); None: no limit (up to 5.3.3)."""
        return 10 if self.recovery_start_checks_first_record else None

    abnormal_start_by_logics_offset = _version_rule(
        lambda v: v >= (5, 5, 0),
        """5.5.0+: abnormal recovery takes the last file whose first record's PHYSICALOFFSET
        is at or below the checkpoint's logicsPhysicalOffset (ConsumeQueueStore
        .isMappedFileMatchedRecover); where that field is 0 or less (a checkpoint an older
        release wrote) it takes the first record's store timestamp at or below the
        checkpoint's logicsMsgTimestamp, without the 3 s margin and without
        physicMsgTimestamp (up to 5.4.0: min(physic, logics) - 3 s).""",
    )

    hash_slot_count_every_put = _version_rule(
        lambda v: v <= (4, 7, 0),
        """Quirk Q8: 4.6.0-4.7.0 counted every put in hashSlotCount.""",
    )

    index_flushed_at_shutdown = _version_rule(
        lambda v: v >= (5, 0, 0),
        """5.0.0+ flushes every index file at shutdown (indexCount 0 -> 1 on disk; RECOVERY §12).""",
    )

    @cached_property
    def max_delay_level(self) -> int:
        return len(self.delay_levels)

    def delay_millis(self, level: int) -> int:
        if 1 <= level <= len(self.delay_levels):
            return self.delay_levels[level - 1]
        return 1000

    def deliver_timestamp(self, store_timestamp: int, level: int) -> int:
        """``computeDeliverTimestamp``: the store timestamp plus the level's delay, a Java
        long sum (it wraps: a store timestamp near Long.MAX gives a negative tagsCode)."""
        t = store_timestamp + self.delay_millis(level)
        return java_long(t)
