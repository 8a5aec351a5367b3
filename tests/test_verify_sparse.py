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


# ---------------------------------------------------------------------------------------
# issue 33 R8: absurd sparse files under a 2 GiB address-space limit

TWO_GIB = 2 << 30


def _absurd(tmp_path: Path, what: str) -> Path:
    """``clean`` with one file sparse-extended to 64 GiB: the last commitlog file, the
    checkpoint, the last index file; ``crash_midwrite`` with a queue's first file so; or a
    store of one commitlog file of 64 GiB (no file of the mapped size to infer it from)."""
    import shutil

    from conftest import real_store

    root = tmp_path / what
    # (crash_midwrite for the queue file: repair reads the queues' units where the
    # commitlog has a damaged region, as that store's torn last record)
    shutil.copytree(real_store("crash_midwrite" if what == "queue" else "clean"), root)
    if what == "single":
        for p in sorted((root / "commitlog").iterdir())[1:]:
            p.unlink()
        target = root / "commitlog" / "00000000000000000000"
    else:
        target = {
            "commitlog": sorted((root / "commitlog").iterdir())[-1],
            "checkpoint": root / "checkpoint",
            "index": sorted((root / "index").iterdir())[-1],
            "queue": sorted((root / "consumequeue" / "TopicA" / "0").iterdir())[0],
        }[what]
    os.truncate(target, 64 << 30)
    return root


# (command, the statuses it may end with; 8 only as a refusal of one line)
_COMMANDS: dict[str, list[tuple[tuple[str, ...], set[int]]]] = {
    "commitlog": [
        (("info",), {0, 4}),
        (("verify",), {4}),
        (("dump", "commitlog"), {0, 4}),
        (("recover", "--dry-run"), {8}),
        (("repair", "--dry-run"), {0, 4}),
        (("rebuild-index", "--dry-run"), {0, 4}),
        (("offsets",), {0, 4}),
    ],
    "checkpoint": [(("repair", "--dry-run"), {0, 4})],
    "index": [(("offsets",), {0, 4}), (("dump", "index", "--key", "ORDER-1"), {0, 1, 4})],
    "queue": [(("repair", "--dry-run"), {0, 4}), (("info",), {0, 4})],
    "single": [
        (("info",), {0, 4}),
        (("dump", "commitlog"), {0, 4}),
        (("verify",), {4}),
        (("recover", "--dry-run"), {8}),
    ],
}


@pytest.mark.parametrize("what", sorted(_COMMANDS))
def test_commands_on_a_64_gib_sparse_file_under_a_2_gib_address_space(tmp_path: Path, what: str) -> None:
    """Every command on a store with a sparse 64 GiB file, under ``prlimit --as`` 2 GiB,
    works or refuses with one line: the store model maps a file at most to its kind's
    mapped size (the broker maps no more) and scans through windows, never a 64 GiB file
    whole (each of these exited 8 "Cannot allocate memory", or ran out of memory)."""
    import fuzzdamage as fd

    root = _absurd(tmp_path, what)
    for argv, codes in _COMMANDS[what]:
        full = [argv[0], *argv[1:2], str(root), *argv[2:]] if argv[0] == "dump" else [argv[0], str(root), *argv[1:]]
        o = fd.run_child(full, 120, TWO_GIB)
        assert not o.hang and not o.memory and "allocate memory" not in o.err, (argv, o.code, o.err)
        assert o.code in codes and "internal error" not in o.err, (argv, o.code, o.err)
        if o.code == 8:
            assert o.err.count("\n") == 1 and "commitlog file is 68719476736 bytes" in o.err, o.err
