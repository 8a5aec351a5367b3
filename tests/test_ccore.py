"""The compiled core (recovery/_ccore.c) and its pure-Python twin (recovery/ccore.py) give
the same answers on any bytes: record chains that are sound, bit-flipped, truncated, zeroed
or hold absurd lengths, empty buffers, positions past the end. The C side must also never
read outside the buffer (a crash here is a crash of every command on a damaged store)."""

from __future__ import annotations

import functools
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqtool.formats import commitlog as cl
from rmqtool.formats.crc import crc32_reference
from rmqtool.recovery import ccore

V1, V2, BLANK = cl.MAGIC_V1, cl.MAGIC_V2, cl.BLANK_MAGIC


def _need_c() -> None:
    if not ccore.available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but rmqtool.recovery._ccore is not built")
        pytest.skip("rmqtool.recovery._ccore is not built (no C compiler at install time)")


def _with_c(test):  # type: ignore[no-untyped-def]
    """A property test that compares the compiled core with Python: skipped (failed under
    CI=true) before hypothesis draws anything when the core is not built."""

    @functools.wraps(test)
    def run(*args, **kwargs):  # type: ignore[no-untyped-def]
        _need_c()
        return test(*args, **kwargs)

    return run


_sizes = st.one_of(st.integers(-3, 300), st.sampled_from([0, -1, 0x7FFFFFFF, -0x80000000, 1 << 30]))
_magics = st.sampled_from([V1, V1, V1, V2, BLANK, 0, 12345])


@st.composite
def _buffers(draw: st.DrawFn) -> bytes:
    """A chain of record-like prefixes (TOTALSIZE, magic, filler), then damage."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 12))):
        size = draw(_sizes)
        rec = struct.pack(">ii", size, draw(_magics))
        fill = max(0, min(size, 300) - 8) if size > 0 else draw(st.integers(0, 8))
        out += rec + draw(st.binary(min_size=fill, max_size=fill))
    data = bytearray(out)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "zeros", "cut"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "zeros":
            n = draw(st.integers(1, 64))
            data[at : at + n] = bytes(len(data[at : at + n]))
        else:
            del data[at:]
    return bytes(data)


_positions = st.one_of(st.integers(-2, 2000), st.sampled_from([(1 << 62) - 1, 1 << 62, 1 << 40]))


def _call(f, *args):  # type: ignore[no-untyped-def]
    try:
        starts, pos, why = f(*args)
    except (ValueError, OverflowError) as exc:
        return type(exc).__name__
    assert starts.dtype == np.int64
    return starts.tolist(), pos, why


@_with_c
@settings(max_examples=300, deadline=None)
@given(
    buf=_buffers(),
    pos=_positions,
    stop=_positions,
    end=_positions,
    max_count=st.integers(-1, 20),
    min_total=st.one_of(st.integers(-1, 100), st.just(0)),
    need=st.sampled_from([0, 4, 8, 40, 88, -1]),
    magics=st.sampled_from([None, (V1,), (V1, V2)]),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_chase_is_the_same_in_c_and_python_on_damaged_buffers(
    buf, pos, stop, end, max_count, min_total, need, magics, kind
) -> None:
    b = kind(buf)
    want = _call(ccore.chase_py, b, pos, stop, end, max_count, min_total, need, magics)
    got = _call(ccore.chase_c, b, pos, stop, end, max_count, min_total, need, magics)
    assert got == want
    if isinstance(want, tuple):
        starts, p, why = want
        assert len(starts) <= max(max_count, 0)
        for s in starts:  # every start taken: its TOTALSIZE fits before end, and leads on
            assert pos <= s < stop and s + need <= end
        assert why in (ccore.LIMIT, ccore.CAPPED, ccore.SHORT, ccore.MAGIC, ccore.SIZE, ccore.FIT)


def test_chase_follows_totalsize_and_names_why_it_stopped() -> None:
    recs = b"".join(struct.pack(">ii", 16, V1) + bytes(8) for _ in range(3)) + struct.pack(">ii", 99, BLANK)
    for f in (ccore.chase_py, ccore.chase_c) if ccore.available() else (ccore.chase_py,):
        s, p, why = f(recs, 0, 1 << 20, len(recs), 100, 0, 8, (V1,))
        assert s.tolist() == [0, 16, 32] and p == 48 and why == ccore.MAGIC
        s, p, why = f(recs, 0, 1 << 20, len(recs), 2, 0, 8, (V1,))
        assert s.tolist() == [0, 16] and p == 32 and why == ccore.CAPPED
        s, p, why = f(recs, 0, 20, len(recs), 100, 0, 0, None)
        assert s.tolist() == [0, 16] and p == 32 and why == ccore.LIMIT
        s, p, why = f(recs, 0, 1 << 20, 40, 100, 0, 0, None)
        assert s.tolist() == [0, 16] and p == 32 and why == ccore.FIT  # 32 + 16 > 40
        s, p, why = f(recs, 48, 1 << 20, len(recs), 100, 0, 0, None)  # the BLANK's 99 does not fit
        assert s.tolist() == [] and p == 48 and why == ccore.FIT
        s, p, why = f(recs, 0, 1 << 20, len(recs), 100, 16, 0, None)  # TOTALSIZE must exceed 16
        assert s.tolist() == [] and why == ccore.SIZE
        with pytest.raises(ValueError):
            f(recs, -1, 10, 10, 1, 0, 0, None)


@_with_c
@settings(max_examples=300, deadline=None)
@given(
    buf=st.binary(max_size=3000),
    spans=st.lists(
        st.tuples(
            st.integers(-4000, 4000) | st.sampled_from([-(1 << 62), 1 << 62]),
            st.integers(-4000, 4000) | st.sampled_from([-(1 << 62), 1 << 62]),
        ),
        max_size=20,
    ),
)
def test_crc32_spans_is_the_same_in_c_and_python_and_as_slices(buf: bytes, spans) -> None:
    a = np.array([x for x, _ in spans], dtype=np.int64)
    b = np.array([y for _, y in spans], dtype=np.int64)
    want = [zlib.crc32(buf[x:y]) for x, y in spans]
    assert ccore.crc32_spans_py(buf, a, b).tolist() == want
    assert ccore.crc32_spans_c(buf, a, b).tolist() == want
    assert ccore.crc32_spans_c(memoryview(buf), a, b).tolist() == want


@_with_c
@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=600), starts=st.lists(st.integers(-700, 700), max_size=30), data=st.data())
def test_join_spans_is_the_same_in_c_and_python_and_as_a_join(
    buf: bytes, starts: list[int], data: st.DataObject
) -> None:
    """Spans of one length (the numpy rows path of the Python version), of mixed lengths,
    past the end, negative (Python's slice rules)."""
    same = data.draw(st.booleans())
    w = data.draw(st.integers(-3, 80))
    ends = [a + w for a in starts] if same else [data.draw(st.integers(-700, 700)) for _ in starts]
    a = np.array(starts, dtype=np.int64)
    b = np.array(ends, dtype=np.int64)
    want = b"\x02".join(buf[x:y] for x, y in zip(starts, ends))
    assert ccore.join_spans_py(buf, a, b, 2) == want
    assert ccore.join_spans_c(buf, a, b, 2) == want
    assert ccore.join_spans_c(memoryview(buf), a, b, 0) == b"\0".join(buf[x:y] for x, y in zip(starts, ends))


def test_compiled_crc_agrees_with_the_reference_with_and_without_zlib_ng() -> None:
    """zlib-ng's zng_crc32 (when the package is loaded) and the portable table CRC of the C
    core: every length up to 1100 bytes and every alignment, against crcmod's model."""
    _need_c()
    from rmqtool.formats.crc import CRC_BACKEND

    c = ccore._ccore
    data = np.random.default_rng(22).integers(0, 256, 1200, dtype=np.uint8).tobytes()
    a = np.array([k % 8 for k in range(1100)], dtype=np.int64)
    b = a + np.arange(1100, dtype=np.int64)
    want = [zlib.crc32(data[x:y]) for x, y in zip(a.tolist(), b.tolist())]
    assert all(
        w & 0x7FFFFFFF == crc32_reference(data[x:y]) for w, x, y in list(zip(want, a.tolist(), b.tolist()))[::37]
    )
    try:
        assert c.set_crc_library(None) is False and c.crc_backend() == "portable"
        assert ccore.crc32_spans_c(data, a, b).tolist() == want
    finally:
        if CRC_BACKEND == "zlib-ng":
            from zlib_ng import zlib_ng

            assert c.set_crc_library(zlib_ng.__file__) is True
    if CRC_BACKEND == "zlib-ng":
        assert c.crc_backend() == "zlib-ng"
        assert ccore.crc32_spans_c(data, a, b).tolist() == want
    assert c.set_crc_library("/nonexistent/libnothing.so") is False  # (not loaded: refused, CRC unchanged)
    assert ccore.crc32_spans_c(data, a, b).tolist() == want


def test_crc32_spans_refuses_arrays_that_are_not_int64() -> None:
    _need_c()
    with pytest.raises(TypeError):
        ccore._ccore.crc32_spans(b"abc", np.zeros(1, dtype=np.int32), np.zeros(1, dtype=np.int32))
    with pytest.raises(ValueError):
        ccore._ccore.crc32_spans(b"abc", np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64))


def test_the_backend_fixture_switches_the_functions_callers_look_up(ccore_backend: str) -> None:
    assert ccore.BACKEND == ccore_backend
    assert ccore.chase is (ccore.chase_c if ccore_backend == "c" else ccore.chase_py)
    assert ccore.crc32_spans is (ccore.crc32_spans_c if ccore_backend == "c" else ccore.crc32_spans_py)
    assert ccore.join_spans is (ccore.join_spans_c if ccore_backend == "c" else ccore.join_spans_py)


def test_pure_python_variable_forces_the_python_backend() -> None:
    code = "from rmqtool.recovery import ccore; print(ccore.BACKEND, ccore.available())"
    env = dict(os.environ, RMQTOOL_PURE_PYTHON="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "python"
    env.pop("RMQTOOL_PURE_PYTHON")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == (["c", "True"] if ccore.available() else ["python", "False"])


def test_fast_walk_takes_the_plain_records_of_a_shape_in_bulk(tmp_path, monkeypatch, ccore_backend: str) -> None:
    """walks.broker_walk (the --broker-version auto parser probe's walk) tests records one by
    one only where a bulk step stops (the BLANK or end of each file), and its outcome is the
    broker's walk (tests/walkref.py) on the gen_commitlog shape (IPv6 hosts, many topics)."""
    from walkref import walk_file

    from rmqtool.recovery import walks as wk
    from rmqtool.recovery.batch.plain import PlainOne
    from rmqtool.recovery.shapes import SHAPES, write_shape_store

    root = tmp_path / "s"
    write_shape_store(root, SHAPES["gen_commitlog"], 400, file_size=256 << 10, cq=False)
    profile = SHAPES["gen_commitlog"].profile
    one_by_one = [0]
    real = PlainOne.total

    def counted(*args):  # type: ignore[no-untyped-def]
        one_by_one[0] += 1
        return real(*args)

    monkeypatch.setattr(PlainOne, "total", counted)
    files = sorted((root / "commitlog").iterdir())
    walked = 0
    for f in files:
        buf = f.read_bytes()
        w = wk.broker_walk(buf, len(buf), profile, collect=True)
        steps = list(walk_file(buf, len(buf), profile))
        want = [s.pos for s in steps if s.checked.is_message]
        assert list(w.starts) == want and w.count == len(want)
        last = steps[-1]
        assert (w.stop_pos, w.stop) == ((last.pos, last.checked) if not last.checked.is_message else (len(buf), None))
        walked += len(want)
    assert walked == 400 and len(files) > 1
    assert one_by_one[0] <= len(files)


def test_verify_reads_altered_crc32_property_digits_as_the_broker(tmp_path, ccore_backend: str) -> None:
    """verify's __CRC32# check reads every record's ten stored digits at once: each byte
    counts ord(c) - ord('0') (not validated, as the broker), read reversed, wrapping as a
    Java int (formats.properties.decode_crc32_digits); the CRC of each record comes from
    ccore.crc32_spans. Digits altered to other digits, letters and control bytes."""
    from rmqtool.formats.properties import decode_crc32_digits
    from rmqtool.recovery.shapes import SHAPES, write_shape_store
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.verify import verify_store

    root = tmp_path / "s"
    write_shape_store(root, SHAPES["prop_crc_5x"], 40, file_size=1 << 20, cq=True)
    (f,) = sorted((root / "commitlog").iterdir())
    data = bytearray(f.read_bytes())
    tags = [i for i in range(len(data)) if data.startswith(b"__CRC32#\x01", i)]
    assert len(tags) == 40
    want = {}
    for k, new in zip((3, 11, 27, 39), (b"0000000000", b"a1b2c3d4e5", b"\x01\xff9999999.", b"4294967295")):
        at = tags[k]
        data[at + 9 : at + 19] = new
        want[k] = decode_crc32_digits(new.decode("latin-1"))
    f.write_bytes(bytes(data))
    report = verify_store(Store.open(root), SHAPES["prop_crc_5x"].profile, jobs=1)
    got = sorted(x.details["stored"] for x in report.findings if x.code == "CL_PROP_CRC")
    assert got == sorted(want.values())
