"""verify checks the properties' encoding of a whole batch at once (recovery/verify/utf8.py):
the records with non-ASCII but valid UTF-8 properties no longer go one by one, and the
findings (CL_PROPERTIES: not UTF-8, dropped entries) are exactly those of the one-by-one
check, in the same order."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import jsonl_records

from rmqtool.cli import run
from rmqtool.recovery import shapes as sh
from rmqtool.recovery.batch.properties import nonascii_records, record_starts
from rmqtool.recovery.verify import props as vprops
from rmqtool.recovery.verify.utf8 import _MAX_BAD, invalid_utf8_records

# properties of each kind: (bytes, valid UTF-8, entries the 4.9.1+ parser drops)
_KINDS: list[tuple[bytes, bool, int]] = [
    (b"TAGS\x01A\x02KEYS\x01k1 k2\x02", True, 0),
    ("TAGS\x01订单\x02note\x01café\x02".encode(), True, 0),
    (b"TAGS\x01A\x02\x01x\x02", True, 1),  # empty name
    ("TAGS\x01Ω\x02note\x01\x02lone\x02".encode(), True, 2),  # empty value, no separator
    (b"TAGS\x01A\x02note\x01\xff\xfe\x02", False, 0),  # not UTF-8
    (b"TAGS\x01A\x02note\x01\xe4\xb8\x02\x01y\x02", False, 1),  # a cut sequence, an empty name
    (b"TAGS\x01\xed\xa0\x80\x02", False, 0),  # an encoded surrogate (strict UTF-8 refuses it)
]


def _store(root: Path, bad_every: int, count: int = 400) -> tuple[int, int]:
    """A store whose records cycle through the good kinds (one in five dropping entries),
    every ``bad_every``-th one of a bad kind; fewer than the 200 findings of one code a
    file lists. Returns (records not UTF-8, dropped-entry findings expected)."""
    good = [k for k in _KINDS if k[1]]
    bad = [k for k in _KINDS if not k[1]]
    n_bad = n_drop = 0

    def make(rng: random.Random, n: int) -> tuple[str, int, dict[str, Any], str | None]:
        nonlocal n_bad, n_drop
        raw, ok, drop = bad[n % len(bad)] if n % bad_every == 0 else good[n % 2 + 2 * (n % 10 in (3, 7))]
        n_bad += not ok
        n_drop += drop > 0 and ok
        f = sh._base(rng, n, "PropTopic", n % 2, rng.randbytes(rng.randrange(0, 64)), {}, "4.9.4")
        f["properties"] = raw
        return "PropTopic", n % 2, f, None

    sh.write_shape_store(root, sh.Shape("props_mix", "4.9.4", make), count, file_size=1 << 20)
    return n_bad, n_drop


def _findings(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    capsys.readouterr()
    rc = run(["verify", str(root), "--format", "jsonl", "--quiet", "--jobs", "1"])
    return rc, jsonl_records(capsys.readouterr().out, rc)


@pytest.mark.parametrize("bad_every", [97, 7])  # a few bad records (each located), many (the fall-back)
def test_batch_utf8_findings_equal_one_by_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bad_every: int
) -> None:
    n_bad, n_drop = _store(tmp_path / "s", bad_every)
    rc, got = _findings(tmp_path / "s", capsys)
    # the one-by-one check of every record with a non-ASCII byte (the check before the batch one)
    monkeypatch.setattr(vprops, "invalid_utf8_records", nonascii_records)
    rc_ref, ref = _findings(tmp_path / "s", capsys)
    assert (rc, got) == (rc_ref, ref)
    props = [f for f in got if f["code"] == "CL_PROPERTIES"]
    assert sum("not valid UTF-8" in f["message"] for f in props) == n_bad > 0
    assert sum("parser drops" in f["message"] for f in props) >= n_drop > 0


def test_invalid_utf8_records_names_each_bad_record() -> None:
    rng = random.Random(5)
    pool = [k[0].rstrip(b"\x02") for k in _KINDS]
    for trial in range(200):
        recs = [rng.choice(pool) for _ in range(rng.randrange(1, 30))]
        joined = b"\x02".join(recs)
        rs = record_starts(np.array([len(r) for r in recs], dtype=np.int64))
        J = np.frombuffer(joined, dtype=np.uint8)
        want = np.array([not _valid(r) for r in recs])
        got = invalid_utf8_records(J, rs)
        if want.sum() < _MAX_BAD:
            assert got.tolist() == want.tolist(), trial
        else:  # past the located ones, every non-ASCII record is flagged (checked one by one)
            assert not (want & ~got).any() and not (got & ~nonascii_records(J, rs)).any(), trial


def _valid(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_crc32_digits_of_rows_equal_the_broker_reading() -> None:
    from rmqtool.formats.properties import decode_crc32_digits, encode_crc32_digits
    from rmqtool.recovery.batch.properties import crc32_digit_values

    rng = random.Random(3)
    rows = [encode_crc32_digits(rng.randrange(1 << 31)).encode() for _ in range(300)]
    rows += [bytes(rng.randrange(256) for _ in range(10)) for _ in range(300)]  # not digits: wraps like Java
    got = crc32_digit_values(np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, 10))
    assert got.tolist() == [decode_crc32_digits(r.decode("latin-1")) for r in rows]


# 5.x inner batches: (properties, UTF-8, dropped, inner batch)
_INNER_KINDS: list[tuple[bytes, bool, int, bool]] = [
    (b"TAGS\x01A\x02", True, 0, False),
    (b"TAGS\x01A\x02\x01x\x02", True, 1, False),
    ("TAGS\x01Ω\x02\x01x\x02".encode(), True, 1, False),
    (b"INNER_NUM\x012\x02INNER_BASE\x0140\x02", True, 0, True),
    (b"INNER_NUM\x012\x02INNER_BASE\x0140\x02\x01x\x02", True, 1, True),
    ("INNER_NUM\x012\x02INNER_BASE\x0140\x02n\x01Ω\x02lone\x02".encode(), True, 1, True),
    (b"INNER_NUM\x012\x02INNER_BASE\x0140\x02n\x01\xff\x02", False, 0, True),
]


def test_inner_batch_and_non_ascii_findings_keep_their_order_and_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run: first the dropped-entry findings of ASCII records, in record order; then,
    in record order, those of records with non-ASCII bytes and of 5.x inner batches (an
    ASCII inner batch's a second time: the count of the one-by-one check inner batches
    went through) and the UTF-8 findings."""
    kinds = [k for _ in range(12) for k in _INNER_KINDS]

    def make(rng: random.Random, n: int) -> tuple[str, int, dict[str, Any], str | None]:
        f = sh._base(rng, n, "InnerTopic", 0, rng.randbytes(rng.randrange(0, 64)), {}, "5.3.3")
        f["properties"] = kinds[n][0]
        return "InnerTopic", 0, f, None

    root = tmp_path / "s"
    sh.write_shape_store(root, sh.Shape("inner_mix", "5.3.3", make), len(kinds), file_size=1 << 20)
    pos = [st.checked.rec.pos for st in _walk(root)]
    assert len(pos) == len(kinds)
    first, then = [], []
    for p, (raw, ok, drop, inner) in zip(pos, kinds):
        nonascii = max(raw) >= 0x80
        if drop and not nonascii:
            first.append((p, "drops"))
        if not ok:
            then.append((p, "utf8"))
        elif drop and (nonascii or inner):
            then.append((p, "drops"))
    capsys.readouterr()
    rc = run(["verify", str(root), "--format", "jsonl", "--quiet", "--jobs", "1", "--broker-version", "5.3.3"])
    got = [
        (f["pos"], "utf8" if "UTF-8" in f["message"] else "drops")
        for f in jsonl_records(capsys.readouterr().out, rc)
        if f["code"] == "CL_PROPERTIES"
    ]
    assert rc in (0, 4) and got == first + then


def _walk(root: Path) -> list[Any]:
    from walkref import walk_file

    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile

    s = Store.open(root)
    with s.map(s.commitlog[0]) as m:
        return [st for st in walk_file(m.buf, m.size, BrokerProfile.for_version("5.3.3")) if st.checked.is_message]
