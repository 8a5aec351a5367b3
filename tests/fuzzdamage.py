"""Damaged stores for the fuzz suite (tests/test_fuzz_damage.py) and the soak
(bench/fuzz_soak.py): copies of the real fixtures with one seeded damage each, and the run
of every command on them with the checks of issues 23 and 33.

Each damage kind is a function ``(root, rng) -> str`` that damages the store copy at
``root`` and describes what it did. :func:`run_store` runs every command on one damaged
store and returns the failures it saw (empty: all good); :func:`broker_sample` has the
broker open the stores repair left and look for every intact record.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
FIXTURES = ["clean", "delay", "crash_midwrite", "many_files"]

READ_ONLY = [
    ("dump", "commitlog"),
    ("dump", "consumequeue"),
    ("dump", "index"),
    ("dump", "index", "--key", "ORDER-1"),
    ("dump", "checkpoint"),
    ("dump", "config"),
    ("verify",),
    ("recover", "--dry-run"),
    ("rebuild-index", "--dry-run"),
    ("info",),
    ("offsets",),
    ("backups",),
    ("repair", "--dry-run"),
    ("report",),
    # the release guessed from the damaged store itself (the runs above are given 4.9.4, which
    # auto cannot always pin on the fixtures: verify then assumes one, recover --dry-run shows the
    # plan of each group of candidates, a real run refuses with exit 2, naming the option)
    ("verify", "--broker-version", "auto"),
    ("recover", "--dry-run", "--broker-version", "auto"),
]
AUTO_REFUSAL = "--broker-version auto:"
# the read-only commands' output format, asked for explicitly (stdout is dropped; these are
# the formats they wrote into a pipe before the one output rule made the table the default)
FORMATS = {
    "dump": "jsonl",
    "verify": "jsonl",
    "offsets": "jsonl",
    "info": "json",
    "backups": "json",
    "report": "json",  # (its page is the default: the json document is the same data)
}
EXITS = {
    "dump": {0, 1, 4, 8},
    "verify": {0, 4, 8},
    "recover": {0, 1, 4, 5, 8},
    "rebuild-index": {0, 1, 4, 5, 8},
    "restore": {0, 1, 4, 8},
    "info": {0, 4, 8},
    "offsets": {0, 4, 8},
    "backups": {0, 4, 8},
    "repair": {0, 1, 4, 5, 8},
    "report": {0, 4, 8},
}


# --------------------------------------------------------------------------------------
# the damage kinds


def _in_store(root: Path, p: Path) -> bool:
    """Whether ``p`` lies in the store by real directories only: no symlink between
    ``root`` and ``p``'s parent (an earlier damage may have made ``commitlog`` a symlink to
    /tmp: a damage must never reach through it)."""
    try:
        rel = p.relative_to(root)
    except ValueError:
        return False
    d = root
    for part in rel.parts[:-1]:
        d = d / part
        if d.is_symlink() or not d.is_dir():
            return False
    return True


def _real_dirs(base: Path) -> list[Path]:
    """``base`` and the directories under it, never through a symlink."""
    if base.is_symlink() or not base.is_dir():
        return []
    out = []
    for dirpath, _dirnames, _ in os.walk(base, followlinks=False):
        out.append(Path(dirpath))
    return sorted(out)  # (the seed's damage must not depend on the directory order)


def _files(root: Path, sub: str | None = None) -> list[Path]:
    base = root / sub if sub else root
    if not _in_store(root, base / "x"):
        return []
    out = []
    for d in _real_dirs(base):
        for e in os.scandir(d):
            if e.is_file(follow_symlinks=False):
                out.append(Path(e.path))
    return sorted(out)


# the damage functions read a file whole to change it: never one a sparse_huge damage
# extended to 1 or 64 GiB (the soak's workers run under a 2 GiB address-space limit)
DAMAGE_READ_LIMIT = 256 << 20


def _readable(paths: list[Path]) -> list[Path]:
    return [p for p in paths if p.stat().st_size <= DAMAGE_READ_LIMIT]


def _pick_file(
    root: Path,
    rng: random.Random,
    subs: tuple[str, ...] = ("commitlog", "consumequeue", "index", "dledger-n0/data"),
) -> Path | None:
    cands = _readable([p for s in subs for p in _files(root, s)])
    extra = [root / n for n in ("checkpoint",) if (root / n).is_file() and not (root / n).is_symlink()] + _files(
        root, "config"
    )
    cands += _readable(extra) if rng.random() < 0.2 else []
    return rng.choice(cands) if cands else None


def _record_starts(path: Path, limit: int = 64) -> list[int]:
    data = path.read_bytes()
    out, pos = [], 0
    if len(data) >= 8 and struct.unpack_from(">ii", data, 0)[0] == 1:  # a DLedger data file: the messages 48 bytes in
        while pos + 56 <= len(data) and len(out) < limit:
            magic, size = struct.unpack_from(">ii", data, pos)
            if magic != 1 or size <= 48:
                break
            out.append(pos + 48)
            pos += size
        return out
    while pos + 8 <= len(data) and len(out) < limit:
        total, magic = struct.unpack_from(">iI", data, pos)
        if total <= 0 or magic not in (0xDAA320A7, 0xCBD43194, 0xDAA320A8):
            break
        out.append(pos)
        pos += total
    return out


def d_bitflip(root: Path, rng: random.Random) -> str:
    p = _pick_file(root, rng)
    if p is None or p.stat().st_size == 0:
        return "bitflip: no file"
    b = bytearray(p.read_bytes())
    flips = []
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        # most flips near the data (commitlog/cq files end in zeros)
        nz = len(b.rstrip(b"\0"))
        if nz and rng.random() < 0.8:
            i = rng.randrange(nz)
        b[i] ^= 1 << rng.randrange(8)
        flips.append(i)
    p.write_bytes(bytes(b))
    return f"bitflip {p.relative_to(root)} at {flips}"


_ABSURD = [0x7FFFFFFF, -1, -0x80000000, 0x10000000, 0, 1, 7, 0xFFFF]


def d_absurd_length(root: Path, rng: random.Random) -> str:
    files = _readable(_files(root, "commitlog") + _files(root, "dledger-n0/data"))
    if not files:
        return "absurd: no commitlog"
    p = rng.choice(files)
    starts = _record_starts(p)
    if not starts:
        return "absurd: no record"
    pos = rng.choice(starts)
    b = bytearray(p.read_bytes())
    (total,) = struct.unpack_from(">i", b, pos)
    bodylen_at = pos + 84
    which = rng.choice(["total", "body", "topic", "props", "queue_offset", "phys_offset"])
    v = rng.choice(_ABSURD)
    if which == "total":
        struct.pack_into(">i", b, pos, v)
    elif which == "body" and bodylen_at + 4 <= len(b):
        struct.pack_into(">i", b, bodylen_at, v)
    elif which == "topic":
        (bl,) = struct.unpack_from(">i", b, bodylen_at)
        t = bodylen_at + 4 + max(0, min(bl, total))
        if t < len(b):
            b[t] = rng.choice([0, 0xFF, 0x7F])
    elif which == "props":
        struct.pack_into(
            ">h", b, pos + total - 2 - rng.randrange(0, 64) if total > 70 else pos, rng.choice([-1, 0x7FFF, 0])
        )
    elif which == "queue_offset":  # (v: the value written, which the description names)
        v = rng.choice([-1, 1 << 62, 0x7FFFFFFFFFFFFFFF])
        struct.pack_into(">q", b, pos + 20, v)
    else:
        v = rng.choice([-1, 1 << 62, 0x7FFFFFFFFFFFFFFF, 12345])
        struct.pack_into(">q", b, pos + 28, v)
    p.write_bytes(bytes(b))
    return f"absurd {which}={v} {p.relative_to(root)}@{pos}"


def d_zero_range(root: Path, rng: random.Random) -> str:
    p = _pick_file(root, rng)
    if p is None or p.stat().st_size == 0:
        return "zero: no file"
    b = bytearray(p.read_bytes())
    nz = max(1, len(b.rstrip(b"\0")))
    a = rng.randrange(nz)
    n = rng.choice([1, 4, 8, 20, 64, 512, 4096, len(b)])
    b[a : a + n] = bytes(len(b[a : a + n]))
    p.write_bytes(bytes(b))
    return f"zero {p.relative_to(root)} [{a}, {a + n})"


def d_truncate(root: Path, rng: random.Random) -> str:
    p = _pick_file(root, rng)
    if p is None:
        return "truncate: no file"
    size = p.stat().st_size
    nz = len(p.read_bytes().rstrip(b"\0"))
    n = rng.choice([0, 1, rng.randrange(max(1, nz + 1)), max(0, size - 1), size // 2])
    os.truncate(p, n)
    return f"truncate {p.relative_to(root)} to {n}"


def d_rename(root: Path, rng: random.Random) -> str:
    sub = rng.choice(["commitlog", "consumequeue", "index"])
    files = _files(root, sub)
    if not files:
        return "rename: nothing"
    p = rng.choice(files)
    name = p.name
    if sub == "index":
        new = rng.choice(
            [
                "20261399999999999",
                "99999999999999999",
                "20261121240000000",
                "1",
                name[:-1],
                name + "0",
                "20991231235959999",
                "00000000000000000",
            ]
        )
    else:
        v = int(name) if name.isdigit() else 0
        size = p.stat().st_size or 1
        new = rng.choice(
            [
                f"{v + size:020d}",
                f"{v + 2 * size:020d}",
                f"{max(0, v - size):020d}",
                str(v),
                f"{v + 1:020d}",
                f"{v:019d}",
                "x" + name,
                f"{(1 << 63) - 1:020d}",
            ]
        )
    dst = p.with_name(new)
    if dst.exists() or dst == p:
        return "rename: taken"
    p.rename(dst)
    return f"rename {p.relative_to(root)} -> {new}"


def d_stray(root: Path, rng: random.Random) -> str:
    dirs = [root, root / "commitlog", root / "index", root / "config"] + _real_dirs(root / "consumequeue")[1:]
    dirs = [d for d in dirs if d.is_dir() and not d.is_symlink() and _in_store(root, d / "x")]
    d = rng.choice(dirs)
    name = rng.choice(
        ["00000000000000000001", "stray", ".hidden", "12", "00000000000000065536.tmp", "abort", "x" * 200]
    )
    p = d / name
    if os.path.lexists(p):
        return "stray: taken"
    if rng.random() < 0.2:
        p.mkdir()
    else:
        p.write_bytes(rng.randbytes(rng.choice([0, 1, 20, 4096])))
    return f"stray {p.relative_to(root)}"


def _victim(root: Path, rng: random.Random) -> Path:
    cands = [
        root / "checkpoint",
        root / "lock",
        root / "index",
        root / "commitlog",
        root / "config" / "delayOffset.json",
    ]
    cands += [d for d in _real_dirs(root / "consumequeue") if len(d.relative_to(root).parts) == 3]
    cands += _files(root, "index")[-1:] + _files(root, "commitlog")[-1:] + _files(root, "consumequeue")[:1]
    return rng.choice([c for c in cands if os.path.lexists(c) and _in_store(root, c)] or [root / "checkpoint"])


def _remove(p: Path) -> None:
    if p.is_symlink() or not p.is_dir():
        if os.path.lexists(p):
            p.unlink()
    else:
        shutil.rmtree(p)


def d_fifo(root: Path, rng: random.Random) -> str:
    p = _victim(root, rng)
    _remove(p)
    os.mkfifo(p)
    return f"fifo {p.relative_to(root)}"


def d_symlink(root: Path, rng: random.Random) -> str:
    p = _victim(root, rng)
    how = rng.choice(["dangling", "loop", "devzero", "outside", "inside"])
    keep = None
    if how == "inside" and os.path.lexists(p):
        keep = p.with_name(p.name + ".real")
        p.rename(keep)
    else:
        _remove(p)
    if how == "dangling":
        p.symlink_to(root / "nowhere" / "at-all")
    elif how == "loop":
        other = p.with_name(p.name + ".loop")
        p.symlink_to(other)
        other.symlink_to(p)
    elif how == "devzero":
        p.symlink_to("/dev/zero")
    elif how == "outside":
        p.symlink_to("/etc/hostname" if rng.random() < 0.5 else "/tmp")
    else:
        p.symlink_to(keep.name if keep else "nowhere")
    return f"symlink {how} {p.relative_to(root)}"


def d_sparse_huge(root: Path, rng: random.Random) -> str:
    cands = (
        [root / "checkpoint", root / "config" / "delayOffset.json"]
        + _files(root, "commitlog")[-1:]
        + _files(root, "consumequeue")[:1]
        + _files(root, "index")[-1:]
    )
    cands = [c for c in cands if c.is_file() and not c.is_symlink() and _in_store(root, c)]
    if not cands:
        return "sparse: nothing"
    p = rng.choice(cands)
    size = rng.choice([1 << 30, 64 << 30])
    os.truncate(p, size)
    return f"sparse {p.relative_to(root)} to {size}"


def d_nul_topic(root: Path, rng: random.Random) -> str:
    files = _readable(_files(root, "commitlog") + _files(root, "dledger-n0/data"))
    if not files:
        return "nul: none"
    p = rng.choice(files)
    starts = _record_starts(p)
    if not starts:
        return "nul: no record"
    pos = rng.choice(starts)
    b = bytearray(p.read_bytes())
    (bl,) = struct.unpack_from(">i", b, pos + 84)
    t = pos + 88 + bl
    if t >= len(b):
        return "nul: short"
    tl = b[t]
    what = rng.choice([b"\0", b"/", b"."])
    n = min(tl, rng.choice([1, 2, 20]))
    b[t + 1 : t + 1 + n] = what * n
    p.write_bytes(bytes(b))
    return f"topic bytes {what!r}x{n} {p.relative_to(root)}@{pos}"


def d_config(root: Path, rng: random.Random) -> str:
    if (root / "config").is_symlink() or (os.path.lexists(root / "config") and not (root / "config").is_dir()):
        _remove(root / "config")
    (root / "config").mkdir(exist_ok=True)
    p = (
        root
        / "config"
        / rng.choice(["delayOffset.json", "topics.json", "consumerOffset.json", "subscriptionGroup.json"])
    )
    if os.path.lexists(p) and (p.is_symlink() or not p.is_file()):
        _remove(p)  # (writing into a FIFO an earlier damage put there would block the harness)
    kind = rng.choice(["digits", "deep", "garbage", "float", "empty"])
    if kind == "digits":
        text = '{"offsetTable":{1:' + "9" * rng.choice([5000, 20, 400, 100000]) + "}}"
    elif kind == "deep":
        text = "[" * 100000 + "]" * 100000
    elif kind == "garbage":
        text = rng.randbytes(200).decode("latin-1")
    elif kind == "float":
        text = '{"a": 1' + "0" * 5000 + ".5e99999}"
    else:
        text = ""
    p.write_text(text, encoding="utf-8")
    return f"config {kind} {p.name}"


def d_unwritable(root: Path, rng: random.Random) -> str:
    """chmod 555 a directory (a root run ignores it: the soak runs it as nobody when it can)."""
    dirs = [root / "index", root / "commitlog"] + [
        d for d in _real_dirs(root / "consumequeue") if len(d.relative_to(root).parts) == 3
    ]
    dirs = [d for d in dirs if d.is_dir() and not d.is_symlink() and _in_store(root, d)]
    if not dirs:
        return "unwritable: none"
    d = rng.choice(dirs)
    d.chmod(0o555)
    return f"unwritable {d.relative_to(root)}"


def d_remove(root: Path, rng: random.Random) -> str:
    p = rng.choice(
        [root / "index", root / "commitlog", root / "checkpoint", root / "lock", root / "consumequeue"]
        + _files(root, "index")
        + _files(root, "commitlog")[:1]
    )
    if not os.path.lexists(p):
        return "remove: nothing"
    _remove(p)
    return f"remove {p.relative_to(root)}"


def _mapped_size(files: list[Path]) -> int:
    """The most common size of ``files`` (the mapped file size), 65536 when none."""
    sizes = [p.stat().st_size for p in files if 0 < p.stat().st_size <= DAMAGE_READ_LIMIT]
    return max(set(sizes), key=sizes.count) if sizes else 65536


def d_far_name(root: Path, rng: random.Random) -> str:
    """A stray file named far past the others (issue 33 R1: commitlog/00000000006553534464
    of one byte made repair plan 99,991 files): in commitlog/ or a queue directory, one
    byte, one unit or a sparse file of the mapped size."""
    sub = rng.choice(["commitlog", "commitlog", "consumequeue"])
    d = root / "commitlog"
    if sub == "consumequeue":
        qdirs = [x for x in _real_dirs(root / "consumequeue") if len(x.relative_to(root).parts) == 3]
        if not qdirs:
            return "far name: no queue"
        d = rng.choice(qdirs)
    if not d.is_dir() or not _in_store(root, d / "x"):
        return "far name: no directory"
    files = [p for p in _files(root, str(d.relative_to(root))) if p.parent == d]
    size = _mapped_size(files)
    last = max((int(p.name) for p in files if p.name.isdigit()), default=0)
    off = rng.choice([6553534464, 6553600, last + 2 * size, last + 100 * size, last + 100000 * size, 1 << 50])
    p = d / f"{off - off % size if rng.random() < 0.7 else off:020d}"
    if os.path.lexists(p):
        return "far name: taken"
    what = rng.choice(["byte", "unit", "sparse"])
    if what == "byte":
        p.write_bytes(b"\x01")
    elif what == "unit":
        p.write_bytes(struct.pack(">qiq", last, 100, 0))
    else:
        p.write_bytes(b"")
        os.truncate(p, size)
    return f"far name {what} {p.relative_to(root)}"


def d_garbled_topic(root: Path, rng: random.Random) -> str:
    """One character of a record's topic changed (issue 33 R3: TopicA to Top/cA): the body
    CRC does not cover the topic, so the record still reads intact, of another topic (or of
    a name no queue directory can have)."""
    files = _readable(_files(root, "commitlog"))
    if not files:
        return "garbled: no commitlog"
    p = rng.choice(files)
    starts = _record_starts(p)
    if not starts:
        return "garbled: no record"
    pos = rng.choice(starts)
    b = bytearray(p.read_bytes())
    (bl,) = struct.unpack_from(">i", b, pos + 84)
    t = pos + 88 + bl
    if bl < 0 or t >= len(b) or b[t] == 0 or t + b[t] >= len(b):
        return "garbled: short"
    i = t + 1 + rng.randrange(b[t])
    new = rng.choice([c for c in b"/abcxyzABCXYZ019_-%" if c != b[i]])
    b[i] = new
    p.write_bytes(bytes(b))
    return f"garbled topic {p.relative_to(root)}@{pos} byte {i - t - 1} -> {chr(new)!r}"


def d_wrong_size(root: Path, rng: random.Random) -> str:
    """A file a few bytes off its mapped size (issue 33 R4: a commitlog file cut to 65535
    or extended to 65537 bytes), mostly a middle commitlog file."""
    sub = rng.choice(["commitlog", "commitlog", "commitlog", "consumequeue", "index"])
    files = _readable(_files(root, sub))
    if not files:
        return "wrong size: no file"
    size = _mapped_size(files)
    p = rng.choice(files[1:-1] if len(files) > 2 and rng.random() < 0.7 else files)
    unit = 20 if sub == "consumequeue" else 1
    new = max(0, rng.choice([size - unit, size + unit, size - 8, size + 4096, size // 2 + 3, 2 * size]))
    os.truncate(p, new)
    return f"wrong size {p.relative_to(root)} to {new}"


def d_sparse_middle(root: Path, rng: random.Random) -> str:
    """A middle commitlog or consume queue file sparse-extended to 1 or 64 GiB (issue 33 R8:
    every command under the address-space limit works or refuses with one line)."""
    cands = _files(root, "commitlog")[1:-1] or _files(root, "commitlog")
    qfiles = [p for p in _files(root, "consumequeue")]
    cands += qfiles[1:2]
    cands = [c for c in cands if c.is_file() and not c.is_symlink() and _in_store(root, c)]
    if not cands:
        return "sparse middle: nothing"
    p = rng.choice(cands)
    size = rng.choice([1 << 30, 64 << 30])
    os.truncate(p, size)
    return f"sparse middle {p.relative_to(root)} to {size}"


KINDS: dict[str, Callable[[Path, random.Random], str]] = {
    "bitflip": d_bitflip,
    "absurd_length": d_absurd_length,
    "zero_range": d_zero_range,
    "truncate": d_truncate,
    "rename": d_rename,
    "stray": d_stray,
    "fifo": d_fifo,
    "symlink": d_symlink,
    "sparse_huge": d_sparse_huge,
    "nul_topic": d_nul_topic,
    "config": d_config,
    "unwritable": d_unwritable,
    "remove": d_remove,
    "far_name": d_far_name,
    "garbled_topic": d_garbled_topic,
    "wrong_size": d_wrong_size,
    "sparse_middle": d_sparse_middle,
}
# kinds that could hang or exhaust memory if mishandled: their commands run in a child
# process under a time limit and an address-space limit
GUARDED = {"fifo", "symlink", "sparse_huge", "sparse_middle"}


# DLedger stores (issue 37): a share of the seeds damage a DLedger twin of the fixture
# (tests/dlstore.py: the fixture's messages as a lone DLedger member writes them, its
# consume queues at the moved offsets; mixed now and then), half of them with a DLedger
# damage first (in place: the member's 160 MiB index file stays sparse)
DLEDGER_SHARE = 0.25
DLEDGER_TWIN = " (DLedger twin)"  # (make_store's fixture name for a DLedger twin of a fixture)


def make_dledger(src: Path, root: Path, rng: random.Random) -> str:
    from dlstore import dledger_twin

    from rmqtool.recovery.versions import BrokerProfile

    n_files = len(list((src / "commitlog").iterdir()))
    classic = rng.randint(1, n_files - 1) if n_files > 1 and rng.random() < 0.3 else 0
    twin = dledger_twin(src, root, BrokerProfile.for_version("4.9.4"), classic_files=classic, queues=True)
    desc = f"DLedger twin ({len(twin.entries)} entries" + (f", {classic} classic files first)" if classic else ")")
    if rng.random() < 0.5:
        desc += "; " + d_dledger(root, rng)
    return desc


def d_dledger(root: Path, rng: random.Random) -> str:
    """A DLedger damage, in place: an entry header's bytes, an index unit, the checkpoint's
    committedIndex, currterm or the checkpoint removed, an index file removed."""
    member = root / "dledger-n0"
    what = rng.choice(["entry", "unit", "committed", "rm_currterm", "rm_checkpoint", "rm_index"])
    data = _files(root, "dledger-n0/data")
    if what == "entry" and data:
        p = rng.choice(data)
        starts = []
        with open(p, "r+b") as f:
            buf = f.read(DAMAGE_READ_LIMIT)
            pos = 0
            while pos + 48 <= len(buf):
                magic, size = struct.unpack_from(">ii", buf, pos)
                if magic != 1 or size <= 48:
                    break
                starts.append(pos)
                pos += size
            if not starts:
                return "dledger entry: none"
            at = rng.choice(starts) + rng.randrange(48)
            value = rng.choice([b"\xff", b"\x00", b"\x7f", bytes([rng.randrange(256)])])
            f.seek(at)
            f.write(value)
        return f"dledger entry header byte {p.name}@{at} := {value.hex()}"
    if what == "unit" and (member / "index").is_dir():
        idx = _files(root, "dledger-n0/index")
        if idx:
            with open(idx[0], "r+b") as f:
                at = 32 * rng.randrange(64) + rng.randrange(32)
                f.seek(at)
                f.write(bytes([rng.randrange(256)]))
            return f"dledger index byte @{at}"
    if what == "committed" and (member / "checkpoint").is_file():
        value = rng.choice(["-1", "0", "x", "99999999", "", "9223372036854775808"])
        (member / "checkpoint").write_text(f"endIndex=0\ncommittedIndex={value}\n")
        return f"dledger committedIndex={value!r}"
    if what == "rm_currterm" and (member / "currterm").is_file():
        (member / "currterm").unlink()
        return "rm dledger currterm"
    if what == "rm_checkpoint" and (member / "checkpoint").is_file():
        (member / "checkpoint").unlink()
        return "rm dledger checkpoint"
    if what == "rm_index":
        idx = _files(root, "dledger-n0/index")
        if idx:
            idx[0].unlink()
            return "rm dledger index file"
    return f"dledger {what}: nothing"


def make_store(dest: Path, seed: int, kind: str | None = None) -> tuple[Path, str, str]:
    """A damaged copy under ``dest``: (store root, damage kind, description)."""
    rng = random.Random(seed)
    fixture = rng.choice(FIXTURES)
    kind = kind or rng.choice(sorted(KINDS))
    root = dest / "store"
    dl_rng = random.Random(f"dledger:{seed}")  # (its own stream: the classic seeds' stores stay as they were)
    descs = []
    if dl_rng.random() < DLEDGER_SHARE:
        descs.append(make_dledger(REAL / fixture / "store", root, dl_rng))
        fixture = f"{fixture}{DLEDGER_TWIN}"
    else:
        shutil.copytree(REAL / fixture / "store", root, symlinks=True)
    descs.append(KINDS[kind](root, rng))
    if rng.random() < 0.15:  # now and then a second damage of another kind
        k2 = rng.choice(sorted(set(KINDS) - GUARDED - {"unwritable"}))
        descs.append(KINDS[k2](root, rng))
    return root, kind, f"{fixture}: " + "; ".join(descs)


# --------------------------------------------------------------------------------------
# the tree digest (sparse-aware: a 64 GiB hole is not read)


def tree_digest(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "L:" + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"D:{mode:o}"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = f"F:{mode:o}:{st.st_size}:{_data_hash(p, st.st_size)}"
            else:
                out[rel] = f"S:{stat.S_IFMT(st.st_mode):o}:{mode:o}"
    return out


def tree_stat(root: Path) -> dict[str, tuple[int, ...]]:
    """Every entry's type, mode, size, mtime and inode: what a write changes, without
    reading the data (the read-only checks between commands; :func:`tree_digest` once
    after them all)."""
    out: dict[str, tuple[int, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def _data_hash(path: str, size: int) -> str:
    h = hashlib.sha1()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except PermissionError:
        return "unreadable"
    try:
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            start -= start % 4096
            while start < end:  # the non-zero 4 KiB pages with their offsets: holes and
                chunk = os.pread(fd, min(1 << 20, end - start), start)  # written zeros alike
                if not chunk:
                    break
                for i in range(0, len(chunk), 4096):
                    page = chunk[i : i + 4096]
                    if page.count(0) != len(page):
                        h.update(struct.pack(">q", start + i))
                        h.update(page)
                start += len(chunk)
            pos = end
    finally:
        os.close(fd)
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# running the commands


@dataclass
class Outcome:
    argv: tuple[str, ...]
    code: int
    err: str
    seconds: float
    hang: bool = False
    memory: bool = False


class _Timeout(BaseException):
    pass


def run_inprocess(argv: list[str], timeout: float) -> Outcome:
    """rmqtool.cli.run in this process (stdout dropped, stderr kept), under SIGALRM."""
    from rmqtool.cli import run

    def on_alarm(signum: int, frame: object) -> None:
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    err = io.StringIO()
    out = io.StringIO()
    t0 = time.perf_counter()
    hang = False
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(argv)
    except _Timeout:
        code, hang = -1, True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    text = err.getvalue()
    if "_Timeout" in text:  # run() reports whatever reaches it, the alarm's exception too
        code, hang = -1, True
    return Outcome(tuple(argv), code, text, time.perf_counter() - t0, hang=hang)


def limit_address_space(mem_bytes: int) -> None:
    """In a forked child: RLIMIT_AS ``mem_bytes`` above the address space the child starts
    with (a copy of the parent's, which holds whatever the test process loaded before, a
    JVM gateway or pyarrow's reservations in a full run), so the limit bounds what the
    command itself allocates."""
    import resource

    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            have = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        have = 0
    resource.setrlimit(resource.RLIMIT_AS, (have + mem_bytes, have + mem_bytes))


def run_forked(argv: list[str], timeout: float, mem_bytes: int, user: str | None = None) -> Outcome:
    """rmqtool.cli.run in a forked child (no exec: the interpreter need not be reachable
    for ``user``), which first drops to ``user`` (setgid/setuid) and sets RLIMIT_AS."""
    import importlib
    import pkgutil

    import rmqtool
    from rmqtool.cli import COMMANDS

    # every module imported before the fork: the child (another user) may not read the tree
    names = list(COMMANDS.values()) + [m.name for m in pkgutil.walk_packages(rmqtool.__path__, "rmqtool.")]
    for mod in names:
        if "export" not in mod and "spark" not in mod and mod != "rmqtool.__main__":
            importlib.import_module(mod)
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 99
        try:
            os.close(r)
            os.dup2(w, 2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            if mem_bytes:
                limit_address_space(mem_bytes)
            if user is not None:
                import pwd

                pw = pwd.getpwnam(user)
                os.setgroups([])
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
            from rmqtool.cli import run

            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 (the child's stdout)
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            code = run(argv)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    hang = False
    import select

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            hang = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    err = b"".join(chunks).decode("utf-8", "replace")
    code = -1 if hang else (os.waitstatus_to_exitcode(status))
    memory = "out of memory" in err or "MemoryError" in err or code in (-signal.SIGKILL, -signal.SIGSEGV)
    return Outcome(tuple(argv), code, err, time.perf_counter() - t0, hang=hang, memory=memory and not hang)


def run_child(argv: list[str], timeout: float, mem_bytes: int, user: str | None = None) -> Outcome:
    """``python -m rmqtool`` in a child process under RLIMIT_AS and a timeout (as ``user``:
    a forked child, :func:`run_forked`)."""
    if user is not None:
        return run_forked(argv, timeout, mem_bytes, user)

    def limits() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        if user is not None:
            import pwd

            pw = pwd.getpwnam(user)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)

    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen(
        [sys.executable, "-m", "rmqtool", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limits,
        env=env,
        start_new_session=True,
    )
    try:
        _, err_b = p.communicate(timeout=timeout)
        hang = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err_b = p.communicate()
        hang = True
    err = err_b.decode("utf-8", "replace")
    code = -1 if hang else p.returncode
    memory = "out of memory" in err or "MemoryError" in err or code in (-signal.SIGKILL, -signal.SIGSEGV)
    return Outcome(tuple(argv), code, err, time.perf_counter() - t0, hang=hang, memory=memory and not hang)


@dataclass
class StoreResult:
    kind: str
    desc: str
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (command, category, detail)
    runs: int = 0


def _cmd_name(argv: tuple[str, ...]) -> str:
    if "--format" in argv:  # (the names of the soak records: without the format asked for)
        i = argv.index("--format")
        argv = argv[:i] + argv[i + 2 :]
    return " ".join(a for a in argv[:3] if not a.startswith("/"))


def debris(root: Path) -> list[str]:
    """What a command left beside the store or in it that no command should leave once it
    has ended: a work directory ``.STORE.rmqtool-*`` beside the store (repair's), a
    transaction journal in it (issue 33: "no debris")."""
    out = []
    with contextlib.suppress(OSError):
        out += [p.name for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.rmqtool-")]
    j = root / ".rmqtool-journal"
    if j.is_dir() and not j.is_symlink():
        with contextlib.suppress(OSError):
            out += [f".rmqtool-journal/{p.name}" for p in j.iterdir()]
    return sorted(out)


def dry_run_disagrees(dry: int, real: int) -> bool:
    """Whether a dry run's status and the real run's on the same store disagree: a dry run
    that finds nothing to do (0) before a real run that changes or reports something, a
    dry run that promises a change (4) before a real run that finds nothing (0), or a
    refusal (8) by one of them only."""
    return (dry == 0 and real != 0) or (dry == 4 and real == 0) or ((dry == 8) != (real == 8))


def run_store(
    dest: Path,
    seed: int,
    kind: str | None = None,
    *,
    timeout: float = 60.0,
    mem_bytes: int = 2 << 30,
    child: bool | None = None,
    user: str | None = None,
    keep: Path | None = None,
    keep_max: int = 10,
) -> StoreResult:
    """Make one damaged store under ``dest`` and run every command on it, checking the
    rules of issues 23 and 33. ``child``: run the commands in child processes (default:
    only for the kinds in GUARDED). ``keep``: a directory where the store ``repair``
    leaves is copied (``keep/SEED/store``, with the intact records of the damaged input in
    ``intact.json`` and its fixture in ``meta.json``) while it holds fewer than
    ``keep_max`` such copies, for the broker to open (:func:`broker_sample`)."""
    root, kind, desc = make_store(dest, seed, kind)
    res = StoreResult(kind, desc)
    use_child = (kind in GUARDED) if child is None else child

    def cmd(*argv: str) -> Outcome:
        full = [argv[0], *argv[1:]]
        res.runs += 1
        o = run_child(full, timeout, mem_bytes, user) if use_child else run_inprocess(full, timeout)
        name = _cmd_name(tuple(a for a in argv if a != str(root)))
        top = argv[0]
        if o.hang:
            res.failures.append((name, "hang", f"{o.seconds:.0f} s"))
        elif o.memory:
            res.failures.append((name, "memory", o.err.strip()[-200:]))
        elif "internal error" in o.err or "Traceback" in o.err:
            res.failures.append((name, "internal error", o.err.strip()[-300:]))
        elif o.code not in EXITS[top] and not (o.code == 2 and "auto" in argv and AUTO_REFUSAL in o.err):
            res.failures.append((name, "exit code", f"{o.code}: {o.err.strip()[-200:]}"))
        elif o.err.count("\n") > 40:
            res.failures.append((name, "noisy stderr", o.err[:200]))
        left = debris(root)
        if left:
            res.failures.append((name, "debris", ", ".join(left[:4])))
        return o

    h0 = tree_digest(root)
    s0 = tree_stat(root)
    dry: dict[tuple[str, ...], int] = {}
    for ro in READ_ONLY:
        argv = [*ro[:2], str(root), *ro[2:]] if ro[0] == "dump" else [ro[0], str(root), *ro[1:]]
        if ro[0] in FORMATS:
            argv += ["--format", FORMATS[ro[0]]]
        dry[ro] = cmd(*argv).code
        if tree_stat(root) != s0:  # (cheap: names, types, sizes, mtimes; the bytes below)
            res.failures.append((_cmd_name(tuple(ro)), "read-only wrote", _diff(h0, tree_digest(root))))
            return res
    if tree_digest(root) != h0:
        res.failures.append(("a read-only command", "read-only wrote", _diff(h0, tree_digest(root))))
        return res
    b1, b2 = dest / "backup-recover", dest / "backup-rebuild"
    o1 = cmd("recover", "--yes", str(root), "--backup-dir", str(b1))
    h1 = tree_digest(root)
    if dry_run_disagrees(dry[("recover", "--dry-run")], o1.code):
        res.failures.append(
            ("recover", "dry run disagrees", f"--dry-run exit {dry[('recover', '--dry-run')]}, --yes exit {o1.code}")
        )
    o2 = cmd("recover", "--yes", str(root), "--backup-dir", str(dest / "backup-recover2"))
    h2 = tree_digest(root)
    if h2 != h1 or (o1.code in (0, 1, 4, 5) and o2.code in (1, 5)):
        res.failures.append(
            ("recover", "not idempotent", f"run 1 exit {o1.code}, run 2 exit {o2.code}; {_diff(h1, h2)}")
        )
    elif o1.code == 8 and o2.code != 8:
        res.failures.append(("recover", "not idempotent", f"run 1 refused, run 2 exit {o2.code}"))
    if o1.code == 8 and h1 != h0:
        res.failures.append(("recover", "refusal changed the store", _diff(h0, h1)))
    cmd("rebuild-index", "--yes", str(root), "--backup-dir", str(b2))
    b3 = dest / "backup-repair"
    res.failures += repair_as_planned(root, lambda *a: cmd(*a), b3)
    # restore, newest backup first, gives the damaged input back byte for byte
    for b in (b3, b2, dest / "backup-recover2", b1):
        _restore(cmd, res, b, root, dest)
    if tree_digest(root) != h0:
        res.failures.append(("restore", "not byte for byte", _diff(h0, tree_digest(root))))
        return res
    _repair_phase(cmd, res, root, dest, seed, dry, kind, keep, keep_max)
    if tree_digest(root) != h0:
        res.failures.append(("restore", "not byte for byte", "after repair: " + _diff(h0, tree_digest(root))))
    return res


def _restore(cmd: Callable[..., Outcome], res: StoreResult, b: Path, root: Path, dest: Path) -> None:
    if (b / "manifest.json").exists():
        o = cmd("restore", "--yes", str(b), str(root), "--backup-dir", str(dest / f"restore-of-{b.name}"))
        if o.code not in (0, 1):
            res.failures.append(("restore", "blocked restore", f"{b.name}: exit {o.code}: {o.err.strip()[-200:]}"))


def _repair_phase(
    cmd: Callable[..., Outcome],
    res: StoreResult,
    root: Path,
    dest: Path,
    seed: int,
    dry: dict[tuple[str, ...], int],
    kind: str,
    keep: Path | None,
    keep_max: int,
) -> None:
    """``repair`` on the damaged input itself (:func:`repair_as_planned`: its plan, then
    ``verify`` and ``recover --dry-run`` on what it leaves; issue 33), its backup giving
    the input back; a store it repaired without a failure is kept for the broker sample."""
    intact = None
    if keep is not None and kind not in GUARDED and _kept(keep) < keep_max:
        try:
            from intact import intact_records  # (tests/intact.py)

            from rmqtool.recovery.versions import BrokerProfile

            intact = intact_records(root, BrokerProfile.for_version("4.9.4"))
        except Exception:  # noqa: BLE001 - a store the scan cannot take whole: not sampled
            intact = None
    b5 = dest / "backup-repair-input"
    codes: dict[str, int] = {}
    quarantined: list[dict] = []
    regions: list[dict] = []
    failures = repair_as_planned(root, cmd, b5, dry.get(("repair", "--dry-run")), codes, quarantined, regions)
    res.failures += failures
    if not failures and codes.get("repair") == 1 and intact is not None and keep is not None:
        # (changed, nothing left)
        _keep_repaired(root, keep / str(seed), _as_repaired(intact, quarantined, regions), res.desc)
    _restore(cmd, res, b5, root, dest)


def _as_repaired(intact: list[dict], quarantined: list[dict], regions: list[dict] | None = None) -> list[dict]:
    """The intact records as the broker must see them after the repair: a record the plan
    quarantines whole (a garbled topic or queue id: man rmqtool-repair) is, at its offset,
    the tombstone of the queue offset it was written to (its bytes in quarantine records),
    so the broker must see that tombstone with a consistent unit of that queue; one it
    quarantines without a tombstone is left out. A record whose QUEUEOFFSET the plan writes
    back (a ``header field`` region: the body CRC does not cover it, so the scan calls the
    record intact with the damaged value) must be seen at the queue offset its queue's
    other records give it, not at the one the damage wrote (soak seed 2000211); the
    harness works it out itself, and the broker judges the value repair wrote."""
    by_off = {q["offset"]: q for q in quarantined if q.get("offset") is not None}
    rewritten = {
        x["from"] - 20 for x in regions or [] if x.get("kind") == "header field" and x.get("field") == "QUEUEOFFSET"
    }
    implied = _implied_queue_offsets(intact, rewritten)
    out = []
    for r in intact:
        q = by_off.get(r["off"])
        if r["off"] in implied:
            r = dict(r, qoff=implied[r["off"]])
        if q is None:
            out.append(r)
        elif q.get("tombstone"):
            out.append(
                {
                    "off": r["off"],
                    "tombstone": True,
                    "topic": q["topic"],
                    "qid": q["queue_id"],
                    "qoff": q["queue_offset"],
                }
            )
    return out


def _implied_queue_offsets(intact: list[dict], offs: set[int]) -> dict[int, int]:
    """For each record at ``offs``: the queue offset its queue's other intact records give
    it (the previous one's plus the records between, else the next one's less them, else 0)."""
    if not offs:
        return {}
    queues: dict[tuple[str, int], list[dict]] = {}
    for r in intact:
        if r.get("queued", True):
            queues.setdefault((r["topic"], r["qid"]), []).append(r)
    out: dict[int, int] = {}
    for recs in queues.values():
        recs.sort(key=lambda r: r["off"])
        known = [(i, r["qoff"]) for i, r in enumerate(recs) if r["off"] not in offs]
        for i, r in enumerate(recs):
            if r["off"] not in offs:
                continue
            before = [(j, q) for j, q in known if j < i]
            after = [(j, q) for j, q in known if j > i]
            if before:
                out[r["off"]] = before[-1][1] + (i - before[-1][0])
            elif after:
                out[r["off"]] = after[0][1] - (after[0][0] - i)
            else:
                out[r["off"]] = 0
    return out


def _kept(keep: Path) -> int:
    try:
        return sum(1 for p in keep.iterdir() if (p / "meta.json").exists())
    except OSError:
        return 0


def _keep_repaired(root: Path, to: Path, intact: list[dict], desc: str) -> None:
    if to.exists():
        return
    to.mkdir(parents=True)
    copy_tree_holes_kept(root, to / "store")
    (to / "intact.json").write_text(json.dumps(intact), encoding="utf-8")
    (to / "meta.json").write_text(json.dumps({"fixture": desc.split(":", 1)[0], "desc": desc}), encoding="utf-8")


def broker_sample(kept: list[Path], version: str = "4.9.4") -> list[tuple[str, str, str]]:
    """The broker (the oracle harness, one batch JVM) opens each repaired store ``kept``
    holds (:func:`run_store`'s ``keep``) and must see every intact record of the damaged
    input at its offset, and each one that goes to a queue with a unit of its queue
    pointing at it (consistent where the record's own QUEUEOFFSET is the unit's). Returns
    the failures: (seed, category, detail)."""
    from rmqtool.formats.names import topic_path_problem

    h = _oracle_harness()
    jobs = []
    for d in kept:
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        jobs.append(
            {"id": d.name, "verb": "view", "store": str(d / "store"), "config": fixture_config(meta["fixture"])}
        )
    if not jobs:
        return []
    out: list[tuple[str, str, str]] = []
    for d, ans in zip(kept, h.batch(version, jobs)):
        if ans.get("exit") != 0 or not ans["result"].get("load_ok"):
            out.append((d.name, "broker refuses repaired", str(ans.get("error") or "load_ok false")[:200]))
            continue
        view = ans["result"]
        recs = {r["phys_offset"]: r for r in view["commitlog_records"] if r.get("topic") is not None}
        units: dict[tuple[str, int], list[dict]] = {}
        for k, q in view["consume_queues"].items():
            for e in q["entries"]:
                units.setdefault((k, e["phys_offset"]), []).append(e)
        lost = []
        for r in json.loads((d / "intact.json").read_text(encoding="utf-8")):
            got = recs.get(r["off"])
            if r.get("tombstone"):  # (the tombstone of its queue offset: _as_repaired)
                if got is None or (got["topic"], got["queue_id"], got["queue_offset"]) != (
                    r["topic"],
                    r["qid"],
                    r["qoff"],
                ):
                    lost.append(f"tombstone {r['off']}")
                    continue
            elif got is None or (
                got["size"],
                got["topic"],
                got["queue_id"],
                got["queue_offset"],
                got["body_crc_ok"],
            ) != (
                r["size"],
                r["topic"],
                r["qid"],
                r["qoff"],
                True,
            ):
                undecodable = got is not None and got.get("decodable") is False
                lost.append(
                    f"record {r['off']}" + (" (the broker's MessageDecoder cannot decode it)" if undecodable else "")
                )
                continue
            if not r.get("queued", True) or topic_path_problem(r["topic"]) is not None:
                continue
            es = units.get((f"{r['topic']}/{r['qid']}", r["off"]), [])
            if not es or any(e["cq_offset"] == r["qoff"] and not e["consistent"] for e in es):
                lost.append(f"unit of {r['off']} ({r['topic']}/{r['qid']} offset {r['qoff']})")
        if lost:
            out.append((d.name, "broker lost intact", f"{len(lost)}: " + ", ".join(lost[:4])))
    return out


# --------------------------------------------------------------------------------------
# repair: the dry run's plan against the real run, and what verify says afterwards


def page_map(root: Path) -> dict[str, tuple[int, dict[int, str]]]:
    """Every regular file under ``root``: (size, {offset of a non-zero 4 KiB page: its
    sha1}); holes and zero pages are left out (a 64 GiB hole is not read)."""
    out: dict[str, tuple[int, dict[int, str]]] = {}
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                continue
            pages: dict[int, str] = {}
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                pos = 0
                while pos < st.st_size:
                    try:
                        start = os.lseek(fd, pos, os.SEEK_DATA)
                    except OSError:
                        break
                    end = os.lseek(fd, start, os.SEEK_HOLE)
                    start -= start % 4096
                    while start < end:
                        chunk = os.pread(fd, min(1 << 20, end - start), start)
                        if not chunk:
                            break
                        for i in range(0, len(chunk), 4096):
                            page = chunk[i : i + 4096]
                            if page.count(0) != len(page):
                                pages[start + i] = hashlib.sha1(page).hexdigest()
                        start += len(chunk)
                    pos = end
            finally:
                os.close(fd)
            out[os.path.relpath(p, root)] = (st.st_size, pages)
    return out


def plan_mismatch(writes: list[dict], before: dict, after: dict) -> str | None:
    """How the files and byte ranges a repair dry run planned (its JSON ``writes``)
    differ from those the real run changed (page maps before and after), or None: every
    changed file planned and every planned file changed, each changed 4 KiB page inside a
    planned range (or past a planned cut), each planned range changing something."""
    planned = {w["path"]: w for w in writes}
    changed = {rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel)}
    if set(planned) != changed:
        return f"planned but unchanged: {sorted(set(planned) - changed)[:3]}; changed but not planned: {sorted(changed - set(planned))[:3]}"
    for rel, w in sorted(planned.items()):
        act = w["action"]
        if (act == "remove") != (rel not in after) or (act == "create") != (rel not in before):
            return f"{rel}: planned {act}, the file is {'gone' if rel not in after else 'there'}"
        if act != "write":
            continue
        (s0, p0), (s1, p1) = before[rel], after[rel]
        pages = {o for o in set(p0) | set(p1) if p0.get(o) != p1.get(o)}
        ranges, cut = w["ranges"], w["cut_at"]

        def inside(o: int, ranges: list = ranges, cut: int | None = cut) -> bool:
            return any(a < o + 4096 and o < b for a, b in ranges) or (cut is not None and o + 4096 > cut)

        if cut is not None and s1 != cut:
            return f"{rel}: planned a cut at {cut}, the file has {s1} bytes"
        stray = sorted(o for o in pages if not inside(o))
        if stray:
            return f"{rel}: bytes changed outside the planned ranges {ranges[:3]}: pages at {stray[:3]}"
        for a, b in ranges:
            if not any(a < o + 4096 and o < b for o in pages) and not (s0 != s1 and b > min(s0, s1)):
                return f"{rel}: planned bytes [{a}, {b}) unchanged"
    return None


def repair_as_planned(
    root: Path,
    cmd: Callable[..., Outcome],
    backup: Path,
    dry_status: int | None = None,
    codes: dict[str, int] | None = None,
    quarantined: list[dict] | None = None,
    regions: list[dict] | None = None,
) -> list[tuple[str, str, str]]:
    """``repair --dry-run`` then ``repair --yes``: the dry run's JSON plan lists exactly the
    files and byte ranges the real run changes (and ``dry_status``, a dry run's status on
    the same store, agrees with the real run's); afterwards verify reports no error but
    those repair leaves (recovery.repair.LEAVES_UNCHANGED), repair's status has bit 4
    whenever verify reports one, and recover --dry-run finds nothing to do (a problem only
    where repair's status says one is left). ``codes``: gets the real run's status
    (``repair``); ``quarantined``: gets the plan's quarantined records; ``regions``: its
    regions."""
    import tempfile

    from rmqtool.recovery.repair import LEAVES_UNCHANGED

    failures: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rmqtool-fuzz-plan-") as td:
        plan_out, verify_out = Path(td) / "plan.json", Path(td) / "verify.json"
        dry = cmd("repair", "--dry-run", str(root), "--format", "json", "--output", str(plan_out))
        before = page_map(root)
        real = cmd("repair", "--yes", str(root), "--backup-dir", str(backup))
        if codes is not None:
            codes["repair"] = real.code
        if dry_status is not None and dry_run_disagrees(dry_status, real.code):
            failures.append(("repair", "dry run disagrees", f"--dry-run exit {dry_status}, --yes exit {real.code}"))
        if dry.code not in (0, 4) or real.code not in (0, 1, 4, 5):
            return failures  # (refused, or failed: reported by cmd)
        try:
            plan = json.loads(plan_out.read_text(encoding="utf-8"))["plan"]
        except (OSError, ValueError, KeyError) as exc:
            return [("repair --dry-run", "no JSON plan", str(exc)[:200])]
        if quarantined is not None:
            quarantined += plan.get("quarantined", [])
        if regions is not None:
            regions += plan.get("regions", [])
        bad = plan_mismatch(plan["writes"], before, page_map(root))
        if bad:
            failures.append(("repair", "dry run differs", bad))
        v = cmd("verify", str(root), "--format", "json", "--output", str(verify_out))
        if v.code not in (0, 4) or not verify_out.exists():
            return failures
        errors = {
            f["code"]
            for f in json.loads(verify_out.read_text(encoding="utf-8"))["findings"]
            if f["severity"] == "error"
        }
        blocked = any("overlap or are not multiples" in p for p in plan["problems"])
        if not blocked and errors - set(LEAVES_UNCHANGED):
            failures.append(
                ("repair", "left a finding", f"verify after repair: {sorted(errors - set(LEAVES_UNCHANGED))}")
            )
        # a store repair finished is one recover --dry-run calls sound (issue 33 R5): nothing
        # to do, and no problem unless repair's status says one is left
        rec_out = Path(td) / "recover.json"
        rec = cmd("recover", "--dry-run", str(root), "--format", "json", "--output", str(rec_out))
        try:
            todo = not json.loads(rec_out.read_text(encoding="utf-8"))["plan"]["summary"]["nothing_to_do"]
        except (OSError, ValueError, KeyError):
            todo = rec.code != 0
        if not blocked and (todo or (rec.code != 0 and not real.code & 4)):
            failures.append(
                (
                    "repair",
                    "recover disagrees",
                    f"recover --dry-run after repair (exit {real.code}): exit {rec.code}: {rec.err.strip()[-200:]}",
                )
            )
        if errors and not real.code & 4:
            failures.append(("repair", "exit status", f"repair exit {real.code}, verify afterwards: {sorted(errors)}"))
    return failures


def _diff(a: dict[str, str], b: dict[str, str]) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k, '-')[:24]} -> {b.get(k, '-')[:24]}" for k in keys[:4]) + (
        " ..." if len(keys) > 4 else ""
    )


def cleanup(dest: Path) -> None:
    for dirpath, dirnames, _ in os.walk(dest):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                with contextlib.suppress(OSError):
                    os.chmod(p, 0o755)
    shutil.rmtree(dest, ignore_errors=True)


def manifest_name() -> str:
    return json.dumps({"kinds": sorted(KINDS)})


_REC = 16  # one seed on the work pipe: a fixed-size record, so concurrent reads never split one


def _child_main(
    queue_fd: int,
    tmp: Path,
    out_path: Path,
    timeout: float,
    mem_bytes: int,
    fsync: bool = True,
    keep: Path | None = None,
    keep_max: int = 10,
) -> None:
    """A worker: takes seeds off the work pipe until it is empty; writes a ``start`` line
    before each store and its result after it (a worker that dies is reported for the
    seed it had started)."""
    if mem_bytes:
        limit_address_space(mem_bytes)
    if not fsync:  # the soak checks outcomes, not durability (the kill tests do): fsync is
        os.fsync = os.fdatasync = lambda fd: None  # a sixth of a store's time on a busy disk
    with open(out_path, "a", encoding="utf-8") as out:
        while True:
            rec = os.read(queue_fd, _REC)
            if len(rec) < _REC:
                return
            seed = int(rec)
            out.write(json.dumps({"start": seed}) + "\n")
            out.flush()
            d = tmp / f"s{seed}"
            d.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            try:
                r = run_store(d, seed, timeout=timeout, mem_bytes=mem_bytes, child=False, keep=keep, keep_max=keep_max)
                doc = {"seed": seed, "kind": r.kind, "desc": r.desc, "runs": r.runs, "failures": r.failures}
            except MemoryError:
                doc = {
                    "seed": seed,
                    "kind": "?",
                    "desc": "",
                    "runs": 0,
                    "failures": [("harness", "memory", "MemoryError")],
                }
            except Exception as exc:  # noqa: BLE001 - the harness's own failure, reported for its seed
                doc = {
                    "seed": seed,
                    "kind": "?",
                    "desc": "",
                    "runs": 0,
                    "failures": [("harness", "harness error", repr(exc)[:300])],
                }
            doc["seconds"] = round(time.perf_counter() - t0, 3)
            out.write(json.dumps(doc) + "\n")
            out.flush()
            cleanup(d)


def run_many(
    seeds: list[int],
    tmp: Path,
    jobs: int = 2,
    timeout: float = 60.0,
    mem_bytes: int = 2 << 30,
    fsync: bool = True,
    keep: Path | None = None,
    keep_max: int = 10,
) -> list[dict]:
    """Run :func:`run_store` for every seed in ``jobs`` forked workers, each under an
    address-space limit of ``mem_bytes`` (commands in-process, under SIGALRM timeouts),
    taking seeds off one work pipe (a slow store holds up one worker, not a share of the
    seeds). A worker that dies is reported for the seed it was on and replaced.
    ``keep``/``keep_max``: repaired stores kept for :func:`broker_sample` (see
    :func:`run_store`)."""
    step = 4000  # seeds a pipe holds (64 KiB) before any worker reads
    if len(seeds) > step:
        return [
            d
            for i in range(0, len(seeds), step)
            for d in run_many(seeds[i : i + step], tmp, jobs, timeout, mem_bytes, fsync, keep, keep_max)
        ]
    tmp.mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()
    os.write(w, b"".join(f"{s:>{_REC}d}".encode("ascii") for s in seeds))
    os.close(w)  # every seed queued: a worker reading an empty pipe is done
    n = len(list(tmp.glob("results-*.jsonl")))

    def spawn() -> tuple[int, Path]:
        nonlocal n
        out_path = tmp / f"results-{n}.jsonl"
        n += 1
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                _child_main(r, tmp / f"w{n}", out_path, timeout, mem_bytes, fsync, keep, keep_max)
            except BaseException:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                code = 3
            finally:
                os._exit(code)
        return pid, out_path

    workers = dict(spawn() for _ in range(max(1, min(jobs, len(seeds)))))
    results: list[dict] = []
    while workers:
        time.sleep(0.02)
        for pid in list(workers):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == 0:
                continue
            out_path = workers.pop(pid)
            started = None
            if out_path.exists():
                for line in out_path.read_text(encoding="utf-8").splitlines():
                    if not line.strip():
                        continue
                    doc = json.loads(line)
                    if "start" in doc:
                        started = doc["start"]
                    else:
                        results.append(doc)
                        started = None
            if started is not None:  # died on that store: report it, go on without it
                results.append(
                    {
                        "seed": started,
                        "kind": "?",
                        "desc": "",
                        "runs": 0,
                        "seconds": 0,
                        "failures": [("harness", "worker died", f"wait status {status}")],
                    }
                )
                npid, npath = spawn()
                workers[npid] = npath
    os.close(r)
    return results


# --------------------------------------------------------------------------------------
# recover twice against the broker started twice
#
# "recover twice = recover once" holds where the broker's own second start changes
# nothing. Where the broker itself is no fixed point, recover does what the broker does
# (fidelity), so a second run that changes the store again is checked against the broker
# started twice on the same damaged input (tests/oracle): every area recover's second run
# changes must be one the broker's second start changes as well.


def broker_not_a_fixed_point_q6(root: Path) -> None:
    """``delay`` with its only commitlog file renamed to the next file's name: the commitlog
    starts above every consume queue's max physical offset, so every start-up reput
    re-dispatches the whole file and re-indexes its last record (quirk Q6: its offset is the
    index file's endPhyOffset): three index entries more at each start, without end."""
    (root / "commitlog" / "00000000000000000000").rename(root / "commitlog" / "00000000000000065536")


def broker_not_a_fixed_point_cq_unit(root: Path) -> None:
    """``crash_midwrite`` with one bit flipped in a consume queue unit's commitlog offset
    (TopicA/2, unit 181, now 2^48 above its record): the abnormal start keeps the queue (the
    consume queues' max physical offset is below the commitlog's end, so nothing is
    truncated); the next, normal, start finds the re-dispatched queues reaching the end
    and truncates every queue at it: TopicA/2 loses the unit and the ten after it. From
    then on a fixed point."""
    p = root / "consumequeue" / "TopicA" / "2" / "00000000000000003200"
    b = bytearray(p.read_bytes())
    b[421] ^= 0x01
    p.write_bytes(bytes(b))


def broker_not_a_fixed_point_misnamed_queue(root: Path) -> None:
    """``crash_midwrite`` with a consume queue file renamed to Long.MAX_VALUE: recover
    leaves that queue alone (the broker mangles it), so its last record never gets a unit,
    the consume queues' max physical offset stays below it, and every start-up reput
    dispatches it again: the broker re-indexes it at each start (quirk Q6); recover, which
    does not index again a record of a queue it leaves alone that the index holds with
    every key, indexes it once (a deviation: man rmqtool-recover)."""
    q = root / "consumequeue" / "TopicA" / "0"
    (q / "00000000000000003200").rename(q / "09223372036854775807")


def queue_file_renamed_unaligned(root: Path) -> None:
    """``crash_midwrite`` with TopicA/0's file 1920 renamed to 1921 (soak seed 1007561): the
    broker loads it as file 1921 and its abnormal recovery appends the last record's unit
    there (logging the order mismatch), so its second start changes no index; recover
    leaves the queue alone, and, as the broker's index after its first start, indexes the
    record once."""
    q = root / "consumequeue" / "TopicA" / "0"
    (q / "00000000000000001920").rename(q / "00000000000000001921")


def broker_not_a_fixed_point_queue_emptied(root: Path) -> None:
    """``delay`` with one bit flipped in the first unit of ``%RETRY%GroupD/0`` (its offset
    now 2^48 too high): the normal start finds the queues reaching past the commitlog's
    end and truncates them at it, which deletes that queue's only file (its first unit
    points past the end) and sets its max physical offset to the end, so the start-up
    reput dispatches nothing. The second start finds no such queue, reputs from the other
    queues' max physical offset and writes the queue anew (and indexes those records
    again, Q6). From then on a fixed point."""
    p = root / "consumequeue" / "%RETRY%GroupD" / "0" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    b[1] ^= 0x01
    p.write_bytes(bytes(b))


def broker_pinned_by_the_cut_units_it_keeps(root: Path) -> None:
    """Soak seed 1055801: ``delay`` with bit flips in %RETRY%GroupD/0 (unit 1, the record at
    45735, now points at 536917671) and in SCHEDULE_TOPIC_XXXX/6 (unit 0 now at 33556999).
    The normal start truncates the queues at the end offset 46369: GroupD keeps unit 0,
    SCHEDULE_TOPIC_XXXX/6 loses its only file and counts the end offset, so the reput
    dispatches nothing. The broker leaves GroupD's cut unit in the file, so its every later
    start reads it, truncates again and reputs nothing: the record at 45735 never gets its
    unit back. recover zero-fills the cut unit, so the broker's next start on recover's
    result reputs from 45735; recover's one run does that too (a deviation)."""
    for rel, flips in (
        ("%RETRY%GroupD/0", {12: 0x20, 24: 0x20, 26: 0x04}),
        ("SCHEDULE_TOPIC_XXXX/6", {4: 0x02, 20: 0x10, 34: 0x20, 337: 0x40}),
    ):
        p = root / "consumequeue" / rel / "00000000000000000000"
        b = bytearray(p.read_bytes())
        for i, v in flips.items():
            b[i] ^= v
        p.write_bytes(bytes(b))


def broker_not_a_fixed_point_queue_walk_from_the_third_last_file(root: Path) -> None:
    """``crash_midwrite`` with units 3-35 of TopicB/1 zeroed (its first file) and the
    commitlog zeroed from 229376 (196608 + 32768) on. ConsumeQueue.recover walks a queue
    from its third-last file: the abnormal start (six files) never reads the zeros, and
    its truncation at the new end leaves two files; the next start walks from the first
    file, stops at the zeroed unit and drops the second file. Then a fixed point."""
    p = root / "commitlog" / "00000000000000196608"
    b = bytearray(p.read_bytes())
    b[32768:] = bytes(len(b) - 32768)
    p.write_bytes(bytes(b))
    p = root / "consumequeue" / "TopicB" / "1" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    b[74:714] = bytes(len(b[74:714]))
    p.write_bytes(bytes(b))


# where recover run again is compared with the broker started again
# (tests/oracle/test_fixed_point_oracle.py): the broker's starts are no fixed point, or
# (a queue recover leaves alone) recover's are where the broker's are not
NOT_A_FIXED_POINT: dict[str, tuple[str, Callable[[Path], None]]] = {
    "queue_walk_from_the_third_last_file": (
        "crash_midwrite",
        broker_not_a_fixed_point_queue_walk_from_the_third_last_file,
    ),
    "queue_emptied_at_first_start": ("delay", broker_not_a_fixed_point_queue_emptied),
    "q6_first_commitlog_renamed": ("delay", broker_not_a_fixed_point_q6),
    "cq_unit_past_the_end": ("crash_midwrite", broker_not_a_fixed_point_cq_unit),
    "misnamed_queue_file": ("crash_midwrite", broker_not_a_fixed_point_misnamed_queue),
    "queue_file_renamed_unaligned": ("crash_midwrite", queue_file_renamed_unaligned),
}


def changed_areas(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """What a run changed, by area: ``consumequeue/T/Q`` for a queue's files, ``index``
    for the index files, else the path."""
    out = set()
    for k in set(before) | set(after):
        if before.get(k) == after.get(k):
            continue
        parts = k.split(os.sep)
        if parts[0] == "consumequeue" and len(parts) >= 3:
            out.add("/".join(parts[:3]))
        elif parts[0] == "index":
            out.add("index")
        else:
            out.add(k)
    return out


def broker_changed_areas(v1: dict, v2: dict) -> set[str]:
    """What the broker's second start changed (its views after start 1 and start 2): the
    queues it serves differently, the index files, the files it shut down with."""
    out = set()
    q1, q2 = v1.get("consume_queues") or {}, v2.get("consume_queues") or {}
    for q in set(q1) | set(q2):
        if q1.get(q) != q2.get(q):
            out.add("consumequeue/" + q)
    if v1.get("index_files_after_rocketmq_shutdown_in_name_order") != v2.get(
        "index_files_after_rocketmq_shutdown_in_name_order"
    ):
        out.add("index")
    f1, f2 = v1.get("files_after_rocketmq_shutdown") or {}, v2.get("files_after_rocketmq_shutdown") or {}
    for k in set(f1) | set(f2):
        if f1.get(k) != f2.get(k):
            parts = k.split("/")
            out.add("/".join(parts[:3]) if parts[0] == "consumequeue" else k)
    return out


def fixture_config(fixture: str) -> dict:
    """The broker's config of the fixture a damaged store was made of; a DLedger twin's
    (make_dledger) with the DLedger commitlog on, so that the broker reads its entries
    (soak seed 2000916: the replay looked for the twin's name as a fixture directory)."""
    twin = fixture.endswith(DLEDGER_TWIN)
    name = fixture[: -len(DLEDGER_TWIN)] if twin else fixture
    cfg = json.loads((REAL / name / "scenario.json").read_text(encoding="utf-8"))["message_store_config"]
    out = {k: v for k, v in cfg.items() if k != "storePathRootDir"}
    if twin:
        out["enableDLegerCommitLog"] = True
    return out


def _oracle_harness():  # noqa: ANN202 - tests/oracle/harness.py, loaded by path
    import importlib.util

    if "oracle_harness" in sys.modules:
        return sys.modules["oracle_harness"]
    spec = importlib.util.spec_from_file_location("oracle_harness", ROOT / "tests" / "oracle" / "harness.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["oracle_harness"] = mod
    spec.loader.exec_module(mod)
    return mod


def entries_at(root: Path, phy: int) -> int:
    """How many index entries of ``root``'s index files point at commitlog offset ``phy``."""
    from rmqtool.recovery.store import Store

    store = Store.open(root)
    base = 40 + 4 * store.geometry.index_slot_num
    n = 0
    for f in store.index_files:
        b = f.path.read_bytes()
        count = struct.unpack_from(">i", b, 36)[0]
        n += sum(1 for i in range(1, count) if struct.unpack_from(">q", b, base + 20 * i + 4)[0] == phy)
    return n


def copy_tree_holes_kept(src: Path, dst: Path) -> None:
    """``shutil.copytree`` whose files keep their holes: a damaged store may hold a sparse
    64 GiB file (seed 1028792's checkpoint), which a plain copy writes out whole."""
    from rmqtool.recovery.store import data_extents

    def copy_file(a: str, b: str) -> str:
        if stat.S_ISFIFO(os.lstat(a).st_mode):  # (a FIFO damage: opening it would wait for a writer)
            os.mkfifo(b)
            return b
        with open(a, "rb", buffering=0) as f, open(b, "wb") as out:
            size = os.fstat(f.fileno()).st_size
            for lo, hi in data_extents(f.fileno(), 0, size):
                f.seek(lo)
                out.seek(lo)
                pos = lo
                while pos < hi and (chunk := f.read(min(1 << 20, hi - pos))):
                    out.write(chunk)
                    pos += len(chunk)
            out.truncate(size)
        shutil.copystat(a, b)
        return b

    shutil.copytree(src, dst, symlinks=True, copy_function=copy_file)


def broker_starts(store: Path, fixture: str, n: int = 2, version: str = "4.9.4") -> list[dict]:
    """The broker's views after starting ``store`` (changed in place) ``n`` times. The JVM
    gets the broker's own default heap (runbroker.sh: -Xmx8g), not the harness's 768 MiB:
    a damaged store may hold a 1 GiB config file, which the broker reads whole (seed
    1046035: out of memory at 768 MiB and at 4 GiB, the broker's Q6 repeat at 8 GiB)."""
    h = _oracle_harness()
    xmx = os.environ.get("ROCKETMQ_ORACLE_XMX")
    os.environ["ROCKETMQ_ORACLE_XMX"] = xmx or "8g"
    try:
        return [h.view(version, store, fixture_config(fixture), no_copy=True) for _ in range(n)]
    finally:
        if xmx is None:
            del os.environ["ROCKETMQ_ORACLE_XMX"]


def recover_vs_broker(seed: int, dest: Path, kind: str | None = None) -> tuple[bool, str]:
    """Replay ``seed``: recover twice on one copy, the broker started twice on another.
    True when every area recover's second run changes, the broker's second start changes
    too (the broker is no fixed point there either); the detail says what each changed."""
    root, _kind, desc = make_store(dest, seed, kind)
    fixture = desc.split(":", 1)[0]
    twin = dest / "broker"
    copy_tree_holes_kept(root, twin)
    run_inprocess(["recover", "--yes", "-q", str(root), "--backup-dir", str(dest / "b1")], 120)
    h1 = tree_digest(root)
    first = dest / "broker-on-first"
    copy_tree_holes_kept(root, first)
    run_inprocess(["recover", "--yes", "-q", str(root), "--backup-dir", str(dest / "b2")], 120)
    ours = changed_areas(h1, tree_digest(root))
    where = ""
    from rmqtool.recovery.configfiles import config_blocking_start

    blocking = config_blocking_start(twin)
    if blocking is not None:
        return False, f"the broker's start blocks on {blocking} (a FIFO): no start to compare"
    try:
        v1, v2 = broker_starts(twin, fixture)
        if not (v1.get("load_ok") and v2.get("load_ok")):
            # the broker refuses the damaged store; where recover's first run removed what
            # it refuses (a zero-length queue file written anew, say), the broker started
            # on that result is the behaviour recover's later runs follow
            v1, v2 = broker_starts(first, fixture)
            where = " (the broker refuses the damaged store; started on recover's first result)"
    except Exception as exc:  # noqa: BLE001 - no java, a broker refusal: not confirmed
        return False, f"broker: {str(exc).strip()[-160:]}"
    if not (v1.get("load_ok") and v2.get("load_ok")):
        return False, "the broker refuses the store"
    theirs = broker_changed_areas(v1, v2)
    ok = bool(ours) and ours <= deviation_cover(theirs, ours)
    return ok, f"recover's second run changed {sorted(ours)}; the broker's second start{where} {sorted(theirs)}"


def deviation_cover(theirs: set[str], ours: set[str]) -> set[str]:
    """The areas the broker's second start changed, with what recover's documented
    deviations add to the same change (man rmqtool-recover, Deviations): where that start
    cut the commitlog (a file it deleted or shut down differently), recover's cut also
    zero-fills the bytes the broker only leaves past its write position (another commitlog
    file changed) and cuts the index entries at or past the end offset, which the broker
    keeps (the index)."""
    if any(a.startswith("commitlog/") for a in theirs):
        return theirs | {a for a in ours if a.startswith("commitlog/")} | {"index"}
    return theirs
