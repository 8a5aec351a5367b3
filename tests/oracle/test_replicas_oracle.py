"""Replicas (issue 38) against the broker: master and slave DefaultMessageStores of one
release in one JVM on loopback, joined by the store's own HA service as RocketMQ's HA tests
join them (classic HA; controller mode through AutoSwitchHAService.changeToMaster /
changeToSlave, no controller), each case bounded at 60 s (tests/oracle/hacase.py).

The cases: a slave behind and a slave that copied from its master's last file; a slave
ahead of its new master after a failover by hand (classic), then fed from the wrong
offset; controller-mode failovers whose epoch files the broker's EpochFileCache wrote, the
handshake's truncation done live and by ``truncateFiles`` on a copy."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402
import hacase as hc  # noqa: E402
from conftest_diff import broker_oracle  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.oracle

CLASSIC = ["4.9.4", "newest"]
CONTROLLER = ["5.0.0", "5.3.3", "newest"]


def _version(o: dc.Oracle, slot: str) -> str:
    known = o.versions()
    if slot == "newest":
        return max((v for v in known if v.startswith("5.")), key=dc._vt)
    if slot not in known:
        pytest.skip(f"RocketMQ {slot} is not in the oracle's list")
    return slot


_CASES: dict[tuple[str, str], dict[str, Any]] = {}


def case(o: dc.Oracle, slot: str, name: str, tmp_root: Path) -> tuple[str, dict[str, Any], Path]:
    """Run scenario ``name`` once per release for the whole session (its stores stay)."""
    v = _version(o, slot)
    key = (v, name)
    out = tmp_root / f"{name}-{v}"
    if key not in _CASES:
        _CASES[key] = hc.run_ha(o.script, v, getattr(hc, name)(), out)
    return v, _CASES[key], out


@pytest.fixture(scope="session")
def oracle(broker_oracle: dc.Oracle) -> dc.Oracle:  # noqa: F811
    return broker_oracle


@pytest.fixture(scope="session")
def ha_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replicas")


# files whose bytes are the process's, not the store's (5.0.0 leaves an abort file with its
# own content after a clean shutdown); their presence still counts
VOLATILE = ("abort", "abort.bak", "lock")


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): ("" if p.name in VOLATILE else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


@pytest.mark.parametrize("slot", CLASSIC)
def test_classic_slaves_copy_and_lag(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, _out = case(oracle, slot, "classic_behind", ha_root)
    s = hc.step_state(r, "c_synced")
    # a slave that joins late copies from the start of its master's last file
    assert s["c"]["min_phy_offset"] > 0 and s["c"]["min_phy_offset"] % hc.GEOMETRY["mappedFileSizeCommitLog"] == 0
    assert s["c"]["max_phy_offset"] == s["a"]["max_phy_offset"]
    after = hc.step_state(r, "c_synced_again")
    assert after["c"]["max_phy_offset"] == after["a"]["max_phy_offset"] > s["a"]["max_phy_offset"]


@pytest.mark.parametrize("slot", CLASSIC)
def test_classic_failover_leaves_the_old_master_ahead(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, out = case(oracle, slot, "classic_failover", ha_root)
    snaps = out / "snapshots"
    # ahead of its new master, the old master got nothing from it: the same bytes as before
    assert _files(snaps / "a_ahead" / "commitlog") == _files(snaps / "a_before" / "commitlog")
    k = hc.put_results(r, "k")
    m = hc.put_results(r, "m")
    n = hc.put_results(r, "n")
    end_k = k[-1]["phys_offset"] + k[-1]["wrote_bytes"]
    assert m[0]["phys_offset"] == n[0]["phys_offset"] == end_k  # both sides wrote after k*, apart


@pytest.mark.parametrize("slot", CONTROLLER)
def test_controller_handshake_truncates_as_truncate_files_does(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, out = case(oracle, slot, "controller_failover", ha_root)
    snaps = out / "snapshots"
    promoted = hc.step_state(r, "b_promoted")["b"]
    point = promoted["max_phy_offset"]
    assert [e[:2] for e in promoted["epoch_entries"]] == [[1, 0], [2, point]]
    shaken = hc.step_state(r, "a_handshake")["a"]
    assert shaken["max_phy_offset"] == point  # a truncated to the consistent point, nothing new copied
    # the same truncation by truncateFiles on a copy of a's store before its restart
    t = _truncated(oracle, v, snaps / "a1", point, ha_root)
    assert t["truncated"] and t["max_phy_offset_after"] == point
    assert _files(ha_root / f"trunc-{v}") == _files(snaps / "a2")
    # the broker's truncation does not zero the bytes it cuts: its next start finds them again
    assert (snaps / "a2" / "commitlog").exists()


@pytest.mark.parametrize("slot", CONTROLLER)
def test_controller_history_epoch_files(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, out = case(oracle, slot, "controller_history", ha_root)
    snaps = out / "snapshots"
    got = {n: hc.epoch(oracle.script, v, snaps / n / "epochFileCheckpoint") for n in "abc"}
    assert [e[0] for e in got["a"]["local_file_entries"]] == [1, 2, 3]
    assert [e[0] for e in got["b"]["local_file_entries"]] == [1, 2]
    assert [e[0] for e in got["c"]["local_file_entries"]] == [1]


_TRUNCATED: dict[tuple[str, int], dict[str, Any]] = {}


def _truncated(o: dc.Oracle, v: str, store: Path, point: int, ha_root: Path) -> dict[str, Any]:
    """``rocketmq-oracle truncate`` of ``store`` at ``point`` into ``ha_root/trunc-V``
    (once per session)."""
    key = (v, point)
    if key not in _TRUNCATED:
        _TRUNCATED[key] = hc.truncate(o.script, v, store, point, ha_root / f"trunc-{v}", hc.GEOMETRY)
    return _TRUNCATED[key]


# ---------------------------------------------------------------------------------------
# rmqtool against the broker on these stores


def _ours(store: Path, v: str) -> Any:
    """rmqtool's read of a replica: its epoch file, its max offset after its next start's
    recovery."""
    from rmqtool.recovery.recover import plan_recovery
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile

    s = Store.open(store, *[hc.GEOMETRY[k] for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue")])
    plan = plan_recovery(s, BrokerProfile.for_version(dc.rmq_version(v)), check_unread=False, salvage=False, jobs=1)
    return plan.end_offset


@pytest.mark.parametrize("slot", CONTROLLER)
def test_rmqtool_reads_epoch_files_and_finds_consistent_points_as_the_broker(
    oracle: dc.Oracle, slot: str, ha_root: Path
) -> None:
    """The epoch files of three replicas with different histories: rmqtool reads each as
    EpochFileCache.initCacheFromFile does, and for every ordered pair (and for each replica
    as a new master, its next epoch appended at its max offset as changeToMaster does) the
    consistent point of doTruncate is the broker's findConsistentPoint."""
    from rmqtool.formats.epochfile import read_epoch_file
    from rmqtool.recovery.replicas.epochs import EpochCache, handshake, promote

    v, _r, out = case(oracle, slot, "controller_history", ha_root)
    snaps = out / "snapshots"
    ends = {n: _ours(snaps / n, v) for n in "abc"}
    caches = {n: EpochCache.from_file(read_epoch_file(snaps / n).entries) for n in "abc"}
    seen = 0
    for local in "abc":
        for master in "abc":
            if local == master:
                continue
            promoted = master == "b"  # (b as a new master: epoch 4 appended at its max offset)
            kw: dict[str, Any] = {"append": (4, ends[master])} if promoted else {}
            theirs = hc.epoch(
                oracle.script,
                v,
                snaps / local / "epochFileCheckpoint",
                ends[local],
                snaps / master / "epochFileCheckpoint",
                ends[master],
                **kw,
            )
            assert [e[:2] for e in theirs["local_file_entries"]] == [list(p) for p in caches[local].pairs()], local
            assert [e[:2] for e in theirs["master_file_entries"]] == [list(p) for p in caches[master].pairs()]
            pairs = caches[master].pairs()
            if promoted:
                pairs = promote(caches[master], 4, ends[master], False).pairs
            hs = handshake(caches[local], ends[local], pairs, ends[master])
            want = theirs["consistent_point"]
            got = hs.consistent_point if hs.consistent_point is not None else -1
            assert got == want, (v, local, master, got, want)
            seen += want >= 0
    assert seen >= 4  # (most pairs share an epoch)


# broken epoch files: (name, main bytes or None (absent), .bak bytes or None)
def _broken() -> list[tuple[str, bytes | None, bytes | None]]:
    from rmqtool.formats.epochfile import serialize

    good = serialize([(1, 0), (2, 4096)])
    bak = serialize([(1, 0)])
    return [
        ("crc_mismatch", b"2\n12345\n1-0\n2-4096\n", bak),
        ("count_mismatch", b"3\n0\n1-0\n2-4096\n", bak),
        ("no_entries", b"0\n0\n", bak),
        ("missing", None, bak),
        ("empty", b"", bak),
        ("not_a_number", b"1\n0\nx-5\n", bak),
        ("crlf_and_skipped", b"2\r\n0\r\n1-0\r\n\r\n1-2-3\r\n2-4096\r\n", bak),
        ("both_bad", b"1\n5\n1-0\n", b"1\n6\n1-0\n"),
        ("good", good, bak),
    ]


def test_rmqtool_reads_broken_epoch_files_as_the_broker(oracle: dc.Oracle, tmp_path: Path) -> None:
    """CheckpointFile.read's rules on broken files (newest release): the .bak when the main
    file fails its count or CRC or holds no entries, a NumberFormatException (the start
    fails) on a line that is not a number, an empty main file included."""
    from rmqtool.formats.epochfile import read_epoch_file

    v = _version(oracle, "newest")
    for name, main, bak in _broken():
        d = tmp_path / name
        d.mkdir()
        if main is not None:
            (d / "epochFileCheckpoint").write_bytes(main)
        if bak is not None:
            (d / "epochFileCheckpoint.bak").write_bytes(bak)
        theirs = hc.epoch(oracle.script, v, d / "epochFileCheckpoint")
        ours = read_epoch_file(d)
        if "local_error" in theirs:
            assert ours.fatal is not None and "NumberFormatException" in theirs["local_error"], (name, theirs)
        else:
            assert ours.fatal is None, (name, ours.fatal, theirs)
            assert [list(e) for e in ours.entries] == [e[:2] for e in theirs["local_file_entries"]], (name, theirs)


BROKER_RUN_FILES = ("index/", "compaction/", "rocksdbstore/")


def _cut_at(rel: str, mine: bytes, point: int) -> int:
    """Where rmqtool's zero-fill starts in a file it cut: the commitlog file at the point,
    a consume queue file after its last unit that is not all zeros."""
    if rel.startswith("commitlog/"):
        return max(0, min(len(mine), point - int(rel.split("/")[-1])))
    n = len(mine) // 20
    while n and not any(mine[(n - 1) * 20 : n * 20]):
        n -= 1
    return n * 20


@pytest.mark.parametrize("slot", CONTROLLER)
def test_recover_to_the_consistent_point_is_the_brokers_truncation(
    oracle: dc.Oracle, slot: str, ha_root: Path, tmp_path: Path
) -> None:
    """a (ahead: m* only it has) rejoins b, the new master (epoch 2 from a's end before m*):
    rmqtool recover --to-consistent-point b on a copy of a's store finds the broker's
    consistent point and leaves the broker's bytes (truncateFiles and the epoch file cut on
    a copy: the same files, the same epoch file and .bak), but for recover's deviations:
    the bytes past the point (commitlog) and past the last unit (consume queues) zero-filled
    where the broker leaves them as they were, and the index entries past the point cut."""
    import shutil

    v, r, out = case(oracle, slot, "controller_failover", ha_root)
    snaps = out / "snapshots"
    point = hc.step_state(r, "b_promoted")["b"]["max_phy_offset"]
    theirs = _truncated(oracle, v, snaps / "a1", point, ha_root)
    work = tmp_path / "a"
    shutil.copytree(snaps / "a1", work)
    for name in VOLATILE:
        (work / name).unlink(missing_ok=True)
    rc, outp, err = dc.rmq(
        [
            "recover",
            "--yes",
            str(work),
            "--to-consistent-point",
            str(snaps / "b3"),
            "--backup-dir",
            str(tmp_path / "bk"),
            *dc.recover_args(v, hc.GEOMETRY),
        ]
    )
    assert rc == 1, err
    doc = json.loads(outp)
    assert doc["plan"]["end_offset"] == point and doc["plan"]["stop_reason"] == "CONSISTENT_POINT"
    ours = {k: hashlib.sha256((work / k).read_bytes()).hexdigest() for k in _files(work)}
    bad = []
    for rel, f in sorted(theirs["files"].items()):
        if rel in VOLATILE or rel.startswith(BROKER_RUN_FILES):
            # index: recover cuts the entries past the end (the broker keeps them);
            # compaction/, rocksdbstore/ (5.5): what the broker's own start and shutdown
            # write whatever they do (position checkpoints, RocksDB's logs and manifests)
            continue
        if rel not in ours:
            bad.append(f"{rel}: only the broker's")
            continue
        if ours[rel] == f["sha256"]:
            continue
        mine = (work / rel).read_bytes()
        orig_path = snaps / "a1" / rel
        if rel.startswith(("commitlog/", "consumequeue/")) and orig_path.is_file():
            cut = _cut_at(rel, mine, point)
            orig = orig_path.read_bytes()
            if not any(mine[cut:]) and hashlib.sha256(mine[:cut] + orig[cut : len(mine)]).hexdigest() == f["sha256"]:
                continue
        bad.append(f"{rel}: differs")
    extra = sorted(
        k for k in ours if k not in theirs["files"] and not k.startswith(BROKER_RUN_FILES) and k not in VOLATILE
    )
    cps = {}
    if any(b.startswith("checkpoint:") for b in bad):
        from rmqtool.formats.checkpoint import decode_checkpoint

        tdir = ha_root / f"trunc-{v}"
        cb, co = (decode_checkpoint((d / "checkpoint").read_bytes())._asdict() for d in (tdir, work))
        cps = {k: (cb[k], co[k]) for k in cb if cb[k] != co[k]} | {"point": point}
    assert not bad and not extra, (v, bad, extra, cps)
    # the epoch file and its .bak, byte for byte (5.4.0+: not cut, both as they were)
    for rel in ("epochFileCheckpoint", "epochFileCheckpoint.bak"):
        assert ours.get(rel) == theirs["files"].get(rel, {}).get("sha256"), (v, rel)


def _diff(v: str, *stores: Path) -> tuple[int, dict[str, Any]]:
    rc, out, err = dc.rmq(["diff", *map(str, stores), "--format", "json", "-q", "--broker-version", dc.rmq_version(v)])
    assert rc in (0, 4), err
    doc: dict[str, Any] = json.loads(out)
    return rc, doc


@pytest.mark.parametrize("slot", CLASSIC)
def test_diff_on_the_brokers_replicas(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    """rmqtool diff on replicas the broker's HA wrote: a slave behind is a prefix (exit 0,
    its lag the bytes of m*); after the failover by hand the old master (ahead, m*) and
    the new one (n*) diverge where both wrote after k* (exit 4), m* only on a, n* only on b,
    each side's consume queues referencing only its own."""
    v, r, out = case(oracle, slot, "classic_failover", ha_root)
    snaps = out / "snapshots"
    k, m, n = (hc.put_results(r, p) for p in "kmn")
    end_k = k[-1]["phys_offset"] + k[-1]["wrote_bytes"]
    end_m = m[-1]["phys_offset"] + m[-1]["wrote_bytes"]
    rc, doc = _diff(v, snaps / "a_before", snaps / "b_before")
    p = doc["pairs"][0]
    assert rc == 0 and p["relation"] == "prefix" and p["behind"] == "b"
    assert (p["b_end_offset"], p["a_end_offset"], p["lag_bytes"]) == (end_k, end_m, end_m - end_k)
    assert [x["keys"] for x in p["only_on_a"]["messages"]] == [[x["keys"]] for x in m]
    # the index files entry by entry: the slave's entries are all on the master (the slave's
    # dispatch indexed only part of what it holds: its index begins at a later offset)
    ie = p["index"]["entries"]
    ia, ib = p["index"]["a"], p["index"]["b"]
    assert ie["problems"] == [] and ie["only_on_b"]["count"] == 0 and ie["in_both"] == ib["entries"] > 0
    assert ie["only_on_a"]["count"] == ia["entries"] - ib["entries"] >= len(m)
    rc, doc = _diff(v, snaps / "a_ahead", snaps / "b_master")
    p = doc["pairs"][0]
    assert rc == 4 and p["relation"] == "diverged" and p["divergence"]["record_offset"] == end_k
    only_a, only_b = p["only_on_a"]["messages"], p["only_on_b"]["messages"]
    assert [x["keys"] for x in only_a] == [[x["keys"]] for x in m]
    assert [x["keys"] for x in only_b] == [[x["keys"]] for x in n]
    assert [x["msg_id"] for x in only_b] == [x["msg_id"] for x in n]
    assert all(x["in_consume_queue_a"] and not x["in_consume_queue_b"] for x in only_a)
    assert all(x["in_consume_queue_b"] and not x["in_consume_queue_a"] for x in only_b)
    # the new master's index entries that the old one lacks are those of n* (the old master
    # indexed everything before them)
    ie = p["index"]["entries"]
    offs_n = {x["phys_offset"] for x in n}
    assert {e["commitlog_offset"] for e in ie["only_on_b"]["entries"]} == offs_n
    assert ie["only_on_a"]["count"] >= len(m) and ie["only_on_b"]["count"] >= len(n)
