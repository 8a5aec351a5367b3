"""recover continuing the last kept index file reads it through a map that knows the
file's holes (``recover.writing.index_file_bytes``): the image's ``write_to`` then writes
the blocks in a hole as zeros without reading them, and still gives ``to_bytes``' bytes,
stray bytes past indexCount included."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from rmqtool.recovery.indexbuild import DispatchRequest, IndexBuilder
from rmqtool.recovery.indexbuild import image as image_mod
from rmqtool.recovery.recover.writing import index_file_bytes
from rmqtool.recovery.store import map_readonly

SLOTS, ENTRIES = 1000, 200_000  # 4 MB: room for holes between the data
SIZE = 40 + SLOTS * 4 + ENTRIES * 20


def _sparse_index(path: Path) -> None:
    first = IndexBuilder(SLOTS, ENTRIES)
    for i in range(30):
        first.add_one(DispatchRequest("T", 0, 100 * i, 100, 0, 1_700_000_000_000 + i, i, f"k{i} u{i}", None, 0))
    raw = first.files[0].to_bytes()
    used = 40 + SLOTS * 4 + 64 * 20
    with open(path, "wb") as f:
        f.write(raw[:used])  # header, slots, the entries
        f.seek(SIZE - 300_000)
        f.write(b"\x07" * 10)  # stray bytes far past indexCount, in their own extent
        f.truncate(SIZE)


class _Sink(io.BytesIO):
    zeros = 0

    def write_zeros(self, n: int) -> None:
        self.zeros += n
        self.write(bytes(n))


@pytest.mark.parametrize("block", [4096, 1 << 16, 1 << 24])
def test_continued_index_file_over_a_sparse_map_streams_to_bytes(tmp_path: Path, block: int) -> None:
    path = tmp_path / "idx"
    _sparse_index(path)
    plain = path.read_bytes()
    # (the recover path maps files of 64 MB and more; this one is mapped the same way)
    with open(path, "rb") as fh:
        mapped = map_readonly(fh.fileno(), SIZE)
    outs = []
    for base in (plain, mapped):
        cont = IndexBuilder(SLOTS, ENTRIES, existing_last=base)
        for i in range(30, 36):
            cont.add_one(DispatchRequest("T", 0, 100 * i, 100, 0, 1_700_000_000_000 + i, i, f"k{i}", None, 0))
        img = cont.files[0]
        sink = _Sink()
        img.write_to(sink, block)
        assert sink.getvalue() == img.to_bytes()
        outs.append(sink.getvalue())
    assert outs[0] == outs[1]
    assert outs[0][SIZE - 300_000 : SIZE - 300_000 + 10] == b"\x07" * 10


def test_index_file_map_knows_the_data_extents(tmp_path: Path) -> None:
    path = tmp_path / "big"
    with open(path, "wb") as f:
        f.write(b"\x01" * 5000)
        f.truncate(64 << 20)
    m = index_file_bytes(path)
    try:
        ext = m.data_extents
        assert ext and ext[0][0] == 0 and ext[0][1] >= 5000 and ext[-1][1] <= 64 << 20
        assert bytes(m[:5000]) == b"\x01" * 5000 and len(m) == 64 << 20
    finally:
        m.close()


def test_blocks_outside_the_extents_are_not_read() -> None:
    ext = [(0, 10), (20, 30), (50, 60)]
    got = [
        image_mod._overlaps(ext, lo, hi)
        for lo, hi in [(10, 20), (9, 20), (30, 50), (29, 31), (60, 70), (55, 56), (0, 1), (15, 21), (61, 62)]
    ]
    assert got == [False, True, False, True, False, True, True, True, False]
