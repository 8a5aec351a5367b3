"""``rmqtool diff`` on DLedger group members the broker wrote (issue 38).

The oracle runs single-member DLedger groups only (a group of 2-3 members in one JVM is not
built), so the second member is made from the first by what DLedger does to a member of a
group: member A is written by the broker (term t); member B is A as a follower the leader's
pushes stopped reaching after index k-1 holds it (A's data bytes up to entry k, which a
follower writes at the leader's positions, zeros after; its index units up to k-1; its
checkpoint at k-1, its currterm one above A's: it voted in a later election), onto which the
same release's broker, started again, elects itself in that term and appends other messages. DLedger's view of both (its entries: index, term,
pos, size) is the oracle: ``diff`` finds the first index where the broker's entries differ,
B's later term wins the election, and A loses exactly the entries the broker holds past k-1.
"""

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

from rmqtool.formats import dledger as dl  # noqa: E402

pytestmark = pytest.mark.oracle

# DLedger 0.2.6 and 0.3.3.4: the first and the last of the election and push code RocketMQ
# ships that differ in form (the rules the diff follows are the same in every release)
VERSIONS = ("4.9.4", "5.5.1")


def _scenario(v: str, seed: int, *, onto: bool = False, config: dict[str, Any] | None = None) -> dict[str, Any]:
    sc = dlcase.gen_dl_scenario(seed, v, max_messages=40)
    sc.pop("classic_first", None)
    sc["end"] = {"mode": "clean"}
    out = dlcase.harness_scenario(sc)
    if config is not None:
        out["config"] = config
    if onto:
        out["onto_existing"] = True
    return out


def _entries(view: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    return [(e["index"], e["term"], e["pos"], e["size"]) for e in view.get("dledger_entries") or [] if "error" not in e]


def _cut(store: Path, k: int, entries: list[tuple[int, int, int, int]], file_size: int) -> None:
    """The member as a follower holds it when the leader's pushes stopped after index k-1."""
    member = store / "dledger-n0"
    end = entries[k][2]
    for f in sorted((member / "data").iterdir()):
        base = int(f.name)
        if base > end:
            f.unlink()
        elif base <= end < base + file_size:
            with open(f, "r+b") as fh:
                fh.seek(end - base)
                fh.write(bytes(base + file_size - end))
    for f in sorted((member / "index").iterdir()):
        base = int(f.name)
        lo = k * dl.INDEX_UNIT_SIZE
        if base + dl.INDEX_FILE_SIZE <= lo:
            continue
        with open(f, "r+b") as fh:  # (the units after k-1 zeroed, the file kept sparse)
            start = max(lo - base, 0)
            fh.seek(start)
            used = min(dl.INDEX_FILE_SIZE - start, (len(entries) - k) * dl.INDEX_UNIT_SIZE)
            fh.write(bytes(used))
    (member / dl.CHECKPOINT_FILE).write_text(
        f"{dl.END_INDEX_KEY}={k - 1}\n{dl.COMMITTED_INDEX_KEY}={k - 1}\n", encoding="utf-8"
    )
    # a member that voted in a later election persisted that term (MemberState.persistTerm): the
    # broker's next start elects it leader in that term (a lone member does not bump its term)
    (member / dl.TERM_FILE).write_text(f"{dl.VOTE_KEY}=n0\n{dl.TERM_KEY}={entries[-1][1] + 1}\n", encoding="utf-8")
    for name in ("consumequeue", "index", "checkpoint", "abort"):
        p = store / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


@pytest.mark.parametrize("V", VERSIONS)
def test_diff_of_a_member_and_its_later_term_twin_agrees_with_the_broker(
    broker_oracle: dc.Oracle,  # noqa: F811
    tmp_path: Path,
    V: str,  # noqa: N803
) -> None:
    if V not in broker_oracle.versions():
        pytest.skip(f"the oracle does not list {V}")
    sa = _scenario(V, 3)
    broker_oracle.write(V, sa, tmp_path / "a")
    a = tmp_path / "a" / "store"
    va = broker_oracle.view(V, sa["config"], a)
    ea = _entries(va)
    assert len(ea) >= 4, va.get("dledger")
    k = len(ea) // 2
    (tmp_path / "b").mkdir()
    b = tmp_path / "b" / "store"
    dlcase.sparse_copy(a, b)
    file_size = (a / "dledger-n0" / "data" / f"{0:020d}").stat().st_size
    _cut(b, k, ea, file_size)
    sb = _scenario(V, 4, onto=True, config=sa["config"])
    broker_oracle.write(V, sb, tmp_path / "b")
    vb = broker_oracle.view(V, sa["config"], b)
    eb = _entries(vb)
    # the broker's own: B kept A's first k entries and appended in a later term
    assert eb[:k] == ea[:k] and eb[k][1] > ea[k][1], (ea[k - 1 : k + 1], eb[k - 1 : k + 1])
    rc, out, err = dc.rmq(["diff", str(a), str(b), "--format", "json", "-q", "--broker-version", V])
    assert rc == 4, err
    d = json.loads(out)["dledger"]
    ma, mb = d["members"]
    for m, v, e in ((ma, va, ea), (mb, vb, eb)):
        st = v["after_load_before_start"]["dledger"]
        assert (m["last_index"], m["last_term"]) == (st["ledger_end_index"], st["ledger_end_term"]) == e[-1][:2]
        assert m["committed_index"] == st["committed_index"]
    p = d["pairs"][0]
    first = next(i for i, (x, y) in enumerate(zip(ea, eb, strict=False)) if x != y)
    assert first == k and p["relation"] == "diverged" and p["first_unequal_index"] == k
    assert (p["a_entry"]["term"], p["a_entry"]["pos"]) == (ea[k][1], ea[k][2])
    assert (p["b_entry"]["term"], p["b_entry"]["pos"]) == (eb[k][1], eb[k][2])
    el = d["election"]
    assert el["best"] == [str(b)] and [m["can_win"] for m in el["members"]] == [False, True]
    (o,) = el["outlook"]
    (f,) = o["followers"]
    assert (f["member"], f["keeps_through_index"], f["lost_entries"]) == (str(a), k - 1, len(ea) - k)
    assert f["gains_entries"] == len(eb) - k
    their = {r["phys_offset"]: r for r in va.get("commitlog_records") or [] if "phys_offset" in r}
    for e in f["entries"]:
        assert (e["index"], e["term"], e["pos"], e["entry_size"]) == ea[e["index"]]
        assert e["size"] == e["entry_size"] - dl.BODY_OFFSET
        r = their[e["pos"] + dl.BODY_OFFSET]
        assert e["physical_offset"] == r["phys_offset"] and e["status"] == "OK"
