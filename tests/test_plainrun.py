"""recovery.batch.plainrun (the plain rule dump and export render: runs and one record): every
record they decode has the fields, topic, properties and body the slow path
(``formats.commitlog.decode_message``) reads, on every real fixture and a synthetic store;
a damaged record ends a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqtool.formats import commitlog as cl
from rmqtool.formats.properties import parse_properties
from rmqtool.recovery.batch.plainrun import HEADER_COLUMNS, PlainFile, PlainRun, plain_record, plain_run
from rmqtool.recovery.rows import run_starts
from rmqtool.recovery.store import MappedFile
from rmqtool.recovery.synth import write_synthetic_store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


def _run(f: PlainFile, pos: int, cap: int, least: int = 1) -> PlainRun | None:
    """The run of plain records from ``pos`` (at most ``cap``), as the row walk takes it."""
    return plain_run(f, run_starts(f.buf, f.end, pos, f.end, cap, least, P494), least)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real"


def _files(tmp_path: Path) -> list[Path]:
    write_synthetic_store(tmp_path / "s", total_bytes=300_000, file_size=1 << 17, body_size=200)
    paths = sorted((tmp_path / "s" / "commitlog").iterdir())
    for d in sorted(FIXTURES.iterdir()):
        if (d / "commitlog").is_dir():
            paths += sorted((d / "commitlog").iterdir())
    return paths


def _check_run_row(buf: bytes, r: PlainRun, i: int) -> None:
    pos = int(r.P[i])
    m = cl.decode_message(buf, pos)
    for name in HEADER_COLUMNS:
        assert int(r.field(name)[i]) == getattr(m, name), (pos, name)
    assert r.topics[int(r.topic_inv[i])].decode() == m.topic
    a, n = int(r.topic_start[i]), int(r.topic_len[i])
    assert buf[a : a + n].decode() == m.topic
    bs, bl = (int(x[i]) for x in r.body_spans())
    assert (bs, bl) == (m.body_pos, m.body_length)
    props = parse_properties(m.properties)
    assert list(props) == r.names
    ps = int(r.props_start[i])
    for name in r.names:
        vs, vl = (int(x[i]) for x in r.value_spans(name))
        assert buf[ps + vs : ps + vs + vl].decode() == props[name], (pos, name)
        assert r.value(name)[i].tobytes().rstrip(b"\0").decode() == props[name]


def test_runs_and_single_records_decode_what_the_slow_path_reads(tmp_path: Path) -> None:
    runs = rows = singles = 0
    for path in _files(tmp_path):
        with MappedFile(path) as mf:
            buf = bytes(mf.buf[: mf.size])
        end = len(buf)
        f = PlainFile(buf, end, False)
        pos = 0
        while pos + 8 <= end:
            total, magic = cl.PREFIX.unpack_from(buf, pos)
            if magic not in cl.MESSAGE_MAGICS or total <= 0:
                break
            rec = plain_record(buf, f.mv, pos, end, False)
            if rec is not None:
                h, tb, segs, d = rec
                m = cl.decode_message(buf, pos)
                assert (
                    h.total_size == m.total_size and h.physical_offset == m.physical_offset and tb.decode() == m.topic
                )
                assert d == parse_properties(m.properties) and len(segs) == len(d)
                singles += 1
            run = _run(f, pos, 64)
            if run is not None:
                runs += 1
                rows += run.n
                for i in range(run.n):
                    _check_run_row(buf, run, i)
                assert rec is not None  # a record a run takes is plain one at a time too
            pos += total
        f.release()
    assert runs > 100 and rows > runs and singles > 100


@pytest.mark.parametrize("damage", ["crc", "quote_in_properties", "properties_of_another_shape"])
def test_a_record_that_is_not_plain_ends_the_run(tmp_path: Path, damage: str) -> None:
    write_synthetic_store(tmp_path / "s", total_bytes=60_000, file_size=1 << 16, body_size=100)
    path = sorted((tmp_path / "s" / "commitlog").iterdir())[0]
    data = bytearray(path.read_bytes())
    starts = [0]
    while len(starts) < 40:
        starts.append(starts[-1] + int.from_bytes(data[starts[-1] : starts[-1] + 4], "big"))
    m = cl.decode_message(bytes(data), starts[20])
    if damage == "crc":
        data[m.body_pos] ^= 1
    elif damage == "quote_in_properties":
        data[m.properties_pos + 1] = 0x22
    else:  # the first name's first letter: another shape, still plain one at a time
        data[m.properties_pos] = ord("Z")
    buf = bytes(data)
    f = PlainFile(buf, len(buf), False)
    run = _run(f, 0, 1000)
    assert run is not None
    assert run.n == 20
    single = plain_record(buf, f.mv, starts[20], len(buf), False)
    assert (single is not None) == (damage == "properties_of_another_shape")
    again = _run(f, starts[20], 1000)
    if single is None:
        assert again is None
    else:  # a run of its own shape (one record)
        assert again is not None and again.n == 1
    f.release()
