"""Version-dependent behaviour on synthetic stores built from the spec.

Every record here is built with ``struct`` straight from STORE_FORMAT.md (§3-§9) and every
expected value (offsets, tagsCodes, index hashes, recovery end offsets) is derived from
STORE_FORMAT.md / RECOVERY.md, never from the code under test. Covered: IPv6 hosts, V2
magic (5.1+), the ``__CRC32#`` property (5.2+), transaction types and system topics,
torn writes (cut records, zero-filled regions, partial headers), and the 5.3.2+
normal-recovery walk-back.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import struct
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import jsonl_records

from rmqtool.cli import run
from rmqtool.recovery import check as ck
from rmqtool.recovery.versions import BrokerProfile

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK = -875286124  # 0xCBD43194
FS = 4096  # commitlog file size of these stores
CQ_FS = 2000  # 100 units per consume queue file
SLOTS, ENTRIES = 64, 512
GEOM = ["--cq-file-size", str(CQ_FS), "--index-slots", str(SLOTS), "--index-entries", str(ENTRIES)]
TS0 = 1_700_000_000_000
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


# ----------------------------------------------------------------------------- spec builders


def crc(b: bytes) -> int:
    """STORE_FORMAT §7: crc32 & 0x7FFFFFFF."""
    return zlib.crc32(b) & 0x7FFFFFFF


def jhash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units (TEST_VECTORS §2)."""
    h = 0
    u = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(u), 2):
        h = (31 * h + int.from_bytes(u[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def index_hash(s: str) -> int:
    """STORE_FORMAT §15.4."""
    h = jhash(s)
    return 0 if h == -(1 << 31) else abs(h)


def host(addr: str, port: int) -> tuple[bytes, bool]:
    """STORE_FORMAT §5: address bytes + i32 port; 20 bytes for IPv6."""
    a = ipaddress.ip_address(addr)
    return a.packed + struct.pack(">i", port), a.version == 6


def props(d: dict[str, str], trailing: bool = False) -> bytes:
    s = "".join(f"{k}\x01{v}\x02" for k, v in d.items())
    if s and not trailing:
        s = s[:-1]
    return s.encode()


def record(
    topic: str,
    *,
    body: bytes = b"hello",
    props: bytes = b"",
    queue_id: int = 0,
    qoff: int = 0,
    phys: int = 0,
    sysflag: int = 0,
    born: tuple[str, int] = ("10.0.0.1", 50000),
    store: tuple[str, int] = ("10.0.0.2", 10911),
    born_ts: int = TS0,
    store_ts: int = TS0 + 1,
    prepared: int = 0,
    v2: bool | None = None,
    crc32_prop: bool = False,
) -> bytes:
    """A message record per STORE_FORMAT §4 / §4.1 / §5 / §7.1 / §9."""
    bh, b6 = host(*born)
    sh, s6 = host(*store)
    sysflag = (sysflag & ~0x30) | (0x10 if b6 else 0) | (0x20 if s6 else 0)
    tb = topic.encode()
    if v2 is None:
        v2 = len(topic) > 127
    if crc32_prop:
        if props and not props.endswith(b"\x02"):
            props += b"\x02"
        props += b"__CRC32#\x01" + b"0" * 10 + b"\x02"
    total = 48 + len(bh) + 8 + len(sh) + 12 + 4 + len(body) + (2 if v2 else 1) + len(tb) + 2 + len(props)
    out = struct.pack(
        ">iiiiiqqiq", total, MAGIC_V2 if v2 else MAGIC_V1, crc(body), queue_id, 0, qoff, phys, sysflag, born_ts
    )
    out += bh + struct.pack(">q", store_ts) + sh + struct.pack(">iqi", 0, prepared, len(body)) + body
    out += struct.pack(">h" if v2 else ">b", len(tb)) + tb + struct.pack(">h", len(props)) + props
    assert len(out) == total
    if crc32_prop:  # least-significant digit first, right-padded with '0' (STORE_FORMAT §7.1)
        digits = str(crc(out[: total - 20]))[::-1].ljust(10, "0").encode()
        out = out[: total - 11] + digits + b"\x02"
    return out


def write_store(
    root: Path,
    specs: list[dict[str, Any]],
    *,
    extra_files: int = 0,
    checkpoint: tuple[int, int, int] | None = None,
    abort: bool = False,
) -> list[dict[str, Any]]:
    """Records laid out with the writer rules of STORE_FORMAT §3 (a record of length L goes
    in only if L + 8 <= bytes left, else a BLANK and the next file). Queue offsets advance
    per (topic, queue) for NOT/COMMIT; PREPARED/ROLLBACK get 0 (STORE_FORMAT §4).
    Store timestamps increase by 1 ms per record unless given."""
    (root / "commitlog").mkdir(parents=True, exist_ok=True)
    files = [bytearray(FS)]
    pos = 0
    qoffs: dict[tuple[str, int], int] = {}
    out: list[dict[str, Any]] = []
    for n, sp in enumerate(specs):
        sp = dict(sp)
        topic = sp.pop("topic")
        sp.setdefault("store_ts", TS0 + 1 + n)
        sp.setdefault("born_ts", sp["store_ts"] - 1)
        tt = sp.get("sysflag", 0) & 0xC
        key = (topic, sp.get("queue_id", 0))
        if "qoff" not in sp:
            if tt in (0x4, 0xC):
                sp["qoff"] = 0
            else:
                sp["qoff"] = qoffs.get(key, 0)
                qoffs[key] = sp["qoff"] + 1
        size = len(record(topic, **sp))
        if size + 8 > FS - pos:
            files[-1][pos : pos + 8] = struct.pack(">ii", FS - pos, BLANK)
            files.append(bytearray(FS))
            pos = 0
        phys = (len(files) - 1) * FS + pos
        raw = record(topic, phys=phys, **sp)
        files[-1][pos : pos + size] = raw
        out.append({"offset": phys, "size": size, "topic": topic, "raw": raw, **sp})
        pos += size
    for _ in range(extra_files):
        files[-1][pos : pos + 8] = struct.pack(">ii", FS - pos, BLANK)
        files.append(bytearray(FS))
        pos = 0
    for i, data in enumerate(files):
        (root / "commitlog" / f"{i * FS:020d}").write_bytes(bytes(data))
    last_ts = max((r["store_ts"] for r in out), default=0)
    cp = checkpoint if checkpoint is not None else (last_ts, last_ts, 0)
    (root / "checkpoint").write_bytes(struct.pack(">qqq", *cp).ljust(4096, b"\0"))
    (root / "lock").write_bytes(b"lock")
    if abort:
        (root / "abort").write_bytes(b"")
    return out


def tags_code(r: dict[str, Any]) -> int:
    """STORE_FORMAT §12.2 (no schedule topic here)."""
    p = r.get("props", b"").decode()
    for seg in p.split("\x02"):
        k, _, v = seg.partition("\x01")
        if k == "TAGS" and v:
            return jhash(v)
    return 0


def unit_of(r: dict[str, Any]) -> tuple[int, int, int]:
    return (r["offset"], r["size"], tags_code(r))


def write_cq(root: Path, topic: str, qid: int, units: list[tuple[int, int, int]]) -> None:
    d = root / "consumequeue" / topic / str(qid)
    d.mkdir(parents=True, exist_ok=True)
    per = CQ_FS // 20
    for f in range(max(1, (len(units) + per - 1) // per)):
        data = bytearray(CQ_FS)
        for i, u in enumerate(units[f * per : (f + 1) * per]):
            struct.pack_into(">qiq", data, i * 20, *u)
        (d / f"{f * CQ_FS:020d}").write_bytes(bytes(data))


def cq_units(root: Path, topic: str, qid: int = 0) -> list[tuple[int, int, int]]:
    d = root / "consumequeue" / topic / str(qid)
    units: list[tuple[int, int, int]] = []
    if not d.is_dir():
        return units
    for f in sorted(d.iterdir()):
        data = f.read_bytes()
        for p in range(0, len(data) - 19, 20):
            u = struct.unpack_from(">qiq", data, p)
            if u == (0, 0, 0):
                break
            units.append(u)
    return units


def index_pairs(root: Path) -> set[tuple[int, int]]:
    """(keyHash, phyOffset) of every used entry of every index file (STORE_FORMAT §15)."""
    out: set[tuple[int, int]] = set()
    d = root / "index"
    if not d.is_dir():
        return out
    for f in sorted(d.iterdir()):
        data = f.read_bytes()
        count = struct.unpack_from(">i", data, 36)[0]
        base = 40 + SLOTS * 4
        for n in range(1, max(count, 1)):
            h, phy, _td, _prev = struct.unpack_from(">iqii", data, base + n * 20)
            out.add((h, phy))
    return out


def expected_index(recs: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """RECOVERY §9.3: UNIQ_KEY and every KEYS piece, topic#key, ROLLBACK skipped."""
    out = set()
    for r in recs:
        if (r.get("sysflag", 0) & 0xC) == 0xC:
            continue
        p = dict(seg.split("\x01", 1) for seg in r.get("props", b"").decode().split("\x02") if "\x01" in seg)
        keys = ([p["UNIQ_KEY"]] if "UNIQ_KEY" in p else []) + [k for k in p.get("KEYS", "").split(" ") if k]
        for k in keys:
            out.add((index_hash(r["topic"] + "#" + k), r["offset"]))
    return out


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = run(list(args))
    return code, capsys.readouterr().out


def recover_plan(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, out = cli(capsys, "recover", "--yes", str(root), "--dry-run", "--format", "json", "-q", *GEOM, *args)
    return code, json.loads(out)["plan"]


def recover(capsys: pytest.CaptureFixture[str], root: Path, tmp: Path, *args: str) -> int:
    code, _out = cli(
        capsys, "recover", "--yes", str(root), "-q", "--jobs", "1", "--backup-dir", str(tmp / "bk"), *GEOM, *args
    )
    return code


def rebuild(capsys: pytest.CaptureFixture[str], root: Path, tmp: Path, *args: str) -> int:
    code, _out = cli(
        capsys, "rebuild-index", "--yes", str(root), "-q", "--jobs", "1", "--backup-dir", str(tmp / "bkr"), *GEOM, *args
    )
    return code


def verify(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    code, out = cli(capsys, "verify", str(root), "--format", "jsonl", "-q", *GEOM, *args)
    return code, jsonl_records(out, code)


def dump(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> list[dict[str, Any]]:
    code, out = cli(capsys, "dump", "commitlog", str(root), "--format", "jsonl", *args)
    assert code == 0
    return jsonl_records(out, code)


def codes(findings: list[dict[str, Any]], severity: str | None = None) -> set[str]:
    return {f["code"] for f in findings if severity is None or f["severity"] == severity}


def msgs(topic: str, n: int, **kw: Any) -> list[dict[str, Any]]:
    return [
        dict(topic=topic, props=props({"KEYS": f"K{i}", "UNIQ_KEY": f"{i:032X}", "TAGS": "TagA"}), **kw)
        for i in range(n)
    ]


# ============================================================================ IPv6 hosts

V6_SPECS = [
    dict(
        topic="T6",
        born=("2001:db8::1", 40000),
        store=("2001:db8::2", 10911),
        props=props({"KEYS": "k0", "UNIQ_KEY": "A" * 32, "TAGS": "TagA"}),
    ),
    dict(
        topic="T6", born=("10.0.0.1", 1234), store=("2001:db8::2", 10911), props=props({"KEYS": "k1", "TAGS": "TagB"})
    ),
    dict(topic="T6", born=("2001:db8::1", 40001), store=("10.0.0.2", 10911), props=props({"KEYS": "k2"})),
    dict(topic="T6", born=("10.0.0.1", 1235), store=("10.0.0.2", 10911), props=props({"KEYS": "k3"})),
]


def test_ipv6_dump_hosts_and_msg_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = write_store(tmp_path / "s", V6_SPECS)
    rows = [r for r in dump(capsys, tmp_path / "s") if r["type"] == "message"]
    assert [r["physical_offset"] for r in rows] == [r["offset"] for r in recs]
    assert [r["total_size"] for r in rows] == [r["size"] for r in recs]
    assert rows[0]["born_host"] == "[2001:db8::1]:40000" and rows[0]["store_host"] == "[2001:db8::2]:10911"
    assert rows[1]["born_host"] == "10.0.0.1:1234" and rows[2]["store_host"] == "10.0.0.2:10911"
    assert [r["store_timestamp"] for r in rows] == [r["store_ts"] for r in recs]
    # STORE_FORMAT §11.1: 16 address bytes + i32 port + i64 offset, upper hex, 56 chars
    want = (ipaddress.ip_address("2001:db8::2").packed + struct.pack(">iq", 10911, recs[1]["offset"])).hex().upper()
    assert rows[1]["msg_id"] == want and len(want) == 56
    assert len(rows[2]["msg_id"]) == 32
    assert all(r["crc_ok"] and r["status"] == "OK" for r in rows)


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_ipv6_rebuild_then_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str) -> None:
    root = tmp_path / "s"
    recs = write_store(root, V6_SPECS * 6)
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1
    assert cq_units(root, "T6") == [unit_of(r) for r in recs]
    assert index_pairs(root) == expected_index(recs)
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 0 and codes(findings, "error") == set()


def test_ipv6_abnormal_start_file_reads_store_ts_after_20_byte_born_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RECOVERY §5.1: storeTs at 48 + 20 when the born host is IPv6."""
    root = tmp_path / "s"
    specs = []
    for i in range(100):  # 3+ files
        specs.append(
            dict(
                topic="T6",
                born=("2001:db8::1", 40000),
                store=("2001:db8::2", 10911),
                props=props({"KEYS": f"k{i}"}),
                store_ts=TS0 + 1000 * i,
            )
        )
    recs = write_store(root, specs, abort=True)
    bases = sorted({r["offset"] // FS * FS for r in recs})
    assert len(bases) >= 3
    first_ts = {b: min(r["store_ts"] for r in recs if r["offset"] // FS * FS == b) for b in bases}
    # minTimestamp = min(physic, logics) - 3000: make file 1 the last one that matches
    t = first_ts[bases[1]] + 3000
    (root / "checkpoint").write_bytes(struct.pack(">qqq", t, t, 0).ljust(4096, b"\0"))
    _code, plan = recover_plan(capsys, root)
    assert plan["start_offset"] == bases[1]
    assert plan["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_ipv6_recover_abnormal_cuts_torn_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    root = tmp_path / "s"
    recs = write_store(root, V6_SPECS * 3, abort=True)
    last = recs[-1]
    path = root / "commitlog" / f"{last['offset'] // FS * FS:020d}"
    data = bytearray(path.read_bytes())
    p = last["offset"] % FS
    data[p + last["size"] // 2 : p + last["size"]] = bytes(last["size"] - last["size"] // 2)
    path.write_bytes(bytes(data))
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["end_offset"] == last["offset"]
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    assert cq_units(root, "T6") == [unit_of(r) for r in recs[:-1]]
    assert index_pairs(root) == expected_index(recs[:-1])
    assert not (root / "abort").exists()


# ============================================================================ V2 magic (5.1.0+)

LONG = "%RETRY%" + "g" * 130  # 137 chars: V2 (STORE_FORMAT §3, §4.1)


def v2_specs() -> list[dict[str, Any]]:
    s: list[dict[str, Any]] = []
    for i in range(4):
        s.append(dict(topic="Short", props=props({"KEYS": f"s{i}", "TAGS": "TagA"})))
        s.append(dict(topic=LONG, props=props({"KEYS": f"l{i}", "TAGS": "TagB"})))
    s.append(dict(topic=LONG, born=("2001:db8::1", 1), store=("2001:db8::2", 2), props=props({"KEYS": "l6"})))
    return s


@pytest.mark.parametrize("version", ["5.1.4", "5.3.3"])
def test_v2_records_5x_dump_rebuild_verify_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    root = tmp_path / "s"
    recs = write_store(root, v2_specs(), abort=True)
    rows = [r for r in dump(capsys, root, "--broker-version", version) if r["type"] == "message"]
    assert [(r["physical_offset"], r["topic"], r["magic"]) for r in rows] == [
        (r["offset"], r["topic"], "V2" if r["topic"] == LONG else "V1") for r in recs
    ]
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]
    assert plan["records_valid"] == len(recs)
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    assert cq_units(root, LONG) == [unit_of(r) for r in recs if r["topic"] == LONG]
    assert cq_units(root, "Short") == [unit_of(r) for r in recs if r["topic"] == "Short"]
    assert index_pairs(root) == expected_index(recs)
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 0 and codes(findings, "error") == set()


@pytest.mark.parametrize("version", ["4.9.4", "5.0.0"])
def test_v2_record_stops_pre_5_1_recovery(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str) -> None:
    """A 4.x / 5.0 reader rejects the V2 magic: (-1, False) (TEST_VECTORS §14.3)."""
    root = tmp_path / "s"
    recs = write_store(root, v2_specs())
    _code, plan = recover_plan(capsys, root, "--broker-version", version, "--abnormal")
    assert plan["end_offset"] == recs[1]["offset"]
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 4 and "CL_V2_UNSUPPORTED" in codes(findings, "error")


def test_v2_first_record_matches_abnormal_start_file_5x(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RECOVERY §5.1: 5.x isMappedFileMatchedRecover accepts the V2 magic."""
    root = tmp_path / "s"
    specs = [dict(topic=LONG, props=props({"KEYS": f"l{i}"}), store_ts=TS0 + 1000 * i) for i in range(40)]
    recs = write_store(root, specs, abort=True)
    bases = sorted({r["offset"] // FS * FS for r in recs})
    assert len(bases) >= 3
    t = recs[-1]["store_ts"] + 3000
    (root / "checkpoint").write_bytes(struct.pack(">qqq", t, t, 0).ljust(4096, b"\0"))
    _code, plan = recover_plan(capsys, root, "--broker-version", "5.1.4")
    assert plan["start_offset"] == bases[-1]
    _code, plan = recover_plan(capsys, root, "--broker-version", "4.9.4")
    assert plan["start_offset"] == 0  # nothing matches: scan from the first file


# ============================================================================ __CRC32# (5.2.0+)


def crc_specs(n: int = 8) -> list[dict[str, Any]]:
    return [
        dict(
            topic="CrcT", props=props({"KEYS": f"c{i}", "TAGS": "TagA", "CLUSTER": "C"}, trailing=True), crc32_prop=True
        )
        for i in range(n)
    ]


def _patch(root: Path, off: int, data: bytes) -> None:
    path = root / "commitlog" / f"{off // FS * FS:020d}"
    raw = bytearray(path.read_bytes())
    raw[off % FS : off % FS + len(data)] = data
    path.write_bytes(bytes(raw))


def test_crc32_property_intact_store_is_sound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = write_store(root, crc_specs())
    assert rebuild(capsys, root, tmp_path, "--broker-version", "5.3.3") == 1
    assert cq_units(root, "CrcT") == [unit_of(r) for r in recs]
    code, findings = verify(capsys, root, "--broker-version", "5.3.3")
    assert code == 0 and codes(findings, "error") == set()


@pytest.mark.parametrize("version", ["4.9.4", "5.2.0", "5.3.3"])
def test_crc32_property_mismatch_not_verified_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """forceVerifyPropCRC defaults to false (STORE_FORMAT §2.4): recovery checks the body CRC
    only, so a header byte outside the body (FLAG at +16) changed under an intact body is
    not cut; 4.x does not know the property at all."""
    root = tmp_path / "s"
    recs = write_store(root, crc_specs(), abort=True)
    _patch(root, recs[3]["offset"] + 16, struct.pack(">i", 7))
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]
    assert plan["records_valid"] == len(recs)


@pytest.mark.parametrize("version", ["5.2.0", "5.3.3"])
def test_body_crc_still_checked_on_5x_with_crc32_property(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    root = tmp_path / "s"
    recs = write_store(root, crc_specs(), abort=True)
    r = recs[4]
    body_at = r["offset"] + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4
    _patch(root, body_at, b"J")  # 'hello' -> 'Jello'
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["end_offset"] == r["offset"]


def test_force_verify_prop_crc_semantics() -> None:
    """RECOVERY §2 step 5 and 9 with forceVerifyPropCRC=true: the body CRC is not checked,
    the whole-record CRC is."""
    raw = bytearray(record("CrcT", props=props({"KEYS": "x"}, trailing=True), crc32_prop=True))
    p533 = BrokerProfile.for_version("5.3.3")
    forced = replace(p533, force_verify_prop_crc=True)
    assert ck.check_record(bytes(raw), 0, len(raw), forced).is_message
    bad = bytearray(raw)
    bad[16] ^= 1  # FLAG: not covered by the body CRC
    assert ck.check_record(bytes(bad), 0, len(bad), p533).is_message
    c = ck.check_record(bytes(bad), 0, len(bad), forced)
    assert (c.size, c.ok) == (-1, False)
    # a record with no __CRC32# fails the forced check (expected = -1)
    plain = record("CrcT", props=props({"KEYS": "x"}, trailing=True))
    c = ck.check_record(plain, 0, len(plain), forced)
    assert (c.size, c.ok) == (-1, False)
    # 5.1.4 has no such check
    p514 = replace(BrokerProfile.for_version("5.1.4"), force_verify_prop_crc=True)
    assert ck.check_record(bytes(bad), 0, len(bad), p514).is_message


# ============================================================================ transactions


def tx_specs() -> list[dict[str, Any]]:
    u = lambda i: f"{0xABC0 + i:032X}"  # noqa: E731
    return [
        dict(topic="TxT", props=props({"KEYS": "kN", "UNIQ_KEY": u(0), "TAGS": "TagA"})),
        dict(
            topic="TxT", sysflag=0x4, props=props({"KEYS": "kP", "UNIQ_KEY": u(1), "TAGS": "TagA", "TRAN_MSG": "true"})
        ),
        dict(
            topic=HALF,
            props=props({"KEYS": "kH", "UNIQ_KEY": u(2), "REAL_TOPIC": "TxT", "REAL_QID": "0", "TRAN_MSG": "true"}),
        ),
        dict(topic="TxT", sysflag=0x8, prepared=0, props=props({"KEYS": "kC", "UNIQ_KEY": u(3), "TAGS": "TagB"})),
        dict(topic=OP, props=props({"KEYS": "kO", "TAGS": "d"})),
        dict(topic="TxT", sysflag=0xC, props=props({"KEYS": "kR", "UNIQ_KEY": u(4), "TAGS": "TagA"})),
        dict(topic="TxT", props=props({"KEYS": "kN2", "UNIQ_KEY": u(5), "TAGS": "TagC"})),
    ]


def _check_tx_dispatch(root: Path, recs: list[dict[str, Any]]) -> None:
    # RECOVERY §9.1: CQ gets NOT_TYPE and COMMIT only; system topics are not excluded
    want = [unit_of(r) for r in recs if r["topic"] == "TxT" and (r.get("sysflag", 0) & 0xC) in (0, 8)]
    assert cq_units(root, "TxT") == want
    assert cq_units(root, HALF) == [unit_of(recs[2])]
    assert cq_units(root, OP) == [unit_of(recs[4])]
    # the index gets NOT, PREPARED and COMMIT, not ROLLBACK
    idx = index_pairs(root)
    assert idx == expected_index(recs)
    assert (index_hash("TxT#kP"), recs[1]["offset"]) in idx
    assert (index_hash("TxT#kR"), recs[5]["offset"]) not in idx


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_transactions_rebuild(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str) -> None:
    root = tmp_path / "s"
    recs = write_store(root, tx_specs())
    assert recs[1]["qoff"] == 0 and recs[5]["qoff"] == 0 and recs[3]["qoff"] == 1 and recs[6]["qoff"] == 2
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1
    _check_tx_dispatch(root, recs)
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 0 and codes(findings, "error") == set()
    # PREPARED/ROLLBACK carry QUEUEOFFSET 0 by design (STORE_FORMAT §4): not an anomaly
    assert "CL_QUEUE_OFFSET" not in codes(findings)


@pytest.mark.parametrize("version", ["4.9.4", "5.1.4", "5.3.3"])
def test_transactions_abnormal_recovery_dispatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    root = tmp_path / "s"
    recs = write_store(root, tx_specs(), abort=True)
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    _check_tx_dispatch(root, recs)


def test_transactions_missing_counts_only_dispatchable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """5.1.4 after a clean exit never dispatches again (Q3): the TxT queue misses exactly its
    NOT/COMMIT records (3), not the PREPARED/ROLLBACK ones."""
    root = tmp_path / "s"
    write_store(root, tx_specs())
    code, findings = verify(capsys, root, "--broker-version", "5.1.4")
    miss: dict[str, int] = {}
    for f in findings:
        if f["code"] == "CQ_MISSING_MESSAGE":
            miss[f["details"]["topic"]] = miss.get(f["details"]["topic"], 0) + f["details"]["count"]
    assert code == 4 and miss == {"TxT": 3, HALF: 1, OP: 1}


# ============================================================================ torn writes


def _file_of(off: int) -> Path:
    return Path(f"{off // FS * FS:020d}")


def _zero(root: Path, off: int, n: int) -> None:
    _patch(root, off, bytes(n))


@pytest.mark.parametrize("version", ["4.9.4", "5.1.4", "5.3.3"])
@pytest.mark.parametrize("mode", ["--normal", "--abnormal"])
def test_torn_record_cut_midway_at_end_of_last_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, mode: str
) -> None:
    root = tmp_path / "s"
    recs = write_store(root, msgs("TornT", 30), abort=True)
    last = recs[-1]
    _zero(root, last["offset"] + 30, last["size"] - 30)  # the header's first 30 bytes made it
    _code, plan = recover_plan(capsys, root, "--broker-version", version, mode)
    assert plan["end_offset"] == last["offset"]
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code != 0 or codes(findings) & {"CL_TORN_TAIL", "CL_TRUNCATED_RECORD", "CL_SIZE_MISMATCH", "CL_BODY_CRC"}
    assert recover(capsys, root, tmp_path, "--broker-version", version, mode) == 1
    data = (root / "commitlog" / _file_of(last["offset"])).read_bytes()
    assert data[last["offset"] % FS :] == bytes(FS - last["offset"] % FS)
    # abnormal: dispatch from the start file; normal: 4.x start-up reput from the (empty)
    # queues, 5.3.2+ walk-back with maxPhyOffsetOfCQ = -1; 5.0-5.3.1 normal: no dispatch (Q3)
    dispatched = mode == "--abnormal" or version in ("4.9.4", "5.3.3")
    assert cq_units(root, "TornT") == ([unit_of(r) for r in recs[:-1]] if dispatched else [])
    if dispatched:  # the recovered store is sound
        code, findings = verify(capsys, root, "--broker-version", version)
        assert code == 0, codes(findings, "error")


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
@pytest.mark.parametrize("header_bytes", [4, 8, 12, 40])
def test_partial_header_at_end_of_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, header_bytes: int
) -> None:
    """Only the first bytes of the last record's header reached the disk: the walk stops
    at that record (bad magic, or an inconsistent length: RECOVERY §2)."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("TornT", 10), abort=True)
    last = recs[-1]
    _zero(root, last["offset"] + header_bytes, last["size"] - header_bytes)
    for mode in ("--normal", "--abnormal"):
        _code, plan = recover_plan(capsys, root, "--broker-version", version, mode)
        assert plan["end_offset"] == last["offset"], mode
        assert plan["records_valid"] == len(recs) - 1


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_zero_filled_region_inside_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str) -> None:
    root = tmp_path / "s"
    recs = write_store(root, msgs("ZeroT", 18), abort=True)
    hole = recs[5]
    _zero(root, hole["offset"], hole["size"] + recs[6]["size"])
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["end_offset"] == hole["offset"]
    assert plan["messages_cut"] == len(recs) - 7  # intact records after the hole, salvaged count
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 4 and "CL_DATA_AFTER_END" in codes(findings, "error")
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    assert cq_units(root, "ZeroT") == [unit_of(r) for r in recs[:5]]
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 0, codes(findings, "error")


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_torn_end_of_non_last_file_removes_later_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """A file whose data ends in zeros without a BLANK (torn), followed by a later file: the
    walk stops in the first file and every later file is deleted (RECOVERY §4, §6)."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("MultiT", 40), abort=True)
    f0 = [r for r in recs if r["offset"] < FS]
    assert len(f0) < len(recs)
    victim = f0[-1]
    _zero(root, victim["offset"], FS - victim["offset"])  # its bytes and the BLANK are gone
    for mode in ("--normal", "--abnormal"):
        _code, plan = recover_plan(capsys, root, "--broker-version", version, mode)
        assert plan["end_offset"] == victim["offset"], mode
        assert [r["path"] for r in plan["removed_files"]] == [f"commitlog/{FS:020d}"]


def test_record_running_past_file_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TOTALSIZE larger than what is left of the file: (-1, False) in 4.x (read beyond the
    end) and in 5.3.2+ (the remaining-bytes check)."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("BigT", 10), abort=True)
    last = recs[-1]
    _patch(root, last["offset"], struct.pack(">i", FS))  # TOTALSIZE = 4096
    for version in ("4.9.4", "5.1.4", "5.3.3"):
        _code, plan = recover_plan(capsys, root, "--broker-version", version)
        assert plan["end_offset"] == last["offset"], version


# ============================================================================ 5.3.2+ walk-back


def _walkback_store(root: Path, cq_upto: int | None) -> list[dict[str, Any]]:
    """~6 commitlog files of one queue; the CQ holds the first ``cq_upto`` records."""
    recs = write_store(root, msgs("WbT", 130))
    if cq_upto is not None:
        write_cq(root, "WbT", 0, [unit_of(r) for r in recs[:cq_upto]])
    return recs


def test_walkback_start_file_and_strict_dispatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = _walkback_store(root, 40)
    bases = sorted({r["offset"] // FS * FS for r in recs})
    assert len(bases) >= 6
    max_cq = recs[39]["offset"] + recs[39]["size"]
    assert max_cq == recs[40]["offset"] and max_cq % FS != 0
    want_start = max(b for b in bases if b <= max_cq)  # RECOVERY §4.2
    _code, plan = recover_plan(capsys, root, "--broker-version", "5.3.3")
    assert plan["max_phy_offset_of_cq"] == max_cq
    assert plan["start_offset"] == want_start
    assert plan["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]
    _code, plan514 = recover_plan(capsys, root, "--broker-version", "5.1.4")
    assert plan514["start_offset"] == bases[-3]  # third-last (RECOVERY §4.1)
    assert recover(capsys, root, tmp_path, "--broker-version", "5.3.3") == 1
    # dispatched: records with commitLogOffset > maxPhyOffsetOfCQ; recs[40] (== max) is
    # not (quirk Q2). The CQ put appends sequentially (RECOVERY §9.2, Q12).
    units = cq_units(root, "WbT")
    assert units == [unit_of(r) for r in recs[:40]] + [unit_of(r) for r in recs[41:]]
    assert index_pairs(root) == expected_index(recs[41:])


def test_walkback_cq_end_before_a_blank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """maxPhyOffsetOfCQ ends right before a BLANK: the next record starts in the next file,
    at an offset > maxPhyOffsetOfCQ, so it IS dispatched (RECOVERY §4.2)."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("WbT", 130))
    k = next(i for i in range(1, len(recs)) if recs[i]["offset"] % FS == 0 and recs[i]["offset"] >= 2 * FS)
    write_cq(root, "WbT", 0, [unit_of(r) for r in recs[:k]])
    max_cq = recs[k - 1]["offset"] + recs[k - 1]["size"]
    assert max_cq < recs[k]["offset"]
    _code, plan = recover_plan(capsys, root, "--broker-version", "5.3.3")
    assert plan["start_offset"] == recs[k - 1]["offset"] // FS * FS
    assert recover(capsys, root, tmp_path, "--broker-version", "5.3.3") == 1
    assert cq_units(root, "WbT") == [unit_of(r) for r in recs]


def test_walkback_empty_queues_dispatch_everything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = _walkback_store(root, None)
    _code, plan = recover_plan(capsys, root, "--broker-version", "5.3.3")
    assert plan["max_phy_offset_of_cq"] == -1 and plan["start_offset"] == 0
    assert recover(capsys, root, tmp_path, "--broker-version", "5.3.3") == 1
    assert cq_units(root, "WbT") == [unit_of(r) for r in recs]
    assert index_pairs(root) == expected_index(recs)


def test_walkback_5_3_1_does_not_dispatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = _walkback_store(root, 50)
    before = cq_units(root, "WbT")
    recover(capsys, root, tmp_path, "--broker-version", "5.3.1")
    assert cq_units(root, "WbT") == before == [unit_of(r) for r in recs[:50]]


def test_walkback_with_torn_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = _walkback_store(root, 120)
    last = recs[-1]
    _zero(root, last["offset"] + 50, last["size"] - 50)
    _code, plan = recover_plan(capsys, root, "--broker-version", "5.3.3")
    assert plan["end_offset"] == last["offset"]
    assert recover(capsys, root, tmp_path, "--broker-version", "5.3.3") == 1
    assert cq_units(root, "WbT") == [unit_of(r) for r in recs[:120]] + [unit_of(r) for r in recs[121:-1]]


def test_confirm_offset_persisted_5_1_1_plus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """STORE_FORMAT §16: confirmPhyOffset (@32) = start of the last valid message (5.1.1+)."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("CfT", 12), abort=True)
    assert recover(capsys, root, tmp_path, "--broker-version", "5.3.3") == 1
    assert struct.unpack_from(">q", (root / "checkpoint").read_bytes(), 32)[0] == recs[-1]["offset"]


# ============================================================================ more version rules


def index_list(root: Path) -> list[tuple[int, int]]:
    """(keyHash, phyOffset) of every used entry, duplicates kept."""
    out: list[tuple[int, int]] = []
    for f in sorted((root / "index").iterdir()):
        data = f.read_bytes()
        count = struct.unpack_from(">i", data, 36)[0]
        for n in range(1, max(count, 1)):
            h, phy, _td, _prev = struct.unpack_from(">iqii", data, 40 + SLOTS * 4 + n * 20)
            out.append((h, phy))
    return out


def test_trailing_prepared_reindexed_by_4x_startup_reput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RECOVERY §10 Q6: after the 4.x abnormal dispatch, the start-up reput restarts at the
    CQ max (the start of the trailing PREPARED record, which has no CQ unit) and indexes it
    again: its offset equals endPhyOffset, and the skip test is strictly less."""
    root = tmp_path / "s"
    recs = write_store(
        root,
        [
            dict(topic="TxT", props=props({"KEYS": "k0", "UNIQ_KEY": "0" * 31 + "1"})),
            dict(topic="TxT", props=props({"KEYS": "k1", "UNIQ_KEY": "0" * 31 + "2"})),
            dict(topic="TxT", sysflag=0x4, props=props({"KEYS": "kP", "UNIQ_KEY": "0" * 31 + "3"})),
        ],
        abort=True,
    )
    assert recover(capsys, root, tmp_path, "--broker-version", "4.9.4") == 1
    entries = index_list(root)
    p = recs[2]["offset"]
    assert entries.count((index_hash("TxT#kP"), p)) == 2
    assert entries.count((index_hash("TxT#" + "0" * 31 + "3"), p)) == 2
    assert entries.count((index_hash("TxT#k0"), recs[0]["offset"])) == 1


def test_no_startup_reput_in_5x(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = write_store(
        root,
        [
            dict(topic="TxT", props=props({"KEYS": "k0"})),
            dict(topic="TxT", sysflag=0x4, props=props({"KEYS": "kP"})),
        ],
        abort=True,
    )
    assert recover(capsys, root, tmp_path, "--broker-version", "5.1.4") == 1
    assert index_list(root).count((index_hash("TxT#kP"), recs[1]["offset"])) == 1


@pytest.mark.parametrize("version,stops", [("4.9.4", False), ("5.3.1", False), ("5.3.3", True)])
def test_blank_longer_than_the_rest_of_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, stops: bool
) -> None:
    """RECOVERY §2 steps 0-2: the 5.3.2+ remaining-bytes check comes before the magic test,
    so a BLANK whose TOTALSIZE exceeds the rest of the file stops the walk there; before
    5.3.2 a BLANK's TOTALSIZE is never checked and the walk moves to the next file."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("BlT", 40), abort=True)
    f0 = [r for r in recs if r["offset"] < FS]
    blank_at = f0[-1]["offset"] + f0[-1]["size"]
    _patch(root, blank_at, struct.pack(">i", FS - blank_at + 1))
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    if stops:
        assert plan["end_offset"] == blank_at
        assert [r["path"] for r in plan["removed_files"]] == [f"commitlog/{FS:020d}"]
    else:
        assert plan["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
@pytest.mark.parametrize("mode", ["--normal", "--abnormal"])
def test_cq_ahead_of_torn_commitlog_is_truncated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, mode: str
) -> None:
    """The CQ holds units for records the torn commitlog lost: maxPhyOffsetOfCQ >=
    processOffset, so every queue is truncated to units with offset < processOffset
    (RECOVERY §4, §5.2, §7.1)."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("AhT", 30), abort=True)
    write_cq(root, "AhT", 0, [unit_of(r) for r in recs])
    cut = recs[-3]
    _zero(root, cut["offset"] + 10, FS - (cut["offset"] % FS) - 10)
    _code, plan = recover_plan(capsys, root, "--broker-version", version, mode)
    assert plan["end_offset"] == cut["offset"] and plan["cq_truncation"] is True
    if version == "5.3.3" and mode == "--normal":
        assert plan["start_offset"] == cut["offset"] // FS * FS  # maxPhyOffsetOfCQ lies in the last file
    assert recover(capsys, root, tmp_path, "--broker-version", version, mode) == 1
    assert cq_units(root, "AhT") == [unit_of(r) for r in recs[:-3]]


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_ipv6_body_crc_damage_found_by_verify_and_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    root = tmp_path / "s"
    recs = write_store(
        root,
        [
            dict(
                topic="T6",
                born=("2001:db8::1", 1),
                store=("2001:db8:0:0:1234:5678::1", 2),
                props=props({"KEYS": f"k{i}"}),
                body=b"body%03d" % i,
            )
            for i in range(12)
        ],
        abort=True,
    )
    r = recs[6]
    _patch(root, r["offset"] + r["size"] - len(r["props"]) - 2 - 1 - 2 - 7, b"X")  # a body byte
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 4 and any(f["code"] == "CL_BODY_CRC" and f["physical_offset"] == r["offset"] for f in findings)
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["end_offset"] == r["offset"]


@pytest.mark.parametrize("with_cq", [False, True])
def test_verify_ipv6_hashes_only_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, with_cq: bool
) -> None:
    """The body CRC covers exactly BODYLENGTH bytes at 72 + b + s (STORE_FORMAT §4, §7).
    verify must not CRC other spans: with both hosts IPv6, the bytes it reads as BODYLENGTH
    at the IPv4 position (84) are store-address bytes 8-11 (here 0x12345678 = 305 MB), and
    hashing that much per record makes verify quadratic on a 1 GiB commitlog file."""
    import numpy as np

    from rmqtool.recovery import ccore

    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    data = bytearray()
    units = []
    for i in range(50):
        raw = record(
            "T6",
            born=("2001:db8::1", 1),
            store=("2001:db8:0:0:1234:5678::1", 10911),
            phys=len(data),
            qoff=i,
            props=props({"KEYS": f"k{i}"}),
            store_ts=TS0 + i,
        )
        units.append((len(data), len(raw), 0))
        data += raw
    if with_cq:  # the consume queue's offsets drive verify's hinted walk
        write_cq(root, "T6", 0, units)
    with open(root / "commitlog" / f"{0:020d}", "wb") as fh:
        fh.write(data)
        fh.truncate(8 << 20)  # sparse 8 MiB file
    (root / "checkpoint").write_bytes(struct.pack(">qqq", TS0 + 49, TS0 + 49, 0).ljust(4096, b"\0"))
    (root / "lock").write_bytes(b"lock")
    hashed = [0]
    real = ccore.crc32_spans

    def counting(buf: Any, a: Any, b: Any) -> Any:
        hashed[0] += int(np.maximum(np.asarray(b) - np.maximum(np.asarray(a), 0), 0).sum())
        return real(buf, a, b)

    # every walk's body CRCs (plain and hinted walk, IPv6 bodies) go through ccore.crc32_spans
    monkeypatch.setattr(ccore, "crc32_spans", counting)
    code, findings = verify(capsys, root, "--jobs", "1")
    assert codes(findings, "error") == set()
    body_bytes = 50 * len(b"hello")
    assert hashed[0] <= 4 * body_bytes + (1 << 16), f"verify hashed {hashed[0]} bytes for {body_bytes} body bytes"


@pytest.mark.parametrize("version", ["4.6.0", "4.9.0"])
def test_crc32_named_property_is_not_checked_before_5_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """``__CRC32#`` is a 5.2.0+ property (STORE_FORMAT §7.1, §8.3). An older broker neither
    writes nor verifies it nor removes a client-supplied one; such a property is ordinary
    data there, so it cannot make the record (or the store) bad. (4.6.0-4.9.0 serialize
    with a trailing 0x02, so a client's ``__CRC32#`` entry stored last looks exactly like
    the 5.2 tail.)"""
    root = tmp_path / "s"
    write_store(
        root, [dict(topic="OldT", props=props({"KEYS": f"o{i}"}) + b"\x02__CRC32#\x011234567890\x02") for i in range(5)]
    )
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1
    assert len(cq_units(root, "OldT")) == 5
    code, findings = verify(capsys, root, "--broker-version", version)
    # not an error for such a broker; still reported, as a warning, in case the store was
    # in fact written by 5.2+ and the version given is wrong
    assert "CL_PROP_CRC" not in codes(findings) and code == 0
    pre = [f for f in findings if f["code"] == "CL_PROP_CRC_PRE_5_2"]
    assert pre and all(f["severity"] == "warning" for f in pre)
    assert run(["verify", str(root), "--quiet", "--strict", "--broker-version", version]) == 4
    assert verify(capsys, root, "--broker-version", "5.3.3")[0] == 4  # for 5.2+ the mismatch is an error


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_abnormal_dispatch_skips_units_already_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """RECOVERY §9.2: offset + size <= maxPhysicOffset -> already built; the abnormal
    dispatch from the first file leaves every unit exactly once."""
    root = tmp_path / "s"
    recs = write_store(root, msgs("DupT", 80), abort=True)
    write_cq(root, "DupT", 0, [unit_of(r) for r in recs[:33]])
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["start_offset"] == 0  # minTimestamp is older than every record
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    assert cq_units(root, "DupT") == [unit_of(r) for r in recs]


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_zeroed_first_record_of_last_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str) -> None:
    """A lost first page of the last file: the abnormal start-file test fails on it (magic
    0), the walk from the previous file moves to the last file at the BLANK and stops at
    its position 0; the last file is kept (truncated to 0), not deleted (RECOVERY §5, §6)."""
    root = tmp_path / "s"
    specs = [dict(topic="PgT", props=props({"KEYS": f"p{i}"}), store_ts=TS0 + 1000 * i) for i in range(80)]
    recs = write_store(root, specs, abort=True)
    last_base = recs[-1]["offset"] // FS * FS
    prev_base = last_base - FS
    firsts = {r["offset"] // FS * FS: r for r in reversed(recs)}
    t = firsts[last_base]["store_ts"] + 3000  # the last file would match
    (root / "checkpoint").write_bytes(struct.pack(">qqq", t, t, 0).ljust(4096, b"\0"))
    _zero(root, last_base, 8)
    _code, plan = recover_plan(capsys, root, "--broker-version", version)
    assert plan["start_offset"] == prev_base
    assert plan["end_offset"] == last_base
    assert plan["removed_files"] == []


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_index_keys_split_duplicates_and_utf16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """RECOVERY §9.3 / STORE_FORMAT §15.4: UNIQ_KEY first, then KEYS split on single spaces
    (empty pieces dropped, duplicates NOT removed), hash over UTF-16 units of topic#key."""
    root = tmp_path / "s"
    recs = write_store(
        root,
        [
            dict(
                topic="IxT",
                props=props({"KEYS": " dup  dup ", "UNIQ_KEY": "F" * 32}, trailing=version >= "5.2"),
                born=("2001:db8::1", 1),
            ),
            dict(topic="IxT", props=props({"KEYS": "a\U0001f600b 订单123"}, trailing=version >= "5.2")),
        ],
    )
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1
    got = index_list(root)
    want = [
        (index_hash("IxT#" + "F" * 32), recs[0]["offset"]),
        (index_hash("IxT#dup"), recs[0]["offset"]),
        (index_hash("IxT#dup"), recs[0]["offset"]),
        (index_hash("IxT#a\U0001f600b"), recs[1]["offset"]),
        (index_hash("IxT#订单123"), recs[1]["offset"]),
    ]
    assert got == want


@pytest.mark.parametrize("version,q1", [("4.9.1", False), ("4.9.4", True), ("5.1.4", False), ("5.3.3", False)])
def test_schedule_tags_code_in_abnormal_recovery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, q1: bool
) -> None:
    """STORE_FORMAT §12.2 rule 3 and RECOVERY §10 Q1 (4.9.2-4.9.8 only: maxDelayLevel 0)."""
    root = tmp_path / "s"
    recs = write_store(
        root,
        [
            dict(
                topic="SCHEDULE_TOPIC_XXXX",
                queue_id=2,
                props=props({"DELAY": "3", "REAL_TOPIC": "T", "REAL_QID": "0", "TAGS": "TagA"}),
            )
        ],
        abort=True,
    )
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    (unit,) = cq_units(root, "SCHEDULE_TOPIC_XXXX", 2)
    assert unit[:2] == (recs[0]["offset"], recs[0]["size"])
    assert unit[2] == (jhash("TagA") if q1 else recs[0]["store_ts"] + 10_000)


# ============================================================================ inner batches (5.x)


@pytest.mark.parametrize(
    "version,value,dispatched",
    [
        ("5.1.4", "40000", 1),
        ("5.3.3", "32768", 1),
        ("5.3.3", "-32769", 1),
        ("5.1.4", "2147483647", 1),
        ("5.1.4", "32767", 3),
        ("5.3.3", "-32768", 3),
        ("4.9.4", "40000", 3),
    ],
)
def test_inner_num_is_a_java_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, value: str, dispatched: int
) -> None:
    """RECOVERY §2 step 13: a 5.x record with INNER_NUM and INNER_BASE is checked with
    Short.parseShort(INNER_NUM), so a value outside [-32768, 32767] fails the record and
    the reput stops there; before 5.0 INNER_NUM is ordinary data."""
    specs = [
        dict(topic="IS", props=props({"KEYS": "a", "TAGS": "t"})),
        dict(topic="IS", props=props({"INNER_NUM": value, "INNER_BASE": "1", "KEYS": "b"})),
        dict(topic="IS", props=props({"KEYS": "c", "TAGS": "t"})),
    ]
    root = tmp_path / "store"
    write_store(root, specs)
    rebuild(capsys, root, tmp_path, "--broker-version", version)
    assert len(cq_units(root, "IS")) == dispatched
    assert len(index_pairs(root)) == dispatched
    code, findings = verify(capsys, root, "--broker-version", version)
    if dispatched == 1:
        assert code == 4 and "CL_BAD_INNER_BATCH" in codes(findings, "error")
    else:
        assert code == 0 and not codes(findings, "error")


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_index_header_after_the_store_clock_stepped_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """IndexFile.putKey sets beginTimestamp at the first put and endTimestamp at every put:
    when the store clock steps back (NTP) the broker's header has begin after end. verify
    accepts that header; a header with begin after end and no entry stays an error."""
    specs = [
        dict(topic="TC", props=props({"KEYS": "a"}), store_ts=TS0 + 5000),
        dict(topic="TC", props=props({"KEYS": "b"}), store_ts=TS0 + 6000),
        dict(topic="TC", props=props({"KEYS": "c"}), store_ts=TS0 + 1000),
    ]
    root = tmp_path / "store"
    write_store(root, specs)
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1
    f = sorted((root / "index").iterdir())[0]
    begin_ts, end_ts, _bp, _ep, _slots, count = struct.unpack_from(">qqqqii", f.read_bytes(), 0)
    assert (begin_ts, end_ts, count) == (TS0 + 5000, TS0 + 1000, 4)
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 0 and not codes(findings, "error")
    # the same header with no entry: no put writes it
    data = bytearray(f.read_bytes())
    data[40:] = bytes(len(data) - 40)
    struct.pack_into(">ii", data, 32, 0, 1)
    f.write_bytes(bytes(data))
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 4 and [x["message"] for x in findings if x["code"] == "IDX_HEADER"] == [
        "begin values after end values"
    ]


# ============================================================================ malformed UTF-8


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_encoded_surrogates_decode_as_java_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """A UTF-8-encoded surrogate (CESU-8, ED A0..BF 80..BF, as some non-Java clients send)
    in TAGS or KEYS: Java's new String(bytes, UTF_8) makes it one U+FFFD, so the tags code
    is hashCode("x\\uFFFD") = 69253 (Python's plain 'replace' makes three) and the index
    key is topic#k\\uFFFD; ED A0 before a non-continuation byte is one U+FFFD too."""
    from rmqtool.formats.javahash import java_hash

    raw_props = b"TAGS\x01x\xed\xb0\x80\x02KEYS\x01k\xed\xa0\x80 m\xed\xa0z"
    specs = [dict(topic="IT", props=raw_props), dict(topic="IT", props=props({"KEYS": "plain", "TAGS": "t"}))]
    recs = write_store(tmp_path / "store", specs)
    root = tmp_path / "store"
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1
    assert java_hash("x\ufffd") == 69253
    assert cq_units(root, "IT")[0] == (recs[0]["offset"], recs[0]["size"], 69253)
    assert index_pairs(root) == {
        (index_hash("IT#k\ufffd"), recs[0]["offset"]),
        (index_hash("IT#m\ufffdz"), recs[0]["offset"]),
        (index_hash("IT#plain"), recs[1]["offset"]),
    }
    code, findings = verify(capsys, root, "--broker-version", version)
    assert code == 0 and not codes(findings, "error")
    rows = dump(capsys, root)
    assert [r.get("tags") for r in rows][:1] == ["x\ufffd"]


# ============================================================================ a queue file removed, then written again


@pytest.mark.parametrize(
    "version,mode",
    [
        ("4.9.4", "--abnormal"),
        ("4.9.4", "--normal"),
        ("5.1.4", "--abnormal"),
        ("5.3.3", "--abnormal"),
        ("5.3.3", "--normal"),
    ],
)
def test_queue_file_removed_then_written_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, mode: str
) -> None:
    """A lost unit in a consume queue file that is not the last (a torn page): the queue's
    recovery stops there and removes every later file (RECOVERY §3, §6), then the dispatch
    appends from the hole and creates the next file again under the same name (§9.2).
    recover replaces that file (one action, with a backup) and ends with every unit in place
    (but for 5.3.2+'s normal recovery, which skips the first record to dispatch: §4.2)."""
    specs = [dict(topic="A", props=props({"KEYS": f"k{i}", "TAGS": "T"})) for i in range(250)]
    root = tmp_path / "store"
    recs = write_store(root, specs, checkpoint=(0, 0, 0))
    assert rebuild(capsys, root, tmp_path, "--broker-version", version) == 1  # the index, as the broker left it
    if mode == "--abnormal":
        (root / "abort").write_bytes(b"")
    units = [unit_of(r) for r in recs]
    shutil.rmtree(root / "consumequeue" / "A" / "0")
    write_cq(root, "A", 0, units[:230])  # the queue lags a little
    f1 = root / "consumequeue" / "A" / "0" / f"{CQ_FS:020d}"
    data = bytearray(f1.read_bytes())
    data[50 * 20 : 51 * 20] = bytes(20)  # unit 150 lost
    f1.write_bytes(bytes(data))
    before = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    code = recover(capsys, root, tmp_path, "--broker-version", version, mode)
    assert code == 1
    if version == "5.3.3" and mode == "--normal":  # quirk: the record at maxPhyOffsetOfCQ is not dispatched,
        units = units[:150] + units[151:]  # the next one is appended in its place (Q12)
    assert cq_units(root, "A") == units
    code, findings = verify(capsys, root, "--broker-version", version)
    # after the quirk, verify says what the broker's own recovery left wrong
    assert codes(findings, "error") == ({"CQ_WRONG_RECORD"} if len(units) == 249 else set())
    code, _out = cli(capsys, "restore", "--yes", str(tmp_path / "bk"), str(root))
    assert code == 1
    after = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before


# ============================================================================ quirk Q13 in the start-up reput


def test_startup_reput_after_a_length_mismatch_goes_where_the_broker_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4.x normal start: the queues lag into file 1, before the recovery's start file, and a
    record there has its fields zeroed after TOTALSIZE and MAGIC (a torn page). The broker's
    reput moves its offset by TOTALSIZE but reads on at the parsed length, then skips the
    rest of the region: it lands TOTALSIZE bytes into file 2 (RECOVERY §9.5, Q13), goes on
    there if a record starts there and skips the rest of file 2 if not. recover dispatches
    exactly what the broker dispatches."""
    specs = [dict(topic="A", props=props({"TAGS": "T"}), body=bytes([i % 251]) * (40 + i % 7)) for i in range(260)]
    root = tmp_path / "store"
    recs = write_store(root, specs)
    assert recs[-1]["offset"] >= 5 * FS  # six files: normal recovery reads files 3-5 only
    in_f1 = [r for r in recs if FS <= r["offset"] < 2 * FS]
    victim = in_f1[len(in_f1) // 2]
    f1 = root / "commitlog" / f"{FS:020d}"
    data = bytearray(f1.read_bytes())
    p = victim["offset"] - FS
    data[p + 8 : p + victim["size"]] = bytes(victim["size"] - 8)  # TOTALSIZE and MAGIC stay
    f1.write_bytes(bytes(data))
    units = [unit_of(r) for r in recs]
    lag = [u for u in units if u[0] < FS // 2]
    write_cq(root, "A", 0, lag)
    # the broker's reput, by the rule: from the queue's end to the victim, then from its landing place
    land = 2 * FS + victim["size"]
    starts = {r["offset"] for r in recs}
    resume = land if land in starts else 3 * FS
    want = (
        lag
        + [unit_of(r) for r in recs if lag[-1][0] < r["offset"] < victim["offset"]]
        + [unit_of(r) for r in recs if r["offset"] >= resume]
    )
    code, out = cli(
        capsys,
        "recover",
        "--yes",
        str(root),
        "-q",
        "--jobs",
        "1",
        "--backup-dir",
        str(tmp_path / "bk"),
        *GEOM,
        "--normal",
        "--format",
        "json",
    )
    assert code == 5  # damage before the start file: recovery neither reads nor repairs it
    probs = {(p["code"], p["path"]) for p in json.loads(out)["result"]["problems"]}
    assert probs == {("UNREAD_FILE_DAMAGE", f"commitlog/{FS:020d}"), ("REPUT_OFFSET_DIVERGED", f"commitlog/{FS:020d}")}
    got = cq_units(root, "A")
    assert got == want
    assert any(2 * FS <= r["offset"] < resume for r in recs)  # the broker skips something in file 2


# ============================================================================ a zero-length last queue file


@pytest.mark.parametrize("version", ["4.9.4", "5.0.0", "5.1.4", "5.3.3"])
def test_zero_length_last_queue_file_after_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """A zero-length last consume queue file and a crash whose dispatch writes into it. From
    5.1.3 the broker deletes that file at load (MappedFileQueue.doLoad) and the abnormal
    dispatch creates it again with the missing units: recover replaces it (it failed with
    status 8). Before 5.1.3 the broker refuses to load the file: a problem (status 4), and
    the run still completes the rest of the recovery without failing."""
    specs = [dict(topic="TA", props=props({"KEYS": f"k{i}"}), body=b"x", store_ts=TS0 + i * 100) for i in range(130)]
    root = tmp_path / "store"
    recs = write_store(root, specs, abort=True)
    write_cq(root, "TA", 0, [unit_of(r) for r in recs[:100]])  # the first file, full
    empty = root / "consumequeue" / "TA" / "0" / f"{CQ_FS:020d}"
    empty.write_bytes(b"")
    t = recs[90]["store_ts"]
    (root / "checkpoint").write_bytes(struct.pack(">qqq", t, t, 0).ljust(4096, b"\0"))
    before = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    code = recover(capsys, root, tmp_path, "--broker-version", version)
    if version >= "5.1":
        assert code == 1
        assert cq_units(root, "TA") == [unit_of(r) for r in recs]
        code, findings = verify(capsys, root, "--broker-version", version)
        assert not {c for c in codes(findings, "error") if c.startswith("CQ_")}  # (the store has no index)
    else:
        assert code == 5
    code, _out = cli(capsys, "restore", "--yes", str(tmp_path / "bk"), str(root))
    assert code == 1
    assert {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


# ============================================================================ confirmPhyOffset with no valid record (5.1.1+)


@pytest.mark.parametrize("version", ["5.1.4", "5.3.1"])
def test_confirm_offset_when_the_normal_walk_finds_no_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """CommitLog.recoverNormally starts lastValidMsgPhyOffset at getConfirmOffset(), the max
    offset at load (async flush: every file loaded full), and stores it as the confirm
    offset: with no valid record in the walk (the first record of the third-last file
    damaged), confirmPhyOffset becomes the last file's start + the file size."""
    root = tmp_path / "store"
    recs = write_store(root, [dict(topic="TA", props=props({"KEYS": f"k{i}"}), store_ts=TS0 + i) for i in range(150)])
    write_cq(root, "TA", 0, [unit_of(r) for r in recs])
    nf = len({r["offset"] // FS for r in recs})
    first = [r for r in recs if r["offset"] // FS == nf - 3][0]
    p = root / "commitlog" / f"{first['offset']:020d}"
    d = bytearray(p.read_bytes())
    d[88] ^= 0xFF  # a body byte: the CRC fails
    p.write_bytes(bytes(d))
    t = recs[-1]["store_ts"]
    (root / "checkpoint").write_bytes(struct.pack(">qqqqq", t, t, 0, 0, 11111).ljust(4096, b"\0"))
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    assert struct.unpack(">q", (root / "checkpoint").read_bytes()[32:40])[0] == nf * FS


@pytest.mark.parametrize("version", ["5.1.4", "5.3.3"])
def test_confirm_offset_when_the_abnormal_walk_finds_no_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """CommitLog.recoverAbnormally starts lastValidMsgPhyOffset at the start file's offset:
    the only record torn, confirmPhyOffset becomes 0."""
    root = tmp_path / "store"
    recs = write_store(root, [dict(topic="TA", props=props({"KEYS": "k"}))], abort=True)
    p = root / "commitlog" / f"{0:020d}"
    d = bytearray(p.read_bytes())
    n = recs[0]["size"]
    d[n // 2 : n] = bytes(n - n // 2)
    p.write_bytes(bytes(d))
    (root / "checkpoint").write_bytes(struct.pack(">qqqqq", 0, 0, 0, 0, 777).ljust(4096, b"\0"))
    assert recover(capsys, root, tmp_path, "--broker-version", version) == 1
    assert struct.unpack(">q", (root / "checkpoint").read_bytes()[32:40])[0] == 0
