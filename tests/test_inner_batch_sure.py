"""The batch decoder's 5.x inner-batch rule (``BatchDecoder._odd``): values it takes as
parsing without a parse (plain digits that fit) are exactly ones ``check.inner_batch_ok``
accepts, and the records it leaves to check_record are exactly those the rule refuses."""

from __future__ import annotations

import random

import numpy as np

from rmqtool.recovery import check as ck
from rmqtool.recovery.batch import BatchDecoder
from rmqtool.recovery.batch.decoder import _inner_batch_sure
from rmqtool.recovery.versions import BrokerProfile

_VALUES = [
    "0",
    "7",
    "9999",
    "32767",
    "32768",
    "-1",
    "+3",
    "",
    "12a",
    "٣",
    "1" * 18,
    "9" * 19,
    "-" + "9" * 18,
    " 5",
    "05",
]


def _props(rng: random.Random) -> tuple[bytes, dict[str, str]]:
    d: dict[str, str] = {"TAGS": "t"}
    if rng.random() < 0.8:
        d["INNER_NUM"] = rng.choice(_VALUES)
    if rng.random() < 0.8:
        d["INNER_BASE"] = rng.choice(_VALUES)
    return "".join(f"{k}\x01{v}\x02" for k, v in d.items()).encode(), d


def test_inner_batch_odd_records_equal_the_rule() -> None:
    rng = random.Random(11)
    dec = BatchDecoder(BrokerProfile.for_version("5.3.3"), 18)
    for _trial in range(20):
        recs = [_props(rng) for _ in range(300)]
        buf = b"".join(r for r, _d in recs)
        pl = np.array([len(r) for r, _d in recs], dtype=np.int64)
        pa = np.concatenate(([0], np.cumsum(pl)[:-1])).astype(np.int64)
        pc = dec.properties(buf, pa, pl, ["T"] * len(recs), np.zeros(len(recs), dtype=np.int64))
        # (the 4.9.1+ parser drops an entry with an empty value)
        want = [i for i, (_r, d) in enumerate(recs) if not ck.inner_batch_ok({k: v for k, v in d.items() if v})]
        assert sorted(pc.odd) == want
        J = pc.joined
        f = pc.found
        if b"INNER_NUM" in f and b"INNER_BASE" in f:
            sure = _inner_batch_sure(J, f[b"INNER_NUM"], f[b"INNER_BASE"])
            assert all(
                ck.inner_batch_ok({k: v for k, v in recs[r][1].items() if v})
                for r in f[b"INNER_BASE"][0][sure].tolist()
            )
            assert sure.any() and not sure.all()


def test_non_ascii_tags_codes_equal_the_decoded_strings() -> None:
    """Non-ASCII TAGS values are decoded once per distinct value (grouped by their bytes):
    every record's tagsCode is still hashCode of its own decoded value."""
    from rmqtool.formats.javahash import tags_code

    rng = random.Random(4)
    pool = ["café", "订单", "🙂", "Ω" * 40, "Ω" * 70, "a\u00e9", "\u00e9a", "plain", "x" * 80 + "é"]
    for _trial in range(10):
        vals = [rng.choice(pool) for _ in range(400)]
        recs = [f"TAGS\x01{v}\x02k\x01v\x02".encode() for v in vals]
        buf = b"".join(recs)
        pl = np.array([len(r) for r in recs], dtype=np.int64)
        pa = np.concatenate(([0], np.cumsum(pl)[:-1])).astype(np.int64)
        dec = BatchDecoder(BrokerProfile.for_version("4.9.4"), 18)
        pc = dec.properties(buf, pa, pl, ["T"] * len(recs), np.zeros(len(recs), dtype=np.int64))
        assert pc.tags_code.tolist() == [tags_code(v) for v in vals]
