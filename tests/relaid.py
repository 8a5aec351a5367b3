"""A test store's records laid out again in smaller commitlog files (a store of more files
from a real fixture): tests/test_repair.py and tests/oracle/test_repair_fixtures_oracle.py."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.recovery import check as ck
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
END_FILE_MIN_BLANK_LENGTH = 8  # the broker always leaves room for a BLANK at a file's end


def relaid(root: Path, file_size: int) -> None:
    """The store's records (same bytes but PHYSICALOFFSET) laid out again as the broker's
    doAppend would in commitlog files of ``file_size`` bytes (BLANK at each file's end),
    consume queues and index rebuilt by rebuild-index: a sound store of more files."""
    store = Store.open(root)
    raw: list[bytes] = []
    for f in store.commitlog:
        with store.map(f) as mf:
            pos = 0
            while pos < mf.size:
                c = ck.check_record(mf.buf, pos, mf.size, P494)
                if not c.ok or c.size <= 0 or c.reason == ck.BLANK:
                    break
                raw.append(bytes(mf.buf[pos : pos + c.size]))
                pos += c.size
        os.remove(f.path)
    files: list[bytearray] = [bytearray(file_size)]
    pos = 0
    for rec in raw:
        if pos + len(rec) + END_FILE_MIN_BLANK_LENGTH > file_size:
            files[-1][pos : pos + 8] = cl.build_blank(file_size - pos)
            files.append(bytearray(file_size))
            pos = 0
        b = bytearray(rec)
        struct.pack_into(">q", b, 28, (len(files) - 1) * file_size + pos)  # PHYSICALOFFSET
        files[-1][pos : pos + len(b)] = b
        pos += len(b)
    for k, data in enumerate(files):
        (root / "commitlog" / f"{k * file_size:020d}").write_bytes(bytes(data))
    assert run(["rebuild-index", "--yes", str(root), "--quiet", "--backup-dir", str(root.parent / "relaid-bk")]) == 1
