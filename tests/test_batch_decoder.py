"""The one batch decoder (recovery.batch) against the one slow path (check_record).

For every record the decoder is sure of, its columns (header fields, topic, tagsCode or
the schedule topic's delivery time, KEYS, UNIQ_KEY, the index keys hashed) are exactly what
``check_record`` reads; a record it is unsure of goes to ``check_record``, so the decoder
may only be unsure of records that are not plain (a 5.x inner batch the broker refuses,
the schedule topic's DELAY, damage). Run on every store of fixtures/real and on the generated shapes of
recovery.shapes (many topics, 0-32 keys, bodies of every size, IPv6 hosts, non-ASCII
properties, V2 long topics, 5.x inner batches, 5.x property CRCs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmqtool.formats import commitlog as cl
from rmqtool.formats.javahash import java_hash_units_batch
from rmqtool.recovery import ccore
from rmqtool.recovery import check as ck
from rmqtool.recovery.batch import MAX_RUN, BatchDecoder, Words, first_unsure, plain_records
from rmqtool.recovery.byteviews import byte_views
from rmqtool.recovery.shapes import SHAPES, write_shape_store
from rmqtool.recovery.versions import BrokerProfile

# every test once with the compiled core and once with its pure-Python twin (recovery/ccore.py)
pytestmark = pytest.mark.usefixtures("ccore_backend")

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
REAL_STORES = sorted(p.name for p in REAL.iterdir() if (p / "store" / "commitlog").is_dir())
COUNTS = {"bodies_0_4mib": 24}


def _index_keys_of(uniq: str | None, keys: str | None) -> list[tuple[int, int]]:
    """(hash, UTF-16 units) of a record's index keys, as ``IndexService.buildIndex`` takes
    them: UNIQ_KEY, then each non-empty piece of KEYS split on a space."""
    strs = ([uniq] if uniq is not None else []) + [k for k in (keys or "").split(" ") if k]
    if not strs:
        return []
    h, units = java_hash_units_batch(strs)
    return list(zip((h.astype(np.int64) & 0xFFFFFFFF).tolist(), units.astype(np.int64).tolist()))


def _compare_file(path: Path, profile: BrokerProfile) -> tuple[int, int, list[int]]:
    """Decode every run of one commitlog file and compare each sure record with
    ``check_record``. Returns (records decoded, records sure, positions of the unsure
    records that check_record accepts)."""
    dec = BatchDecoder(profile, profile.max_delay_level)
    decoded = sure_n = 0
    unsure_ok: list[int] = []
    buf = path.read_bytes()
    end = len(buf)
    words = Words(buf, end)
    views = byte_views(buf)
    pos = 0
    while pos < end:
        # the reput's runs: V1 (and V2) records trusting TOTALSIZE, at most MAX_RUN
        magics = (cl.MAGIC_V1, cl.MAGIC_V2) if profile.accepts_v2 else (cl.MAGIC_V1,)
        starts = ccore.chase(buf, pos, end - 7, end, MAX_RUN, 0, 8, magics)[0].tolist()
        if not starts:
            break
        s = np.asarray(starts, dtype=np.int64)
        cols, sure = dec.decode(buf, words, s, end, 0)
        # the plain test (recover's walk) and the decoder state one rule: every plainly
        # valid record is decoded surely, and every sure record but the schedule topic's
        # is plainly valid (but for the last 128 bytes of a buffer, where the decoder does
        # not read and leaves the records to check_record)
        plain = plain_records(buf, views, s, views.i4[s].astype(np.int64), profile).ok
        far = s + 128 <= end
        assert not (plain & ~sure & far).any(), f"{path}: plain records the decoder is unsure of"
        sched = np.array([t == ck.SCHEDULE_TOPIC for t in cols.topic], dtype=bool)
        assert not (sure & ~plain & ~sched).any(), f"{path}: sure records the plain test refuses"
        ik = cols.index_keys
        assert ik is not None
        keys_of: dict[int, list[tuple[int, int]]] = {}
        for r, h, u in zip(ik.rec.tolist(), ik.hash.tolist(), ik.units.tolist()):
            keys_of.setdefault(r, []).append((h, u))
        for j, p in enumerate(s.tolist()):
            c = ck.check_record(
                buf, p, end, profile, check_crc=False, read_body=False, max_delay_level=profile.max_delay_level
            )
            if not sure[j]:
                if c.is_message:
                    unsure_ok.append(p)
                continue
            assert c.is_message, f"{path}@{p}: the decoder is sure of a record check_record refuses ({c})"
            rec = c.rec
            assert rec is not None
            got = (
                cols.topic[j],
                int(cols.queue_id[j]),
                int(cols.commitlog_offset[j]),
                int(cols.msg_size[j]),
                int(cols.tags_code[j]),
                int(cols.store_timestamp[j]),
                int(cols.consume_queue_offset[j]),
                cols.keys[j],
                cols.uniq_key[j],
                int(cols.sys_flag[j]),
            )
            want = (
                rec.topic,
                rec.queue_id,
                rec.physical_offset,
                rec.total_size,
                c.tags_code,
                rec.store_timestamp,
                rec.queue_offset,
                c.keys,
                c.uniq_key,
                rec.sys_flag,
            )
            assert got == want, f"{path}@{p}"
            assert keys_of.get(j, []) == _index_keys_of(c.uniq_key, c.keys), f"{path}@{p}: index keys"
        decoded += len(s)
        sure_n += int(sure.sum())
        k = first_unsure(sure)
        assert k == len(s) or not sure[k] and sure[:k].all()
        pos = int(s[-1]) + int(cols.msg_size[-1])
    return decoded, sure_n, unsure_ok


@pytest.fixture(scope="module")
def shape_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, BrokerProfile]]:
    out = {}
    for name, shape in SHAPES.items():
        root = tmp_path_factory.mktemp(name)
        write_shape_store(
            root,
            shape,
            COUNTS.get(name, 300),
            file_size=(16 << 20) if name == "bodies_0_4mib" else (256 << 10),
            cq=False,
        )
        out[name] = (root, shape.profile)
    return out


@pytest.mark.parametrize("store", REAL_STORES)
def test_batch_decoder_agrees_with_check_record_on_real_stores(store: str) -> None:
    profile = BrokerProfile.for_version("4.9.4")
    decoded = sure = 0
    for f in sorted((REAL / store / "store" / "commitlog").iterdir()):
        d, s, unsure_ok = _compare_file(f, profile)
        decoded += d
        sure += s
        # a record the broker accepts and the decoder is unsure of: only the schedule topic's
        for p in unsure_ok:
            with open(f, "rb") as fh:
                c = ck.check_record(fh.read(), p, f.stat().st_size, profile, check_crc=False, read_body=False)
            assert c.rec is not None and c.rec.topic == ck.SCHEDULE_TOPIC, f"{f}@{p}"
    assert sure > 0 and decoded >= sure


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_batch_decoder_agrees_with_check_record_on_generated_shapes(shape_stores, name: str) -> None:
    root, profile = shape_stores[name]
    decoded = sure = 0
    unsure: list[int] = []
    for f in sorted((root / "commitlog").iterdir()):
        d, s, u = _compare_file(f, profile)
        decoded += d
        sure += s
        unsure += u
    assert decoded >= COUNTS.get(name, 300)
    assert sure == decoded and unsure == [], f"{name}: plain records left to check_record at {unsure[:5]}"


def test_first_unsure_is_the_first_false() -> None:
    assert first_unsure(np.array([True, True, False, True])) == 2
    assert first_unsure(np.array([True, True])) == 2
    assert first_unsure(np.zeros(0, dtype=bool)) == 0


@pytest.mark.parametrize("name", ["gen_commitlog", "keys_0_32", "non_ascii_properties"])
def test_batch_decoder_agrees_with_check_record_under_the_legacy_properties_parser(shape_stores, name: str) -> None:
    """4.6-4.9.0 parse properties by splitting (MessageDecoder.string2messageProperties
    before 4.9.1): the same records, the same answers."""
    root, _profile = shape_stores[name]
    legacy = BrokerProfile.for_version("4.9.0")
    assert not legacy.new_properties_parser
    decoded = sure = 0
    for f in sorted((root / "commitlog").iterdir()):
        d, s, unsure = _compare_file(f, legacy)
        decoded += d
        sure += s
        assert unsure == []
    assert sure == decoded >= COUNTS.get(name, 300)
