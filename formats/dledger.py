"""DLedger commitlog files (``enableDLegerCommitLog=true``, RocketMQ 4.5+): the entry that wraps
each message, the end-of-file padding, the index unit, and the two small properties files.

Mirrors the DLedger library RocketMQ ships (``io.openmessaging.storage:dledger``):
``entry/DLedgerEntry.java`` and ``entry/DLedgerEntryCoder.java`` (encode, encodeIndex),
``store/file/DLedgerMmapFileStore.java`` (MAGIC_1, INDEX_UNIT_SIZE, checkpoint keys, recover),
``store/file/MmapFileList.java`` (BLANK_MAGIC_CODE, MIN_BLANK_LEN, preAppend's padding),
``MemberState.java`` (currterm), ``DLedgerConfig.java`` (paths, mappedFileSizeForEntryIndex), and
RocketMQ's ``store/dledger/DLedgerCommitLog.java`` (the append hook that rewrites the message's
PHYSICALOFFSET to the entry's position + BODY_OFFSET). The layout is the same, byte for byte, in
every version RocketMQ 4.6-5.5 ships: 0.1 (4.6.x, 4.7.x), 0.2.2 (4.8.0), 0.2.6 (4.9.0-4.9.4),
0.3.1.2 (4.9.5-4.9.8, 5.1.x-5.3.x), 0.3.1 (5.0.0), 0.3.2 (5.4.0, 5.5.0), 0.3.3.4 (5.5.1): the
entry and coder classes differ only in a method's spelling (computSizeInBytes, 0.1-0.2.2), the
store's format constants not at all (the recovery differs: see ``recovery/dledger``).

All integers are big-endian and signed (Java ``ByteBuffer``). The directory of one member is
``<storePathRootDir>/dledger-<selfId>`` (``DLedgerConfig.getDefaultPath``) holding ``data/``
(entries; ``storePathDLedgerCommitLog`` moves it, 4.9.x+), ``index/``, ``checkpoint`` and
``currterm`` (written through ``IOUtils.string2File``: a ``.tmp`` renamed, the previous content
kept as ``.bak``).
"""

from __future__ import annotations

from typing import NamedTuple

from construct import Const, Int32sb, Int64sb, Struct

from .schema import fixed_struct, numpy_dtype

MAGIC_1 = 1  # DLedgerMmapFileStore.MAGIC_1 = CURRENT_MAGIC: the only magic any version writes
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE: the end-of-file padding
MIN_BLANK_LEN = 8  # MmapFileList.MIN_BLANK_LEN: an entry must leave room for a padding's header
POS_OFFSET = 24  # DLedgerEntry.POS_OFFSET = 4 + 4 + 8 + 8
HEADER_SIZE = 44  # DLedgerEntry.HEADER_SIZE = POS_OFFSET + 8 + 4 + 4 + 4 (recovery: size > HEADER_SIZE)
BODY_OFFSET = 48  # DLedgerEntry.BODY_OFFSET = HEADER_SIZE + 4: the message starts here
INDEX_UNIT_SIZE = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE
INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024  # DLedgerConfig.mappedFileSizeForEntryIndex (160 MiB)

CHECKPOINT_FILE = "checkpoint"  # DLedgerMmapFileStore.CHECK_POINT_FILE
END_INDEX_KEY = "endIndex"  # DLedgerMmapFileStore.END_INDEX_KEY
COMMITTED_INDEX_KEY = "committedIndex"  # DLedgerMmapFileStore.COMMITTED_INDEX_KEY
TERM_FILE = "currterm"  # MemberState.TERM_PERSIST_FILE
TERM_KEY = "currTerm"  # MemberState.TERM_PERSIST_KEY_TERM
VOTE_KEY = "voteLeader"  # MemberState.TERM_PERSIST_KEY_VOTE_FOR

ENTRY_HEADER = "DLedger entry header (DLedgerEntryCoder.encode; DLedgerEntry.BODY_OFFSET = 48)" * Struct(
    "magic" / Int32sb * "magic: DLedgerMmapFileStore.CURRENT_MAGIC (1); -1 opens the end-of-file padding instead",
    "size" / Int32sb * "size: the entry's length, BODY_OFFSET + the body's (DLedgerEntry.computeSizeInBytes)",
    "index" / Int64sb * "index: the entry's place in the ledger, from 0, one more per entry",
    "term" / Int64sb * "term: the leader's term when it was appended (0.1 starts at -1, later at 0)",
    "pos" / Int64sb * "pos: the entry's own offset in the data files (recovery checks it)",
    "channel" / Int32sb * "channel: reserved, 0",
    "chain_crc" / Int32sb * "chainCrc: never computed by any version, 0",
    "body_crc" / Int32sb * "bodyCrc: never computed by any version, 0",
    "body_len" / Int32sb * "body length: size - BODY_OFFSET (recovery checks it)",
)

PADDING = "DLedger end-of-file padding (MmapFileList.preAppend)" * Struct(
    "magic" / Const(BLANK_MAGIC, Int32sb) * "BLANK_MAGIC_CODE (-1)",
    "size" / Int32sb * "the length of the rest of the file, this header included",
)

INDEX_UNIT = "DLedger index unit (DLedgerEntryCoder.encodeIndex; at index * 32 of the index files)" * Struct(
    "magic" / Int32sb * "the entry's magic",
    "pos" / Int64sb * "the entry's offset in the data files",
    "size" / Int32sb * "the entry's size",
    "index" / Int64sb * "the entry's index",
    "term" / Int64sb * "the entry's term",
)

ENTRY_STRUCT, ENTRY_FIELDS = fixed_struct(ENTRY_HEADER)
INDEX_STRUCT, INDEX_FIELDS = fixed_struct(INDEX_UNIT)
INDEX_DTYPE = numpy_dtype(INDEX_UNIT)


class EntryHeader(NamedTuple):
    """An entry's header as :data:`ENTRY_HEADER` reads it."""

    magic: int
    size: int
    entry_index: int  # (the schema's "index": a tuple's index() keeps its name)
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_len: int


class IndexUnit(NamedTuple):
    """An index unit as :data:`INDEX_UNIT` reads it."""

    magic: int
    pos: int
    size: int
    entry_index: int  # (the schema's "index")
    term: int


def read_entry_header(buf: bytes | bytearray | memoryview, pos: int) -> EntryHeader:
    """The entry header at ``pos`` (48 bytes must lie there)."""
    return EntryHeader(*ENTRY_STRUCT.unpack_from(buf, pos))


def read_index_unit(buf: bytes | bytearray | memoryview, pos: int) -> IndexUnit:
    """The index unit at ``pos`` (32 bytes must lie there)."""
    return IndexUnit(*INDEX_STRUCT.unpack_from(buf, pos))


def build_entry(index: int, term: int, pos: int, body: bytes, magic: int = MAGIC_1) -> bytes:
    """An entry as DLedgerEntryCoder.encode writes it (the CRCs and the channel 0)."""
    built: bytes = ENTRY_HEADER.build(
        dict(
            magic=magic,
            size=BODY_OFFSET + len(body),
            index=index,
            term=term,
            pos=pos,
            channel=0,
            chain_crc=0,
            body_crc=0,
            body_len=len(body),
        )
    )
    return built + body


def build_index_unit(pos: int, size: int, index: int, term: int, magic: int = MAGIC_1) -> bytes:
    """An index unit as DLedgerEntryCoder.encodeIndex writes it."""
    built: bytes = INDEX_UNIT.build(dict(magic=magic, pos=pos, size=size, index=index, term=term))
    return built


def build_padding(length: int) -> bytes:
    """The end-of-file padding of ``length`` bytes (header, then zeros)."""
    built: bytes = PADDING.build(dict(size=length))
    return built + bytes(length - len(built))


class Checkpoint(NamedTuple):
    """``checkpoint`` as DLedgerMmapFileStore.loadCheckPoint reads it: the text of each key as
    ``String.valueOf(properties.get(key)).trim()`` (None: the key is absent); recovery reads only
    committedIndex (``Long.valueOf``), endIndex is written for people."""

    end_index: str | None
    committed_index: str | None


class Term(NamedTuple):
    """``currterm`` as MemberState.loadTerm reads it (None: the key is absent)."""

    curr_term: str | None
    vote_leader: str | None


def parse_java_long(text: str | None) -> int | None:
    """``Long.valueOf(text)``: an optional sign and ASCII digits that fit a long; None when Java
    throws NumberFormatException (or the text is None)."""
    if text is None:
        return None
    s = text[1:] if text[:1] in "+-" else text
    if not s or not s.isascii() or not s.isdigit():
        return None
    v = int(text)
    return v if -(1 << 63) <= v < (1 << 63) else None


def java_trim(text: str) -> str:
    """``String.trim()``: every leading and trailing character up to U+0020."""
    i, j = 0, len(text)
    while i < j and text[i] <= " ":
        i += 1
    while j > i and text[j - 1] <= " ":
        j -= 1
    return text[i:j]


def checkpoint_from(props: dict[str, str] | None) -> Checkpoint:
    """The checkpoint's keys from its parsed properties (None: the file is missing or
    unreadable, as loadCheckPoint's null)."""
    if props is None:
        return Checkpoint(None, None)
    end = props.get(END_INDEX_KEY)
    com = props.get(COMMITTED_INDEX_KEY)
    return Checkpoint(None if end is None else java_trim(end), None if com is None else java_trim(com))


def term_from(props: dict[str, str] | None) -> Term:
    """currterm's keys from its parsed properties."""
    if props is None:
        return Term(None, None)
    return Term(props.get(TERM_KEY), props.get(VOTE_KEY))
