"""verify skips the holes of sparse files (recovery/verify/holes.py): a store whose
pre-allocated files are sparse gets exactly the report of the same bytes written out,
including garbage and a record copy inside the hole region, for any part size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rmqtool.recovery import shapes as sh
from rmqtool.recovery import verify as v
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify.holes import DataExtents
from rmqtool.recovery.versions import BrokerProfile

FILE = 1 << 20


def _dense(root: Path) -> None:
    sh.write_shape_store(root, sh.SHAPES["gen_commitlog"], 1500, file_size=FILE, cq=False)


def _sparse_copy(src: Path, dst: Path, extra: list[tuple[int, bytes]]) -> None:
    """``dst``: ``src`` with every commitlog file's zero tail a hole, then ``extra`` bytes
    written into the last file (inside its hole region); ``src`` gets the same bytes."""
    import shutil

    shutil.copytree(src, dst)
    files = sorted((dst / "commitlog").iterdir())
    for p in files:
        data = p.read_bytes()
        keep = len(data.rstrip(b"\0"))
        with open(p, "wb") as fh:
            fh.write(data[:keep])
            fh.truncate(len(data))
    for q in (files[-1], sorted((src / "commitlog").iterdir())[-1]):
        with open(q, "r+b") as fh:
            for at, b in extra:
                fh.seek(at)
                fh.write(b)


def _report(root: Path, part: int, jobs: int = 1) -> dict[str, Any]:
    r = v.verify_store(Store.open(root), BrokerProfile.for_version("4.9.4"), jobs=jobs, part_size=part)
    d = r.to_dict()
    d.pop("store", None)
    return d


@pytest.mark.parametrize("extra", ["none", "garbage", "record"])
def test_sparse_store_reports_like_its_written_out_copy(tmp_path: Path, extra: str) -> None:
    dense = tmp_path / "dense"
    _dense(dense)
    last = sorted((dense / "commitlog").iterdir())[-1]
    base = int(last.name)
    used = len(last.read_bytes().rstrip(b"\0"))
    bytes_in: list[tuple[int, bytes]] = []
    if extra == "garbage":
        bytes_in = [(used + 150_000, b"\x13\x37" * 10)]
    elif extra == "record":  # an intact record (its PHYSICALOFFSET patched) far past the end of the data
        raw = bytearray(
            sh.build_message(
                {
                    **next(iter(sh.records(sh.SHAPES["gen_commitlog"], 1)))[2],
                    "queue_offset": 0,
                    "physical_offset": base + used + 60_000,
                }
            )
        )
        bytes_in = [(used + 60_000, bytes(raw))]
    sparse = tmp_path / "sparse"
    _sparse_copy(dense, sparse, bytes_in)
    fd = os.open(sorted((sparse / "commitlog").iterdir())[-1], os.O_RDONLY)
    try:
        holes = DataExtents(fd, 0, FILE).spans
    finally:
        os.close(fd)
    if holes == [(0, FILE)]:
        pytest.skip("this file system reports no holes")
    for part in (FILE, 64 << 10, 12345):
        assert _report(sparse, part) == _report(dense, part)
    assert _report(sparse, 64 << 10, jobs=2) == _report(dense, 64 << 10)
    codes = {f["code"] for f in _report(sparse, FILE)["findings"]}
    assert ("CL_GARBAGE_AFTER_END" in codes) == (extra == "garbage")
    assert ("CL_SALVAGEABLE_RECORDS" in codes) == (extra == "record")
