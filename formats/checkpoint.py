"""The checkpoint file (StoreCheckpoint, 4096 bytes; STORE_FORMAT.md §16).

4.x uses the first 24 bytes (three i64); 5.0.0+ adds masterFlushedOffset at 24, 5.1.1+
confirmPhyOffset at 32 and 5.5.0+ logicsPhysicalOffset at 40. The rest of the page is zero.
"""

from __future__ import annotations

from typing import NamedTuple

from construct import Int64sb, Struct

from .schema import fixed_struct

CHECKPOINT_FILE_SIZE = 4096
MARGIN_MS = 3000
# the most of a checkpoint file anything reads (a damaged one may be a sparse file of GiB)
CHECKPOINT_READ_LIMIT = 1 << 20

CHECKPOINT_4X = "StoreCheckpoint 4.x (StoreCheckpoint @ 4.9.4)" * Struct(
    "physic_msg_timestamp" / Int64sb * "physicMsgTimestamp: store time covered by the last full commitlog flush",
    "logics_msg_timestamp" / Int64sb * "logicsMsgTimestamp: store time of the last message dispatched to a CQ",
    "index_msg_timestamp" / Int64sb * "indexMsgTimestamp: endTimestamp of the last index file that became full",
)
CHECKPOINT_5X = "StoreCheckpoint 5.1.1+ (StoreCheckpoint @ 5.3.3)" * Struct(
    "physic_msg_timestamp" / Int64sb,
    "logics_msg_timestamp" / Int64sb,
    "index_msg_timestamp" / Int64sb,
    "master_flushed_offset" / Int64sb * "masterFlushedOffset (5.0.0+, HA)",
    "confirm_phy_offset" / Int64sb * "confirmPhyOffset (5.1.1+)",
)
CHECKPOINT_55 = "StoreCheckpoint 5.5.0+ (StoreCheckpoint @ 5.5.1)" * Struct(
    "physic_msg_timestamp" / Int64sb,
    "logics_msg_timestamp" / Int64sb,
    "index_msg_timestamp" / Int64sb,
    "master_flushed_offset" / Int64sb,
    "confirm_phy_offset" / Int64sb,
    "logics_physical_offset"
    / Int64sb
    * "logicsPhysicalOffset (5.5.0+): commitlog offset of the last message dispatched to a CQ",
)
_FAST, _NAMES = fixed_struct(CHECKPOINT_55)
CHECKPOINT_READ_SIZE = _FAST.size  # the bytes any release reads (48)


class Checkpoint(NamedTuple):
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int
    logics_physical_offset: int = 0  # 5.5.0+

    @property
    def min_timestamp(self) -> int:
        """max(0, min(physic, logics) - 3000): the abnormal-recovery threshold."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - MARGIN_MS)

    @property
    def min_timestamp_index(self) -> int:
        """min(minTimestamp, indexMsgTimestamp): no extra margin on the index value."""
        return min(self.min_timestamp, self.index_msg_timestamp)


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Decode a checkpoint's bytes; a short or missing file reads as zeros, as the broker's
    mmap of one page extends it with zeros."""
    raw = bytes(data[:CHECKPOINT_READ_SIZE]).ljust(CHECKPOINT_READ_SIZE, b"\0")
    return Checkpoint(*_FAST.unpack(raw))


def encode_checkpoint(cp: Checkpoint, size: int = CHECKPOINT_FILE_SIZE) -> bytes:
    built: bytes = CHECKPOINT_55.build(cp._asdict())
    return built.ljust(size, b"\0")
