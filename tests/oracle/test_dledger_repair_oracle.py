"""``rmqtool repair`` on DLedger stores against the broker (issue 37): a release writes a
DLedger store (and a mixed one) through its single-member group, a copy is damaged (a
flipped bit in an entry's message body, a garbled entry index, a zeroed entry, a zeroed
index unit, the DLedger checkpoint removed; and a zeroed entry whose index unit is zeroed
too, which nothing mends), rmqtool repairs it, and the same release opens the repaired
store: it loads it by a normal start and sees every message the plan keeps, at its offset,
with the consume queue unit of its queue offset (consistent), the tombstones where the
plan puts them (same topic, queue and queue offset, RMQTOOL_TOMBSTONE), and the ledger's
entries as they were written (tests/test_dledger.py asserts the bytes on twins; man
rmqtool-repair, DLEDGER STORES)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402
import dlcase  # noqa: E402
from conftest_diff import broker_oracle  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.oracle

# (release, seed): seed 3 a clean DLedger store of 101 messages over five data files, seed 6
# a clean mixed one (38 messages in classic files first); their own damage left out
STORES = [("4.9.4", 3), ("4.9.4", 6), ("5.5.1", 3)]
MENDED = ("body_bitflip", "entry_index", "entry_zeroed", "index_unit_zeroed", "remove_checkpoint")
CUT = ("entry_and_unit_zeroed",)

_written: dict[tuple[str, int], tuple[Path, dict[str, Any], dict[str, Any]]] = {}


def _store(oracle: dc.Oracle, version: str, seed: int, tmp: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The release's store of the seed (written once per session) and its view."""
    got = _written.get((version, seed))
    if got is None:
        sc = dlcase.gen_dl_scenario(seed, version)
        assert sc["end"]["mode"] == "clean", sc["end"]
        sc["damage"] = []
        w = tmp / f"w-{version}-{seed}"
        oracle.write(version, dlcase.harness_scenario(sc), w)
        view = dlcase.view_dl(oracle, version, dlcase.view_config(sc), w / "store")
        got = (w / "store", sc["config"], view)
        _written[(version, seed)] = got
    return got


def _entries(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in view.get("dledger_entries") or [] if "error" not in e]


def _data(store: Path, config: dict[str, Any], pos: int) -> tuple[Path, int]:
    size = int(config["mappedFileSizeCommitLog"])
    return store / "dledger-n0" / "data" / f"{pos - pos % size:020d}", pos % size


def _damage(store: Path, config: dict[str, Any], view: dict[str, Any], kind: str) -> dict[str, Any]:
    """Damage the copy; returns the entry it hit."""
    es = _entries(view)
    bodies = {r["phys_offset"] for r in view.get("commitlog_records") or [] if (r.get("body_len") or 0) >= 8}
    e = next(x for x in es[len(es) // 2 :] if x["pos"] + 48 in bodies)  # (a message with a body)
    if kind == "entry_index":
        e = es[-3]  # (in the last data file: DLedger's walk reads it)
    if kind == "index_unit_zeroed":
        e = es[1]  # (in the first data file, before the three DLedger's walk reads)
    path, at = _data(store, config, e["pos"])
    if kind == "body_bitflip":
        from rmqtool.formats import commitlog as cl

        buf = path.read_bytes()
        rec = cl.decode_message(buf, at + 48, at + e["size"])
        dc.flip_bit(path, rec.body_pos + rec.body_length // 2, 3)  # (in the body: its CRC fails)
    elif kind == "entry_index":
        dc.flip_bit(path, at + 8 + 7, 0)
    elif kind in ("entry_zeroed", "entry_and_unit_zeroed"):
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes(e["size"]))
    if kind in ("index_unit_zeroed", "entry_and_unit_zeroed"):
        with open(store / "dledger-n0" / "index" / f"{0:020d}", "r+b") as f:
            f.seek(e["index"] * 32)
            f.write(bytes(32))
    if kind == "remove_checkpoint":
        (store / "dledger-n0" / "checkpoint").unlink()
    return e


def _repair(store: Path, version: str, config: dict[str, Any], bk: Path) -> tuple[int, dict[str, Any], str]:
    rc, out, err = dc.rmq(["repair", "--yes", str(store), "--backup-dir", str(bk), *dc.recover_args(version, config)])
    return rc, (json.loads(out) if out.strip().startswith("{") else {}), err


def _units(view: dict[str, Any], below: int | None = None) -> dict[str, list[tuple[int, int, int]]]:
    out = {}
    for k, q in (view.get("consume_queues") or {}).items():
        es = [(e["cq_offset"], e["phys_offset"], e["size"]) for e in q.get("entries") or []]
        es = [x for x in es if below is None or x[1] < below]
        if es:
            out[k] = es
    return out


def _check(before: dict[str, Any], after: dict[str, Any], tombstones: set[int], below: int | None = None) -> list[str]:
    """The broker's view of the repaired store against its view of the store before the
    damage: every record (below ``below``: where the ledger ends) at its offset, the same
    or a tombstone of the same queue offset; every queue unit the same and consistent; the
    ledger's entries the same."""
    bad: list[str] = []
    if not after.get("load_ok", True):
        return ["the broker does not load the repaired store"]
    if dc.view_mode(after) != "normal":
        bad.append(f"the broker ran {after.get('recovery_mode')} recovery on the repaired store")
    keep = lambda o: below is None or o < below  # noqa: E731
    b = {r["phys_offset"]: r for r in before.get("commitlog_records") or [] if keep(r["phys_offset"])}
    a = {r["phys_offset"]: r for r in after.get("commitlog_records") or []}
    if set(a) != set(b):
        bad.append(f"records at {sorted(set(a) ^ set(b))[:5]}: only before or only after the repair")
    for off in sorted(set(a) & set(b)):
        if off in tombstones:
            x, y = a[off], b[off]
            got = (
                x["topic"],
                x["queue_id"],
                x["queue_offset"],
                x["size"],
                (x.get("properties") or {}).get("RMQTOOL_TOMBSTONE"),
            )
            if got != (y["topic"], y["queue_id"], y["queue_offset"], y["size"], str(off)):
                bad.append(f"tombstone at {off}: {got}")
        elif a[off] != b[off]:
            bad.append(f"record at {off} differs")
    ub, ua = _units(before, below), _units(after)
    if ub != ua:
        bad.append(f"queues differ: {sorted(k for k in set(ub) | set(ua) if ub.get(k) != ua.get(k))}")
    for k, q in (after.get("consume_queues") or {}).items():
        if any(e.get("consistent") is not True for e in q.get("entries") or []):
            bad.append(f"queue {k}: a unit the broker finds inconsistent")
    eb = [e for e in _entries(before) if keep(e["pos"])]
    if eb != _entries(after):
        bad.append(f"DLedger entries: {len(eb)} before, {len(_entries(after))} after the repair")
    return bad


# the soak share (tests/conftest.py): the 4.9.4 stores' header and checkpoint damages, which the
# 5.5.1 store's cases check in the default run (the mixed store keeps its body and cut cases)
@pytest.mark.soak(version="4.9.4", seed=3, kind="entry_index")
@pytest.mark.soak(version="4.9.4", seed=3, kind="entry_zeroed")
@pytest.mark.soak(version="4.9.4", seed=3, kind="index_unit_zeroed")
@pytest.mark.soak(version="4.9.4", seed=3, kind="remove_checkpoint")
@pytest.mark.soak(version="4.9.4", seed=6, kind="entry_index")
@pytest.mark.soak(version="4.9.4", seed=6, kind="index_unit_zeroed")
@pytest.mark.soak(version="4.9.4", seed=6, kind="remove_checkpoint")
@pytest.mark.parametrize("kind", MENDED + CUT)
@pytest.mark.parametrize("version, seed", STORES, ids=[f"{v}-seed{s}" for v, s in STORES])
def test_the_broker_opens_the_repaired_dledger_store_and_sees_what_the_plan_keeps(
    broker_oracle: dc.Oracle,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    version: str,
    seed: int,
    kind: str,
) -> None:
    if version not in broker_oracle.versions():
        pytest.skip(f"the oracle does not list {version}")
    src, config, before = _store(broker_oracle, version, seed, tmp_path_factory.mktemp("dlw"))
    work = tmp_path_factory.mktemp("dlr")
    store = work / "store"
    dlcase.sparse_copy(src, store)
    shutil.rmtree(store.parent / "bk", ignore_errors=True)
    e = _damage(store, config, before, kind)
    rc, doc, err = _repair(store, version, config, work / "bk")
    plan = doc.get("plan") or {}
    tomb = {q["offset"] for q in plan.get("quarantined") or [] if q.get("tombstone")}
    if kind in CUT:
        assert rc == 5, (rc, err)
        assert plan["data_end"] == e["pos"], plan["data_end"]
        assert any("intact message(s) lie after it" in p for p in plan["problems"]), plan["problems"]
        below: int | None = e["pos"]
    else:
        assert rc in ((0, 1) if kind == "remove_checkpoint" else (1,)), (rc, err)
        assert not plan.get("problems"), plan.get("problems")
        below = None
    if kind in ("body_bitflip", "entry_zeroed"):
        assert tomb == {e["pos"] + 48}, plan.get("quarantined")
    else:
        assert not tomb, plan.get("quarantined")
    after = dlcase.view_dl(broker_oracle, version, dlcase.view_config_of(config), store)
    bad = _check(before, after, tomb, below)
    assert not bad, "\n".join(bad)
