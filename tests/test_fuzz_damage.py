"""Issue 23: the twelve ways a damaged store wedged, hung or exhausted rmqtool (F1-F12),
the "also seen" items, and the damaged-store fuzz run (a fixed budget of seeded damaged
copies of the real fixtures, every command on each; tests/fuzzdamage.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import fuzzdamage as fd
import pytest
from conftest import jsonl_records, real_store

from rmqtool.cli import run
from rmqtool.formats.consumequeue import read_units
from rmqtool.recovery import offsets as ro
from rmqtool.recovery.configfiles import config_blocking_start
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

ROOT = Path(__file__).resolve().parent.parent
TWO_GIB = 2 << 30


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return code, out, err


def child(*argv: str, timeout: float = 60, mem: int = TWO_GIB, user: str | None = None) -> fd.Outcome:
    o = fd.run_child(list(argv), timeout, mem, user)
    assert not o.hang, (argv, "hang")
    assert "internal error" not in o.err and "out of memory" not in o.err, (argv, o.err)
    return o


def copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name / "store"
    shutil.copytree(real_store(name), dst, symlinks=True)
    return dst


@pytest.fixture
def public_tmp() -> object:
    """A directory every user can reach (pytest's tmp_path lies under a 0700 directory)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="rmqtool-issue23-"))
    d.chmod(0o755)
    yield d
    fd.cleanup(d)


def snapshot(root: Path) -> dict[str, str]:
    return fd.tree_digest(root)


# ---------------------------------------------------------------------------------------
# F1-F12


def test_dump_index_key_without_any_index_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy(tmp_path, "clean")
    for p in (root / "index").iterdir():
        p.unlink()
    code, out, err = cli(capsys, "dump", "index", str(root), "--key", "ORDER-1", "--format", "jsonl")
    assert code == 0 and jsonl_records(out, 0) == [] and "no usable index file" in err
    shutil.rmtree(root / "consumequeue")  # no topic to look up either
    code, out, err = cli(capsys, "dump", "index", str(root), "--key", "ORDER-1", "--format", "jsonl")
    assert code == 0 and jsonl_records(out, 0) == [] and "no index lookup" in err


def test_config_number_of_5000_digits_falls_back_to_bak(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy(tmp_path, "clean")
    cfg = root / "config" / "delayOffset.json"
    good = cfg.read_text(encoding="utf-8")
    cfg.write_text('{"a":' + "9" * 5000 + "}", encoding="utf-8")
    code, out, err = cli(capsys, "dump", "config", str(root), "--format", "jsonl")
    (rec,) = jsonl_records(out, code)
    assert code == 4 and rec["status"] == "UNPARSABLE" and "5000 digits" in rec["problems"][0]
    (root / "config" / "delayOffset.json.bak").write_text(good, encoding="utf-8")
    code, out, err = cli(capsys, "dump", "config", str(root), "--format", "jsonl")
    (rec,) = jsonl_records(out, code)
    assert rec["status"] == "FALLBACK_TO_BAK" and rec["content"] == json.loads(good)


def test_salvage_with_an_index_symlink_loop_is_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy(tmp_path, "crash_midwrite")
    shutil.rmtree(root / "index")
    (root / "index").symlink_to(root / "index2")
    (root / "index2").symlink_to(root / "index")
    before = snapshot(root)
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--salvage-to", str(tmp_path / "salvage"))
    assert code == 8 and err.count("\n") == 1 and "/index:" in err and "symbolic links" in err
    assert snapshot(root) == before and not (tmp_path / "salvage").exists()
    code, out, err = cli(capsys, "verify", str(root), "--format", "jsonl")
    assert code == 4 and any(f["code"] == "FILE_UNSAFE" and f["file"] == "index" for f in jsonl_records(out, code))


def test_a_stray_one_byte_queue_file_leaves_that_queue_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy(tmp_path, "delay")
    stray = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "0" / "00000000000000000001"
    stray.write_bytes(b"x")
    queue_before = {p.name: p.read_bytes() for p in stray.parent.iterdir()}
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b1"))
    assert code == 4 and "not a multiple of the file size" in err
    assert {p.name: p.read_bytes() for p in stray.parent.iterdir()} == queue_before
    after = snapshot(root)
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b2"))
    assert code == 4 and snapshot(root) == after and not (tmp_path / "b2").exists()


def _nul_topic(root: Path) -> None:
    p = root / "commitlog" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    (bodylen,) = struct.unpack_from(">i", b, 84)
    t = 88 + bodylen
    b[t + 1 : t + 1 + b[t]] = bytes(b[t])  # the whole topic name: NUL bytes
    p.write_bytes(bytes(b))


def test_a_topic_of_nul_bytes_never_becomes_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy(tmp_path, "clean")
    _nul_topic(root)
    h0 = snapshot(root)
    code, out, err = cli(capsys, "verify", str(root), "--format", "jsonl")
    assert code == 4 and any(f["code"] == "TOPIC_BAD_NAME" for f in jsonl_records(out, code))
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), "--quiet", "--backup-dir", str(tmp_path / "b1"))
    assert code == 5 and "NUL byte" in err  # the other queues written (1), this topic left (4)
    assert not (root / ".rmqtool-journal").exists()
    assert all("\0" not in str(p) for p in (root / "consumequeue").rglob("*"))
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b2"))
    assert code in (0, 4)
    code, out, err = cli(capsys, "restore", "--yes", str(tmp_path / "b1"), str(root))
    assert code == 1 and snapshot(root) == h0


@pytest.mark.parametrize("how", ["dangling", "loop", "outside"])
def test_a_symlinked_queue_directory_is_a_finding_and_a_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    root = copy(tmp_path, "crash_midwrite")
    q = root / "consumequeue" / "TopicA" / "0"
    shutil.rmtree(q)
    if how == "dangling":
        q.symlink_to(tmp_path / "missing")
    elif how == "loop":
        q.symlink_to(q.with_name("1x"))
        q.with_name("1x").symlink_to(q)
    else:
        (tmp_path / "elsewhere").mkdir()
        q.symlink_to(tmp_path / "elsewhere")
    before = snapshot(root)
    code, out, err = cli(capsys, "verify", str(root), "--format", "jsonl")
    assert code == 4 and any(
        f["code"] == "FILE_UNSAFE" and f["file"] == "consumequeue/TopicA/0" for f in jsonl_records(out, code)
    )
    for argv in (
        ("recover", "--yes"),
        ("rebuild-index", "--yes", "--quiet"),
        ("recover", "--dry-run"),
        ("rebuild-index", "--dry-run", "--quiet"),
    ):
        code, out, err = cli(capsys, argv[0], str(root), *argv[1:])
        assert code == 8 and err.count("\n") == 1 and "consumequeue/TopicA/0" in err, (argv, err)
        assert snapshot(root) == before and not (root / ".rmqtool-journal").exists()


def test_an_unwritable_queue_directory_is_refused_before_any_change(public_tmp: Path) -> None:
    """As an unprivileged user (root ignores permission bits): a child process that
    setuid()s to nobody runs recover and verify on a store it owns all of but one queue
    directory it cannot write."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    tmp_path = public_tmp
    root = copy(tmp_path, "crash_midwrite")
    for dirpath, dirnames, filenames in os.walk(tmp_path):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), nobody.pw_uid, nobody.pw_gid)
    os.chown(tmp_path, nobody.pw_uid, nobody.pw_gid)
    q = root / "consumequeue" / "TopicA" / "0"
    q.chmod(0o555)
    before = snapshot(root)
    o = child("verify", str(root), "--format", "jsonl", user="nobody")
    assert o.code in (0, 4)  # DIR_UNWRITABLE is a warning: a read-only forensic copy is no damage
    o = child("recover", "--yes", str(root), user="nobody")
    assert o.code == 8 and "consumequeue/TopicA/0" in o.err and "write permission" in o.err
    assert snapshot(root) == before and not (root / ".rmqtool-journal").exists()
    q.chmod(0o755)


def test_an_index_name_far_ahead_is_passed_by_bisection_not_by_steps() -> None:
    from rmqtool.formats.names import index_file_name, index_name_after
    from rmqtool.recovery.reput.output import name_new_index_files

    t0 = time.perf_counter()
    ms, name = index_name_after(1763766118711, "20261399999999999")  # month 13: no such time
    assert name > "20261399999999999" and name == index_file_name(ms) and index_file_name(ms - 1) <= "20261399999999999"
    ms2, name2 = index_name_after(1763766118711, "20261121240000000")  # one hour ahead
    assert name2 == "20261121240000000"[:-3] + "001" or name2 > "20261121240000000"
    assert index_name_after(0, "99999999999999999") is None
    assert time.perf_counter() - t0 < 1.0

    class Img:
        first_store_timestamp = 1763766118711

    assert name_new_index_files([Img(), Img()], "20261399999999999", None) == [name, index_file_name(ms + 1)]


def test_recover_with_the_newest_index_renamed_far_ahead_finishes(tmp_path: Path) -> None:
    root = copy(tmp_path, "crash_midwrite")
    newest = sorted((root / "index").iterdir())[-1]
    newest.rename(newest.with_name("20261399999999999"))
    o = child("recover", "--yes", str(root), timeout=60)
    assert o.code in (0, 1, 4, 5) and o.seconds < 30


@pytest.mark.parametrize("what", ["devzero", "sparse64g"])
def test_a_huge_checkpoint_is_never_read_whole(tmp_path: Path, what: str) -> None:
    root = copy(tmp_path, "clean")
    cp = root / "checkpoint"
    if what == "devzero":
        cp.unlink()
        cp.symlink_to("/dev/zero")
    else:
        os.truncate(cp, 64 << 30)
    before = snapshot(root)
    for argv, codes in (
        (("verify",), {0, 4}),
        (("dump", "checkpoint"), {0, 4, 8}),
        (("recover", "--dry-run"), {0, 4, 8}),
        (("rebuild-index", "--dry-run"), {0, 4, 8}),
    ):
        full = [argv[0], *argv[1:], str(root)] if argv[0] == "dump" else [argv[0], str(root), *argv[1:]]
        o = child(*full, mem=TWO_GIB)
        assert o.code in codes and not o.memory, (argv, o.code, o.err)
    assert snapshot(root) == before
    if what == "devzero":
        o = child("recover", "--yes", str(root))
        assert o.code == 8 and "/dev/zero" in o.err


def test_a_sparse_config_file_is_not_read(tmp_path: Path) -> None:
    root = copy(tmp_path, "clean")
    os.truncate(root / "config" / "delayOffset.json", 1 << 30)
    o = child("dump", "config", str(root), mem=TWO_GIB)
    assert o.code == 4 and not o.memory


def test_dump_consumequeue_skips_the_holes_of_a_sparse_64_gib_queue_file(tmp_path: Path) -> None:
    """Found by the soak: the last written unit was searched over the whole map (64 GiB of
    zeros read, two minutes); now only the data extents are searched and mapped."""
    root = copy(tmp_path, "clean")
    q = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    units = (len(q.read_bytes().rstrip(b"\0")) - 1) // 20 + 1
    os.truncate(q, 64 << 30)
    o = child("dump", "consumequeue", str(root), "--topic", "TopicA", "--queue", "0", timeout=60, mem=TWO_GIB)
    assert o.code == 0 and not o.memory and o.seconds < 15, (o.code, o.seconds, o.err)
    from rmqtool.recovery.query import iter_cq_entries
    from rmqtool.recovery.store import Store

    rows = [r for r in iter_cq_entries(Store.open(root), "TopicA", 0) if r["file"].endswith(q.name)]
    assert len(rows) == units and rows[-1]["status"] == "OK"


def test_an_unreadable_store_is_an_operational_error_not_usage(tmp_path: Path, public_tmp: Path) -> None:
    if os.geteuid() != 0:
        root = copy(tmp_path, "clean")
        root.chmod(0)
        try:
            assert run(["verify", str(root)]) == 8
        finally:
            root.chmod(0o755)
        return
    import pwd

    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    root = copy(public_tmp, "clean")
    root.chmod(0)
    try:
        for argv in (("verify", str(root)), ("dump", "commitlog", str(root)), ("recover", str(root), "--dry-run")):
            o = child(*argv, user="nobody")
            assert o.code == 8 and "permission denied" in o.err.lower() and o.err.count("\n") == 1, (
                argv,
                o.code,
                o.err,
            )
    finally:
        root.chmod(0o755)


@pytest.mark.parametrize(
    "where,argv",
    [
        ("checkpoint", ("verify",)),
        ("checkpoint", ("recover", "--yes")),
        ("checkpoint", ("recover", "--dry-run")),
        ("lock", ("verify",)),
        ("config/delayOffset.json", ("dump", "config")),
        ("index/LAST", ("recover", "--yes")),
        ("checkpoint", ("dump", "checkpoint")),
    ],
)
def test_a_fifo_is_never_opened(tmp_path: Path, where: str, argv: tuple[str, ...]) -> None:
    root = copy(tmp_path, "clean")
    if where == "index/LAST":
        where = "index/" + sorted(p.name for p in (root / "index").iterdir())[-1]
    (root / where).unlink()
    os.mkfifo(root / where)
    full = [argv[0], *argv[1:], str(root)] if argv[0] == "dump" else [argv[0], str(root), *argv[1:]]
    o = child(*full, timeout=30)
    assert o.code in (4, 8) and o.seconds < 20
    if argv[0] in ("recover", "dump") and argv != ("recover", "--dry-run") and where != "config/delayOffset.json":
        assert o.code == 8 and "FIFO" in o.err and where.split("/")[0] in o.err


@pytest.mark.parametrize("argv", [("verify",), ("offsets",), ("info",)])
def test_a_fifo_offset_table_is_never_opened(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """Soak seed 1000535: a FIFO for config/delayOffset.json hung verify and offsets (the
    offset tables were read with read_bytes); now every config read is type-checked and
    bounded, and the FIFO is a corrupt table (the .bak, else empty)."""
    root = copy(tmp_path, "many_files")
    fifo = root / "config" / "delayOffset.json"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    o = child(argv[0], str(root), *argv[1:], timeout=30)
    assert o.code in (0, 4) and o.seconds < 20, (o.code, o.err)


def test_recover_is_a_fixed_point_where_the_brokers_start_blocks_on_a_fifo_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1103575: ``delay`` with its first commitlog file renamed to 131072 (every
    unit points below the commitlog's first offset, so every start-up reput dispatches all
    106 records again and re-indexes the last one: the broker's own repeat, quirk Q6) and a
    FIFO for config/delayOffset.json. The broker's start opens that file with a
    FileInputStream, which waits for a writer: it never starts, so no start of its repeats
    anything, and recover added the same 3 index entries at every run. A FIFO among the
    config files every start loads now counts as the broker not starting
    (``config_blocking_start``, ``broker_refuses``): the record at the index's end is not
    indexed again, and recover is a fixed point from its first run. verify says why the
    broker does not start (CFG_LOAD_FAILS, not "loads the .bak instead")."""
    plain = copy(tmp_path / "plain", "delay")
    (plain / "commitlog" / "00000000000000000000").rename(plain / "commitlog" / "00000000000000131072")
    root = tmp_path / "fifo"
    shutil.copytree(plain, root, symlinks=True)
    (root / "config" / "delayOffset.json").unlink()
    os.mkfifo(root / "config" / "delayOffset.json")
    assert _codes(_recover_runs(capsys, tmp_path / "p", plain)) == [1, 1, 1]  # (the broker's own repeat: tests/oracle)
    runs = _recover_runs(capsys, tmp_path / "f", root)
    assert _codes(runs) == [0, 0, 0] and _settled(runs)
    code, out, _err = cli(capsys, "verify", "--format", "json", str(root))
    cfg = {(f["code"], f["file"]): f["message"] for f in json.loads(out)["findings"] if f["code"].startswith("CFG")}
    assert code == 4 and list(cfg) == [("CFG_LOAD_FAILS", "config/delayOffset.json")]
    assert "the broker's start blocks opening it" in cfg[("CFG_LOAD_FAILS", "config/delayOffset.json")]


def test_a_fifo_bak_blocks_the_start_only_where_the_file_is_missing(tmp_path: Path) -> None:
    """The .bak is read only when the file is missing or empty (ConfigManager.load)."""
    root = copy(tmp_path, "clean")
    cdir = root / "config"
    (cdir / "delayOffset.json.bak").unlink(missing_ok=True)
    os.mkfifo(cdir / "delayOffset.json.bak")
    assert config_blocking_start(root) is None  # (delayOffset.json decodes: its .bak is never read)
    (cdir / "delayOffset.json").write_bytes(b"")
    assert config_blocking_start(root) == "config/delayOffset.json.bak"
    (cdir / "delayOffset.json").unlink()
    assert config_blocking_start(root) == "config/delayOffset.json.bak"


def test_the_soak_copies_a_fifo_as_a_fifo(tmp_path: Path) -> None:
    """Soak seed 1103575 hung the soak itself: its replay against the broker copied the
    damaged store by opening every file, a FIFO too, which waits for a writer."""
    src = copy(tmp_path, "clean")
    (src / "config" / "delayOffset.json").unlink(missing_ok=True)
    os.mkfifo(src / "config" / "delayOffset.json")

    def stuck(_sig: int, _frame: Any) -> None:
        raise TimeoutError("the copy opened the FIFO")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    try:
        fd.copy_tree_holes_kept(src, tmp_path / "copy")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    import stat as _stat

    assert _stat.S_ISFIFO(os.lstat(tmp_path / "copy" / "config" / "delayOffset.json").st_mode)


@pytest.mark.parametrize("argv", [("rebuild-index", "--dry-run"), ("rebuild-index", "--yes")])
def test_rebuild_index_refuses_a_commitlog_file_past_long_max(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """Soak seed 1110562: ``delay`` with commitlog file 0 renamed to 09223372036854775807.
    Its records' offsets pass Long.MAX_VALUE: rebuild-index went on where no Java long (nor
    its int64 dispatch columns: the soak's store, with an absurd length in that file too,
    failed with ``internal error: OverflowError``) holds them. It refuses the store now,
    naming the file; the store is not changed."""
    root = copy(tmp_path, "delay")
    (root / "commitlog" / "00000000000000000000").rename(root / "commitlog" / "09223372036854775807")
    before = snapshot(root)
    code, _out, err = cli(capsys, argv[0], str(root), *argv[1:], "--backup-dir", str(tmp_path / "b"))
    assert code == 8 and "commitlog/09223372036854775807: its offsets pass Long.MAX_VALUE" in err
    assert snapshot(root) == before


def test_a_fifo_config_does_not_block_the_version_guess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--broker-version auto reads config files for 5.x-only fields: a FIFO topics.json
    hung it (read_text)."""
    root = copy(tmp_path, "clean")
    (root / "config" / "topics.json").unlink(missing_ok=True)
    os.mkfifo(root / "config" / "topics.json")
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    o = child("verify", str(root), timeout=30)
    assert o.code in (0, 4) and o.seconds < 20, (o.code, o.err)


def test_info_reads_40_bytes_of_a_sparse_64_gib_checkpoint(tmp_path: Path) -> None:
    """info read the whole checkpoint (read_bytes()[:40]): 64 GiB under a 2 GiB limit."""
    root = copy(tmp_path, "clean")
    os.truncate(root / "checkpoint", 64 << 30)
    o = child("info", str(root), mem=TWO_GIB, timeout=60)
    assert o.code in (0, 4) and not o.memory and o.seconds < 30, (o.code, o.err)


def test_recover_twice_is_recover_once_after_a_renamed_commitlog_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy(tmp_path, "clean")
    (root / "commitlog" / "00000000000000327680").rename(root / "commitlog" / "00000000000000458752")
    code1, _, _ = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b1"))
    h1 = snapshot(root)
    code2, _, _ = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b2"))
    assert code2 != 1 and snapshot(root) == h1


def test_recover_twice_after_an_absurd_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy(tmp_path, "clean")
    p = root / "commitlog" / "00000000000000065536"
    b = bytearray(p.read_bytes())
    struct.pack_into(">i", b, 0, 0x7FFFFFFF)
    p.write_bytes(bytes(b))
    cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b1"))
    h1 = snapshot(root)
    code2, _, _ = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b2"))
    assert code2 != 1 and snapshot(root) == h1


def _index_count(root: Path) -> int:
    from rmqtool.recovery.query import read_index_header
    from rmqtool.recovery.store import Store

    store = Store.open(root)
    return sum(read_index_header(store, f).index_count for f in store.index_files)


def _units(root: Path, topic: str, queue: int) -> int:
    from rmqtool.recovery.query import iter_cq_entries
    from rmqtool.recovery.store import Store

    return sum(1 for _ in iter_cq_entries(Store.open(root), topic, queue))


class _Run(NamedTuple):
    """One ``recover`` run of :func:`_recover_runs`."""

    code: int
    out: str
    err: str
    shot: Any  # snapshot(root) after the run
    seen: Any  # what observe() saw after the run (None without it)


def _recover_runs(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    root: Path,
    n: int = 3,
    quiet: bool = True,
    observe: Callable[[], Any] | None = None,
) -> list[_Run]:
    """``recover --yes`` run ``n`` times on ``root`` (a backup directory each; ``-q`` when
    ``quiet``): each run's exit status, output, snapshot and what ``observe()`` sees."""
    runs = []
    for i in range(n):
        code, out, err = cli(
            capsys, "recover", "--yes", *(["-q"] if quiet else []), str(root), "--backup-dir", str(tmp_path / f"b{i}")
        )
        runs.append(_Run(code, out, err, snapshot(root), observe() if observe else None))
    return runs


def _codes(runs: list[_Run]) -> list[int]:
    return [r.code for r in runs]


def _settled(runs: list[_Run]) -> bool:
    """Whether no run after the first changed the store."""
    return all(r.shot == runs[0].shot for r in runs[1:])


def _recover_thrice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, root: Path, observe: Callable[[], Any]
) -> list[tuple[int, Any]]:
    """``recover`` run three times on ``root``: its exit status and what ``observe()`` sees
    after each run."""
    return [(r.code, r.seen) for r in _recover_runs(capsys, tmp_path, root, observe=observe)]


def test_recover_repeats_the_brokers_own_q6_reindexing_at_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak (9 non-idempotent recovers, e.g. seed 58): the only commitlog file of ``delay``
    renamed to 65536. The broker re-indexes the record at the index's endPhyOffset at every
    start (quirk Q6), three entries each time (tests/oracle/test_fixed_point_oracle.py: the
    same bytes as the broker after each start); recover does the same: exit 1 each run."""
    root = copy(tmp_path, "delay")
    fd.broker_not_a_fixed_point_q6(root)
    counts, h0 = [_index_count(root)], snapshot(root)
    runs = _recover_runs(capsys, tmp_path, root, observe=lambda: _index_count(root))
    assert _codes(runs) == [1, 1, 1]
    assert [fd.changed_areas(a, r.shot) for a, r in zip([h0] + [r.shot for r in runs], runs)] == [{"index"}] * 3
    counts += [r.seen for r in runs]
    assert [b - a for a, b in zip(counts, counts[1:])] == [3, 3, 3]


def test_recover_cuts_a_queue_unit_past_the_end_at_the_second_run_like_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak (seed 73): a bit flip makes unit 181 of ``crash_midwrite``'s TopicA/2 point 2^48
    past its record. The abnormal first start keeps the queue; the normal second start
    truncates the (now complete) queues at the commitlog's end, which cuts that unit and
    the ten after it; the third changes nothing. recover's runs do the same."""
    root = copy(tmp_path, "crash_midwrite")
    fd.broker_not_a_fixed_point_cq_unit(root)
    seen = _recover_thrice(capsys, tmp_path, root, lambda: _units(root, "TopicA", 2))
    assert seen == [(1, 192), (1, 181), (0, 181)]


def test_recover_writes_a_queue_anew_at_the_second_run_after_the_first_emptied_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak (seed 108): the first unit of ``delay``'s %RETRY%GroupD/0 points 2^48 past its
    record. The first (normal) start truncates the queues at the end and so deletes that
    queue's file; the second writes the queue anew from the commitlog; the third changes
    nothing. The broker's starts do the same, byte for byte
    (tests/oracle/test_fixed_point_oracle.py)."""
    root = copy(tmp_path, "delay")
    fd.broker_not_a_fixed_point_queue_emptied(root)
    qdir = root / "consumequeue" / "%RETRY%GroupD" / "0"
    seen = _recover_thrice(
        capsys, tmp_path, root, lambda: sorted(p.name for p in qdir.iterdir()) if qdir.is_dir() else []
    )
    assert seen == [(1, []), (1, ["00000000000000000000"]), (0, ["00000000000000000000"])]
    assert _units(root, "%RETRY%GroupD", 0) == 2


def test_recover_drops_a_queue_file_at_the_second_run_when_its_walk_reaches_a_zeroed_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1001346 (there with a wrong-sized commitlog file the broker refuses; here
    the loadable variant): the broker walks a queue from its third-last file, so the
    zeroed units of TopicB/1's first file are read only once the first start's
    truncation has left two files; the second start drops the second file. recover's
    runs do the same (the broker's three starts: tests/oracle/test_fixed_point_oracle.py)."""
    root = copy(tmp_path, "crash_midwrite")
    fd.broker_not_a_fixed_point_queue_walk_from_the_third_last_file(root)
    qdir = root / "consumequeue" / "TopicB" / "1"
    seen = _recover_thrice(capsys, tmp_path, root, lambda: len(list(qdir.iterdir())))
    assert seen == [(1, 2), (1, 1), (0, 1)]


def _refused_thrice(capsys: pytest.CaptureFixture[str], tmp_path: Path, root: Path, name: str) -> None:
    """recover run three times on a store whose commitlog the broker refuses to load: each
    run refuses (status 8, one line naming the file and repair) and changes nothing
    (issue 33 R11)."""
    before = snapshot(root)
    runs = _recover_runs(capsys, tmp_path / "refused", root)
    assert _codes(runs) == [8, 8, 8] and all(r.shot == before for r in runs)
    assert all(f"commitlog/{name}: commitlog file is" in r.err and "rmqtool repair" in r.err for r in runs)


def _hidden_stray(root: Path) -> None:
    """A stray ``.hidden`` in a queue directory: the broker refuses the store while it is
    there, and recover goes on (a problem it leaves where it is)."""
    (root / "consumequeue" / "TopicA" / "0" / ".hidden").write_bytes(b"E")


def test_where_the_broker_refuses_the_store_recover_settles_the_queues_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1001346: ``crash_midwrite`` with commitlog file 196608 cut to 32768 bytes
    (the broker refuses to load the store) and TopicB/1's first file zeroed from byte 74.
    recover now refuses that store as the broker does (issue 33 R11). With the commitlog
    zeroed from the same offset instead and the broker refusing the store for a stray file
    in a queue directory: the truncation at the end offset leaves TopicB/1 two files, so
    the next run's queue walk begins at the first file, stops at its zeroed units and
    drops the second: no run was the last but the third. With no broker behaviour to
    follow, the one run leaves the queue as those next starts would (the loadable variant
    still takes two runs, as the broker's starts do:
    test_recover_drops_a_queue_file_at_the_second_run_...)."""
    for cut in (True, False):
        root = copy(tmp_path / str(cut), "crash_midwrite")
        cl = root / "commitlog" / "00000000000000196608"
        if cut:
            os.truncate(cl, 32768)
        else:
            b = bytearray(cl.read_bytes())
            b[32768:] = bytes(len(b) - 32768)
            cl.write_bytes(bytes(b))
            _hidden_stray(root)
        q0 = root / "consumequeue" / "TopicB" / "1" / "00000000000000000000"
        b = bytearray(q0.read_bytes())
        b[74:] = bytes(len(b) - 74)
        q0.write_bytes(bytes(b))
        if cut:
            _refused_thrice(capsys, tmp_path / str(cut), root, cl.name)
            continue
        qdir = q0.parent
        seen = _recover_thrice(capsys, tmp_path, root, lambda q=qdir, r=root: (len(list(q.iterdir())), snapshot(r)))
        assert [c for c, _ in seen] == [5, 4, 4]
        assert seen[0][1][0] == 1 and seen[0][1] == seen[1][1] == seen[2][1]


def test_where_the_broker_refuses_the_store_recover_does_its_next_starts_truncation_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1011773: ``crash_midwrite`` with a stray ``.hidden`` in TopicB/0 (the broker
    refuses the store) and two bit flips in that queue's last file: its first unit now
    points 2^34 past the commitlog's end. The abnormal dispatch completes the queues to
    the end offset, so the next (normal) run truncated them there, dropping that file
    (status 1 twice). With no broker start to leave it to, the one run does that start's
    truncation too, and says so; the second run has nothing to do."""
    root = copy(tmp_path, "crash_midwrite")
    q = root / "consumequeue" / "TopicB" / "0"
    f = q / "00000000000000003200"
    b = bytearray(f.read_bytes())
    b[3] ^= 4
    b[126] ^= 16
    f.write_bytes(bytes(b))
    (q / ".hidden").write_bytes(b"E")
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    # (the stray file is named at every run: the broker refuses the store while it is there)
    assert all(
        "consumequeue/TopicB/0/.hidden: consumequeue file name is not a decimal offset" in r.err
        and "move it out of the store for the broker to start" in r.err
        for r in runs
    )
    assert "no broker start to follow (the broker refuses this store" in runs[0].out
    assert "this run also cut the consume queues as its next 1 start(s) would" in runs[0].out
    assert _codes(runs) == [5, 4, 4] and _settled(runs) and not f.exists()


def test_where_the_broker_refuses_the_store_recover_does_its_next_starts_commitlog_walk_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1029408: ``clean`` with commitlog file 262144 cut to 42661 bytes (the
    broker refuses to load the store) and four bytes of file 131072 zeroed (a body CRC
    mismatch at 163529). recover now refuses that store as the broker does (issue 33
    R11). With file 262144 zeroed from 42661 instead and the broker refusing the store for
    a stray file in a queue directory: the walk from the last three files stops in that
    file and removes the file after it; the next run's walk then began one file earlier,
    met the damaged record and cut again (status 5 twice). With no broker start to follow,
    the one run walks from there too and cuts at 163529; the second run has nothing to do
    (but the stray file, a problem at every run)."""
    for cut in (True, False):
        root = copy(tmp_path / str(cut), "clean")
        short = root / "commitlog" / "00000000000000262144"
        if cut:
            os.truncate(short, 42661)
        else:
            b = bytearray(short.read_bytes())
            b[42661:] = bytes(len(b) - 42661)
            short.write_bytes(bytes(b))
            _hidden_stray(root)
        p = root / "commitlog" / "00000000000000131072"
        b = bytearray(p.read_bytes())
        b[53839:53843] = bytes(4)
        p.write_bytes(bytes(b))
        if cut:
            _refused_thrice(capsys, tmp_path / str(cut), root, short.name)
            continue
        cl = root / "commitlog"
        seen = _recover_thrice(
            capsys, tmp_path, root, lambda c=cl, r=root: (sorted(f.name for f in c.iterdir()), snapshot(r))
        )
        assert [c for c, _ in seen] == [5, 4, 4]
        assert seen[0][1][0] == ["00000000000000000000", "00000000000000065536", "00000000000000131072"]
        assert seen[0][1] == seen[1][1] == seen[2][1]
        assert p.read_bytes()[163529 - 131072 :] == bytes(65536 - (163529 - 131072)) and p.read_bytes()[
            : 163529 - 131072
        ] == bytes(b[: 163529 - 131072])


def test_where_the_broker_refuses_the_store_a_queue_cut_whole_is_written_anew_in_the_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1035645: ``delay``'s %RETRY%GroupD/0 file cut to 639 bytes (the broker
    refuses the store) with bit flips that send both its units past the commitlog's end.
    The truncation at the end offset takes the queue whole; the next start loads no file
    of it, and its reput, from the other queues' maximum, writes it anew. recover's
    settling of the next starts still counted the queue's old maximum (the end offset it
    holds in memory, and its maximum as a queue left alone), so the second run wrote it
    (status 5, then 1). Now the one run does, and the second has nothing to do."""
    root = copy(tmp_path, "delay")
    f = root / "consumequeue" / "%RETRY%GroupD" / "0" / "00000000000000000000"
    b = bytearray(f.read_bytes()[:639])
    for i, v in {5: 16, 9: 2, 10: 32, 16: 16, 24: 32, 33: 8}.items():
        b[i] ^= v
    f.write_bytes(bytes(b))
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert "this run also cut the consume queues as its next 1 start(s) would" in runs[0].out
    assert _codes(runs) == [5, 0, 0] and _settled(runs)
    assert f.stat().st_size == 640 and _units(root, "%RETRY%GroupD", 0) == 2


def test_recover_does_the_next_starts_walk_where_that_start_would_abort_on_a_totalsize_no_jvm_array_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1039718: ``clean`` with TOTALSIZE -2^31 at 196608+11166 (the walk from the
    last three files stops there and removes two files) and 2^31-1 at 131072+891. The
    next normal start walks from 65536 and meets the second, whose TOTALSIZE no JVM array
    holds: before 5.3.2 that start aborts (OutOfMemoryError, quirk Q10; the broker's own
    behaviour: tests/oracle/test_fixed_point_oracle.py), and the second run cut there
    (status 5, then 1). No start follows to leave it to: the one run walks from there too,
    says why, and leaves a store the broker starts on; the second has nothing to do."""
    root = copy(tmp_path, "clean")
    for name, pos, total in (("00000000000000196608", 11166, -(1 << 31)), ("00000000000000131072", 891, (1 << 31) - 1)):
        p = root / "commitlog" / name
        b = bytearray(p.read_bytes())
        struct.pack_into(">i", b, pos, total)
        p.write_bytes(bytes(b))
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert "the broker's next normal start would abort at the record at commitlog offset 131963" in runs[0].out
    assert _codes(runs)[1:] == [0, 0] and _settled(runs)
    assert sorted(f.name for f in (root / "commitlog").iterdir()) == [
        "00000000000000000000",
        "00000000000000065536",
        "00000000000000131072",
    ]


def test_where_the_cut_units_the_broker_keeps_pin_its_reput_recover_does_the_reput_of_its_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1055801 (fd.broker_pinned_by_the_cut_units_it_keeps): the truncation cuts
    %RETRY%GroupD/0 after unit 0 and takes SCHEDULE_TOPIC_XXXX/6 whole, so the reput
    dispatches nothing. recover zero-filled the cut unit, so its second run reput from
    45735, gave that record its unit back and indexed it (status 1, then 1). Now the one
    run does it and says why (the broker, keeping the cut unit, never does: the oracle
    test in tests/oracle/test_fixed_point_oracle.py); the second has nothing to do."""
    root = copy(tmp_path, "delay")
    fd.broker_pinned_by_the_cut_units_it_keeps(root)
    assert fd.entries_at(root, 45735) == 3
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert "this run also did the reput of the broker's next start on its result (1 records" in runs[0].out
    assert _codes(runs) == [1, 0, 0] and _settled(runs)
    units = read_units((root / "consumequeue/%RETRY%GroupD/0/00000000000000000000").read_bytes())
    assert units["commitlog_offset"][:3].tolist() == [45323, 45735, 0]
    assert fd.entries_at(root, 45735) == 6  # quirk Q6: the record at the index's endPhyOffset is indexed again
    assert not list((root / "consumequeue/SCHEDULE_TOPIC_XXXX/6").glob("*"))  # (its records lie before 45735)


@pytest.mark.parametrize("command", ["rebuild-index", "repair", "recover"])
def test_a_store_timestamp_no_index_file_name_holds_names_the_file_as_time_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Soak seed 1070476: a bit flip sent a record's store timestamp to year 18269340, and
    the new index file it opened was to be named after it: ``rebuild-index`` and ``repair``
    failed (internal error: ValueError, year out of range). Such a time counts as 0: the
    file takes the first name after the files kept, and the keys stay findable."""
    from rmqtool.formats import commitlog as cl

    root = copy(tmp_path, "clean")
    p = root / "commitlog" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    struct.pack_into(">q", b, cl.HEADER_OFFSETS[0]["store_timestamp"], 576460752303423488)  # (not in the body CRC)
    p.write_bytes(bytes(b))
    for f in (root / "index").iterdir():
        f.unlink()  # (every index file anew: the first opens at that record)
    args = [command, "--yes", str(root), "--backup-dir", str(tmp_path / "b")]
    code, _out, err = cli(capsys, *(args if command != "recover" else [*args, "--abnormal"]))
    assert "internal error" not in err and code in (0, 1), err
    names = sorted(f.name for f in (root / "index").iterdir())
    assert names and names[0].startswith("1970") and all(len(n) == 17 for n in names)
    code, out, _err = cli(capsys, "dump", "index", str(root), "--key", "ORDER-1")
    assert code == 0 and "ORDER-1" in out


def test_repair_fills_with_a_neighbours_negative_store_port(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review of the fuzz classes: the filler records repair writes carry the store host
    and port of the nearest intact record; a port is a Java int (not under the body CRC),
    and one with its high bit set failed the filler's unsigned packing (internal error:
    struct.error). The tombstone now carries it as the broker's int."""
    root = copy(tmp_path, "clean")
    p = root / "commitlog" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    b[291 + 68 : 291 + 72] = b"\xff\xff\xff\xff"  # record 1's store port: -1
    b[738] ^= 0x01  # record 2's body: its CRC fails
    p.write_bytes(bytes(b))
    code, out, err = cli(capsys, "repair", "--dry-run", str(root))
    assert "internal error" not in err and code == 4, err
    code, out, err = cli(capsys, "repair", "--yes", str(root), "--backup-dir", str(tmp_path / "b"))
    assert "internal error" not in err and code == 1, err
    code, out, err = cli(capsys, "dump", "commitlog", str(root), "--format", "jsonl", "--limit", "3")
    recs = jsonl_records(out, code)
    assert code == 0 and recs[2]["store_host"].endswith(":-1"), recs[2]


def test_rebuild_index_continuing_a_file_whose_header_claims_more_entries_than_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of the fuzz classes: ``rebuild-index --topic`` continues the last index file
    and asks whether it ends with every key of the record at its endPhyOffset; an
    indexCount (not checksummed) above maxIndexNum made it read past the last entry
    (internal error: IndexError). The count is taken as at most the entries the file holds."""
    root = copy(tmp_path, "clean")
    p = root / "index" / "20261121230159007"
    b = bytearray(p.read_bytes())
    struct.pack_into(">i", b, 36, 401)  # indexCount; the fixture's geometry holds 400 entries
    p.write_bytes(bytes(b))
    code, _out, err = cli(capsys, "rebuild-index", "--dry-run", "--topic", "TopicA", str(root))
    assert "internal error" not in err and code in (0, 4), err


def _flip_first_file(root: Path, queue: str, flips: dict[int, int]) -> None:
    p = root / "consumequeue" / queue / "00000000000000000000"
    b = bytearray(p.read_bytes())
    for i, v in flips.items():
        b[i] ^= v
    p.write_bytes(bytes(b))


def test_the_next_start_recover_does_too_reads_zeros_past_a_queues_end_as_recover_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 1055801's store with GroupD's unit 2, past the queue's end, made to look valid
    (64, 2^30): the next start's reput puts the record at 45735 back at unit 1, and that
    start's truncation read on past it into the stale unit 2, below the end, and kept it (a
    unit pointing 1 GiB long). On recover's result that unit is zeros, so the start recover
    models reads zeros there too (found in review)."""
    root = copy(tmp_path, "delay")
    fd.broker_pinned_by_the_cut_units_it_keeps(root)
    _flip_first_file(root, "%RETRY%GroupD/0", {47: 0x40, 48: 0x40})
    runs = _recover_runs(capsys, tmp_path, root)
    assert _codes(runs) == [1, 0, 0] and _settled(runs)
    units = read_units((root / "consumequeue/%RETRY%GroupD/0/00000000000000000000").read_bytes())
    assert list(zip(units["commitlog_offset"][:3].tolist(), units["size"][:3].tolist(), strict=True)) == [
        (45323, 412),
        (45735, 634),
        (0, 0),
    ]


def test_where_recovers_result_is_pinned_too_no_next_start_is_done_or_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SCHEDULE_TOPIC_XXXX/6 taken whole and TopicD/1 cut with a unit past the end kept by the
    broker, while %RETRY%GroupD/0 still ends at the end offset: on recover's result too the
    next start truncates (so the queue without a file counts the end offset) and reputs
    nothing. No next start to do, and none said (review: it said four, 0 records)."""
    root = copy(tmp_path, "delay")
    _flip_first_file(root, "SCHEDULE_TOPIC_XXXX/6", {4: 0x02})
    _flip_first_file(root, "TopicD/1", {384: 0x02})
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert _codes(runs) == [1, 0, 0] and _settled(runs)
    assert "deviation: the broker keeps" not in runs[0].out and "0 records dispatched" in runs[0].out


def test_a_5x_broker_reputs_from_the_commitlog_so_cut_units_pin_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same store for 5.1.4, whose start-up reput begins at the commitlog's end, not at
    the queues' maximum: nothing is pinned, nothing is dispatched, nothing is said."""
    root = copy(tmp_path, "delay")
    fd.broker_pinned_by_the_cut_units_it_keeps(root)
    codes = []
    for i in range(2):
        code, out, _err = cli(
            capsys, "recover", "--yes", "--broker-version", "5.1.4", str(root), "--backup-dir", str(tmp_path / f"b{i}")
        )
        codes.append(code)
        assert "reput of the broker's next start" not in out
    assert codes == [1, 0]
    units = read_units((root / "consumequeue/%RETRY%GroupD/0/00000000000000000000").read_bytes())
    assert units["commitlog_offset"][:2].tolist() == [45323, 0]


def test_without_a_commitlog_every_queue_file_goes_even_one_whose_first_unit_is_negative(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1042800: ``crash_midwrite`` without its commitlog and a 1-byte stray ``12``
    in TopicB/0 (read zero-padded, its unit points below 0). The broker destroys every
    consume queue; recover's model cut each queue at 0, which keeps a file whose first unit
    points below 0, and then forgot the files: ``offsets`` failed with an internal error
    (KeyError). Now every queue is empty, and the empty answer is said."""
    root = copy(tmp_path, "crash_midwrite")
    shutil.rmtree(root / "commitlog")
    (root / "consumequeue" / "TopicB" / "0" / "12").write_bytes(b"\x8c")
    code, out, err = cli(capsys, "offsets", str(root), "--format", "table")
    assert code == 0 and "internal error" not in err
    assert "no consumer offsets found" in out
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b"))
    assert code in (1, 5) and "internal error" not in err
    assert not any((root / "consumequeue").rglob("0000*"))


def test_a_walk_moved_back_that_finds_no_record_leaves_no_last_valid_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of the next-start walk: ``clean`` with a stray ``.hidden`` (the broker refuses
    the store) and TOTALSIZE -1 at 199372 and at 65536. The walk moves back to file 65536
    and finds no valid record there; the plan kept the first walk's last valid record
    (198958, past the new end), which 5.1.1+ writes as the checkpoint's confirm offset."""
    root = copy(tmp_path, "clean")
    for name, pos in (("00000000000000196608", 199372 - 196608), ("00000000000000065536", 0)):
        p = root / "commitlog" / name
        b = bytearray(p.read_bytes())
        struct.pack_into(">i", b, pos, -1)
        p.write_bytes(bytes(b))
    (root / "consumequeue" / "TopicA" / "0" / ".hidden").write_bytes(b"E")
    _, out, _ = cli(capsys, "recover", "--dry-run", "--broker-version", "5.1.4", "--format", "json", str(root))
    plan = json.loads(out)["plan"]
    assert (plan["start_offset"], plan["end_offset"], plan["last_valid_offset"]) == (65536, 65536, -1)


def test_verify_says_the_broker_aborts_only_where_its_recovery_walk_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of quirk Q10 in verify: every file's own walk stops at its first bad record,
    but the broker's start aborts only where its recovery walk stops. TOTALSIZE
    Integer.MAX_VALUE at the start of file 0 (normal recovery starts at 196608): not
    claimed. On the last record of the data with the abort file present: claimed, where
    the torn-record finding had hidden it."""
    first = copy(tmp_path / "a", "clean")
    p = first / "commitlog" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    struct.pack_into(">i", b, 0, 0x7FFFFFFF)
    p.write_bytes(bytes(b))
    _, out, _ = cli(capsys, "verify", str(first), "--broker-version", "4.9.4", "--format", "json")
    assert not any("start aborts" in f["message"] for f in json.loads(out)["findings"])
    last = copy(tmp_path / "b", "clean")
    (last / "abort").write_bytes(b"")
    p = last / "commitlog" / "00000000000000327680"
    b = bytearray(p.read_bytes())
    struct.pack_into(">i", b, 377646 - 327680, 0x7FFFFFFF)
    p.write_bytes(bytes(b))
    _, out, _ = cli(capsys, "verify", str(last), "--broker-version", "4.9.4", "--format", "json")
    at = {f["code"]: f["message"] for f in json.loads(out)["findings"] if f["physical_offset"] == 377646}
    assert "CL_TORN_MESSAGE" not in at and "the broker's start aborts at this record" in at["CL_SIZE_MISMATCH"]


def test_an_abnormal_run_walks_from_the_next_normal_starts_file_where_that_start_would_abort(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Quirk Q10 where the run is abnormal: the checkpoint puts the start at the last file,
    and TOTALSIZE Integer.MAX_VALUE opens file 262144, before it. The broker's abnormal
    start does not read that file, but its next, normal, start walks from the third-last
    file and aborts there (tests/oracle: the broker never starts again). recover's
    abnormal recovery walks and dispatches from that third-last file instead (a
    deviation, said in a note) and cuts at 262144 in one run: its second run has nothing
    to do. (Before, the first run named the record as a problem, exit 5, and only a
    second run cut it.)"""
    root = _abnormal_q10_store(tmp_path)
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert _codes(runs) == [1, 0, 0] and _settled(runs)
    assert "the broker's next normal start will (its last three files include it) and abort there" not in runs[0].err
    assert (
        "the broker's next normal start would abort at the record at commitlog offset 262144 (TOTALSIZE 2147483647"
    ) in runs[0].out
    assert (
        "this run's abnormal recovery walks and dispatches from there instead (end offset 262144, a deviation)"
        in " ".join(runs[0].out.split())
    )
    assert "start file            │ 00000000000000196608" in runs[0].out
    assert sorted(p.name for p in (root / "commitlog").iterdir())[-1] == "00000000000000262144"
    assert not (root / "commitlog" / "00000000000000262144").read_bytes().strip(b"\0")
    assert not (root / "abort").exists()


def test_an_abnormal_run_the_broker_refuses_walks_from_the_next_normal_starts_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same where the broker refuses the store after an abnormal exit (a stray file in
    a queue directory): the checkpoint puts the abnormal start at the last file, and a bit
    flip at 262144 + 30000 fails a body CRC before it. No start of the broker follows to
    walk from the third-last file, so the one run does that walk too and cuts at the
    record (276208); the stray file stays, a problem (exit 4 or 5), and later runs change
    nothing. (Before, the first run left the record and the second cut it.)"""

    def flip(b: bytearray) -> None:
        b[30000] ^= 0x10

    root = _abnormal_store(tmp_path, flip)
    (root / "consumequeue" / "TopicA" / "0" / "stray").write_bytes(b"x")
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert _codes(runs) == [5, 4, 4] and _settled(runs)
    out = " ".join(runs[0].out.split())
    assert "the walk stopped at commitlog offset 276208 (BODY_CRC_MISMATCH" in out
    assert (
        "the broker refuses this store, so no start of its follows this run: after this run's abnormal recovery "
        "(from commitlog/00000000000000327680, the checkpoint's start file)"
    ) in out
    assert "consumequeue/TopicA/0/stray" in runs[1].err and (root / "consumequeue" / "TopicA" / "0" / "stray").exists()


def _abnormal_store(tmp_path: Path, damage: Callable[[bytearray], None]) -> Path:
    """``clean`` after an abnormal exit whose checkpoint (timestamps in 2030) puts the
    abnormal start at the last file, with ``damage`` done to file 262144's bytes."""
    root = copy(tmp_path, "clean")
    (root / "abort").write_bytes(b"")
    for p, change in (
        (root / "checkpoint", lambda b: struct.pack_into(">qqq", b, 0, *[1900000000000] * 3)),
        (root / "commitlog" / "00000000000000262144", damage),
    ):
        b = bytearray(p.read_bytes())
        change(b)
        p.write_bytes(bytes(b))
    return root


def _abnormal_q10_store(tmp_path: Path) -> Path:
    """:func:`_abnormal_store` with the TOTALSIZE of file 262144's first record set to
    Integer.MAX_VALUE (quirk Q10)."""
    return _abnormal_store(tmp_path, lambda b: struct.pack_into(">i", b, 0, 0x7FFFFFFF))


def test_a_queue_cut_to_nothing_is_read_with_its_zero_unit_by_the_next_starts_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1095880: ``delay`` with bytes [9, 17) of %DLQ%GroupD/0's first unit zeroed
    (its size field: the unit is invalid, the queue empty at its file's start) and a stray
    file in %RETRY%GroupD/0 (the broker refuses the store). ``offsets`` models the queues
    as the broker's next starts would leave them on recover's result, where the bytes past
    a queue's write offset are zeros: the DLQ file's content was cut to nothing there, and
    the truncation's read of its first unit failed (``internal error: IndexError``). A
    file's content that ends early is read with the zero unit that follows it."""
    root = copy(tmp_path, "delay")
    q = root / "consumequeue" / "%DLQ%GroupD" / "0" / "00000000000000000000"
    b = bytearray(q.read_bytes())
    b[9:17] = bytes(8)
    q.write_bytes(bytes(b))
    (root / "consumequeue" / "%RETRY%GroupD" / "0" / "stray").write_bytes(b"x")
    code, out, _err = cli(capsys, "offsets", "--format", "json", str(root))
    assert code == 0 and json.loads(out)
    views = ro.queue_views(Store.open(root), BrokerProfile.for_version("4.9.4"))
    assert (views[("%DLQ%GroupD", 0)].max_offset, views[("%RETRY%GroupD", 0)].max_offset) == (0, 2)


def test_a_lone_queue_file_of_another_size_does_not_become_the_queue_file_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1012006: ``delay`` without its commitlog directory and SCHEDULE_TOPIC_XXXX/3's
    file cut to 639 bytes. The first run destroyed every other queue and left that one; the
    second took the queue file size from the one file left, 639, found it sound and
    destroyed it. Now the size is inferred only from sizes a queue file can have (whole
    20-byte units), and without commitlog data the broker's destruction of every queue
    takes that one too, in the first run; the second changes nothing."""
    from rmqtool.recovery.store import DEFAULT_CQ_FILE_SIZE, Store

    root = copy(tmp_path, "delay")
    shutil.rmtree(root / "commitlog")
    short = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "3" / "00000000000000000000"
    os.truncate(short, 639)
    lone = tmp_path / "lone"
    shutil.copytree(root, lone)
    for q in (lone / "consumequeue").rglob("0000*"):
        if q != lone / short.relative_to(root):
            q.unlink()
    assert Store.open(lone).geometry.cq_file_size == DEFAULT_CQ_FILE_SIZE
    runs = _recover_runs(capsys, tmp_path, root)
    assert not short.exists() and _settled(runs) and _codes(runs)[1:] == [0, 0]


def test_where_the_broker_refuses_the_store_the_q6_record_is_indexed_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seeds 1018737, 1022452: ``delay``'s only commitlog file renamed to 65536 (every
    start-up reput dispatches from the commitlog's start and re-indexes the record at the
    index's endPhyOffset, Q6: the broker does it at every start,
    test_recover_repeats_the_brokers_own_q6_reindexing_at_every_run) plus a stray
    ``00000000000000000001`` in a queue directory, so the broker refuses the store: with
    no start to follow, that record is not indexed again when the index holds all its
    keys, and the second run changes nothing."""
    root = copy(tmp_path, "delay")
    fd.broker_not_a_fixed_point_q6(root)
    (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "7" / "00000000000000000001").write_bytes(bytes(range(20)))
    runs = _recover_runs(capsys, tmp_path, root, observe=lambda: _index_count(root))
    assert runs[0].seen == runs[1].seen == runs[2].seen and _settled(runs)


def test_without_a_commitlog_a_queue_of_another_size_is_destroyed_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1022440: ``delay`` without its commitlog and SCHEDULE_TOPIC_XXXX/16's file cut
    to 320 bytes (a whole number of units). The broker destroys every consume queue; recover
    left that one alone, and at the next run it was the only queue file, its size became
    the file size, and it went then. Now it goes with the others in the first run."""
    root = copy(tmp_path, "delay")
    (root / "commitlog" / "00000000000000000000").unlink()
    short = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "16" / "00000000000000000000"
    os.truncate(short, 320)
    runs = _recover_runs(capsys, tmp_path, root, n=2)
    assert not short.exists() and _settled(runs) and runs[1].code in (0, 4)


def test_where_a_topic_that_cannot_be_a_path_stops_the_brokers_dispatch_recover_settles_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1019302: ``crash_midwrite`` with two NUL bytes in a record's topic (recover
    does not dispatch it; the broker's dispatch fails on it and does not go on as recover
    does) and bit flips in TopicA/2's last file, one unit now pointing past the end. The
    abnormal dispatch completed the queues, so the next run truncated TopicA/2 there
    (status 1 twice); the broker's second start did not (its dispatch had stopped). With
    no broker start to follow, the one run does that truncation too."""
    root = copy(tmp_path, "crash_midwrite")
    q = root / "consumequeue" / "TopicA" / "2" / "00000000000000003200"
    b = bytearray(q.read_bytes())
    for i, v in ((69, 64), (144, 2), (273, 2), (364, 1)):
        b[i] ^= v
    q.write_bytes(bytes(b))
    cl = root / "commitlog" / "00000000000000458752"
    c = bytearray(cl.read_bytes())
    c[2984:2986] = b"\0\0"
    cl.write_bytes(bytes(c))
    runs = _recover_runs(capsys, tmp_path, root, quiet=False)
    assert "this run also cut the consume queues as its next 1 start(s) would" in runs[0].out
    assert runs[1].code == runs[2].code and runs[1].code in (0, 4) and _settled(runs)
    assert _units(root, "TopicA", 2) == 167  # (cut at logical offset 167: the unit flipped past the end)


def test_a_queue_of_another_size_cut_whole_by_the_truncation_goes_with_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1016899: ``delay`` with its first record's topic length byte set to 255 (the
    walk stops at once: end offset 0, every queue truncated away) and SCHEDULE_TOPIC_XXXX/16's
    file cut to 320 bytes, a queue recover left alone. At the next run it was the only queue
    file: its size became the file size, and the queue was cut then. Now a queue left alone
    for a file of another size whose every unit the truncation cuts goes whole in the first
    run, as the broker's would; the second run changes nothing."""
    root = copy(tmp_path, "delay")
    cl = root / "commitlog" / "00000000000000000000"
    b = bytearray(cl.read_bytes())
    b[278] = 255
    cl.write_bytes(bytes(b))
    short = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "16" / "00000000000000000000"
    os.truncate(short, 320)
    runs = _recover_runs(capsys, tmp_path, root)
    assert "every unit of this queue is at or past the end offset: its files go with the truncation" in runs[0].err
    assert not short.exists() and _settled(runs) and runs[1].code == runs[2].code and runs[1].code in (0, 4)


def test_a_misaligned_queue_file_counts_for_the_reput_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Soak seed 1025539: ``delay`` with an absurd TOTALSIZE at 851 (a cut there) and
    SCHEDULE_TOPIC_XXXX/1's file renamed 00000000000000000001. The broker loads the file as
    file 1 and counts its units for the consume queues' max physical offset; recover, which
    leaves that queue alone, counted only aligned files, so every run re-dispatched the
    record only that file holds and moved the checkpoint's logicsMsgTimestamp back (status
    5 twice, the checkpoint changed). Now the second run changes nothing."""
    root = copy(tmp_path, "delay")
    cl = root / "commitlog" / "00000000000000000000"
    b = bytearray(cl.read_bytes())
    struct.pack_into(">i", b, 851, 65535)
    cl.write_bytes(bytes(b))
    q = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "1"
    (q / "00000000000000000000").rename(q / "00000000000000000001")
    runs = _recover_runs(capsys, tmp_path, root)
    assert _codes(runs) == [5, 4, 4] and _settled(runs)


def test_recover_indexes_the_record_of_a_queue_it_leaves_alone_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak (seed 192): a consume queue file of ``crash_midwrite`` renamed to Long.MAX_VALUE.
    recover leaves the queue alone (status 4 and the one line), so the last record never
    gets its unit and each run's start-up reput dispatches it again. The broker
    re-indexes it at every start (Q6); recover does not index again a record of a queue
    it leaves alone that the index holds with every key (a deviation: man
    rmqtool-recover; tests/oracle/test_fixed_point_oracle.py shows the broker's starts):
    the second run changes nothing."""
    root = copy(tmp_path, "crash_midwrite")
    fd.broker_not_a_fixed_point_misnamed_queue(root)
    runs = _recover_runs(capsys, tmp_path, root)
    assert all("09223372036854775807" in r.err for r in runs)
    assert _codes(runs) == [5, 4, 4] and _settled(runs)


def test_a_queue_file_renamed_unaligned_is_left_alone_and_recover_settles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seeds 1004319, 1005570, 1007561: ``crash_midwrite``'s TopicA/0 file 1920 renamed
    1921. recover leaves the queue alone; its last record (at 770931, never given a unit)
    was indexed by the abnormal dispatch and again by every run's start-up reput (Q6),
    so no run was ever the last. The broker appends the unit to file 1921 and then
    changes nothing (tests/oracle/test_fixed_point_oracle.py: as many entries there): the
    record's three keys are indexed once, and the second run is nothing to do."""
    root = copy(tmp_path, "crash_midwrite")
    fd.queue_file_renamed_unaligned(root)
    runs = _recover_runs(capsys, tmp_path, root)
    assert all("offset 1921 is not a multiple of the file size 640" in r.err for r in runs)
    assert _codes(runs) == [5, 4, 4] and _settled(runs)
    assert fd.entries_at(root, 770931) == 3


def test_recover_twice_is_once_where_the_broker_refuses_the_store_and_a_queue_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1000084: a stray 20-byte ``12`` in ``crash_midwrite``'s TopicA/0. The broker
    refuses to load the store (a queue file of the wrong size); recover leaves the queue
    alone, so its last record never gets its unit and each run's start-up reput dispatched
    it again, re-indexing it (Q6) every time. With no broker behaviour to follow, recover
    does not index again a record the index holds in full: the second run changes nothing.
    (Where the broker loads the store and cannot append the unit either, it re-indexes at
    every start; recover does not: test_recover_indexes_the_record_of_a_queue_it_leaves_alone_once.)"""
    root = copy(tmp_path, "crash_midwrite")
    (root / "consumequeue" / "TopicA" / "0" / "12").write_bytes(bytes(range(20)))
    runs = _recover_runs(capsys, tmp_path, root)
    assert all("consumequeue/TopicA/0: 12: file name is not 20 digits" in r.err for r in runs)
    assert _codes(runs) == [5, 4, 4] and _settled(runs)


def test_a_queue_file_of_another_size_is_left_alone_and_recover_settles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1006009: ``clean`` with an absurd TOTALSIZE (a cut at 370025) and
    TopicB/0's file 640 truncated to 1 byte, which the broker refuses to load. recover
    read that file as zero-padded, truncated the queue at the end offset (the broker's
    truncateDirtyLogicFiles takes the last file's first unit as written), appended the
    reput's unit after it and replaced the file; the next run's queue walk stopped at the
    zero unit, so it appended again and re-indexed (exit 1): no run was the last. A
    queue with a file of another size is now left alone as a misnamed one is: the file
    stays as it is, the second run changes nothing."""
    root = copy(tmp_path, "clean")
    p = root / "commitlog" / "00000000000000327680"
    b = bytearray(p.read_bytes())
    struct.pack_into(">i", b, 42345, 268435456)
    p.write_bytes(bytes(b))
    short = root / "consumequeue" / "TopicB" / "0" / "00000000000000000640"
    short.write_bytes(short.read_bytes()[:1])
    runs = _recover_runs(capsys, tmp_path, root)
    assert all(
        "00000000000000000640: consumequeue file is 1 bytes" in r.err
        and "neither cuts nor appends" in r.err
        and r.err.count("problem:") == 1
        for r in runs
    )
    assert _codes(runs) == [5, 4, 4] and _settled(runs)
    assert short.stat().st_size == 1


def test_a_queue_file_with_a_19_digit_name_still_counts_for_the_reput_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1000759: ``clean``'s consumequeue/TopicC/0/00000000000000000640 renamed to
    0000000000000000640. The broker loads it as file 640 (any decimal name) and its start
    changes nothing; recover leaves the queue alone but counted only 20-digit files for
    the consume queues' max physical offset, so every run re-dispatched TopicC/0's last
    records and re-indexed one (Q6). Now the queue counts as the broker loads it: nothing
    changes, status 4 (the queue left alone) each run."""
    root = copy(tmp_path, "clean")
    q = root / "consumequeue" / "TopicC" / "0"
    (q / "00000000000000000640").rename(q / "0000000000000000640")
    before = snapshot(root)
    runs = _recover_runs(capsys, tmp_path, root, n=2)
    assert all(
        r.code == 4 and "0000000000000000640: file name is not 20 digits" in r.err and r.shot == before for r in runs
    )


def test_a_misnamed_queue_file_and_a_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy(tmp_path, "clean")
    q = root / "consumequeue" / "TopicA" / "0"
    (q / "00000000000000000640").rename(q / "640")
    p = root / "commitlog" / "00000000000000262144"
    b = bytearray(p.read_bytes())
    b[2000] ^= 0xFF
    p.write_bytes(bytes(b))
    queue_before = {x.name: x.read_bytes() for x in q.iterdir()}
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b1"))
    assert code == 5 and "consumequeue/TopicA/0: 640: file name is not 20 digits" in err
    assert {x.name: x.read_bytes() for x in q.iterdir()} == queue_before
    h1 = snapshot(root)
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b2"))
    assert code == 4 and snapshot(root) == h1


def test_a_stray_commitlog_file_overlapping_the_first_does_not_make_recover_cut_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the soak (seed 100386): a 20-byte stray commitlog/00000000000000000001 made
    the emulated walk end at offset 1, and recover cut every commitlog file after it."""
    root = copy(tmp_path, "crash_midwrite")
    (root / "commitlog" / "00000000000000000001").write_bytes(bytes(20))
    before = snapshot(root)
    for _ in range(2):
        code, out, err = cli(capsys, "recover", "--yes", str(root))
        assert code == 4 and "nothing was changed" in out and "00000000000000000001" in err
        assert snapshot(root) == before


# ---------------------------------------------------------------------------------------
# also seen


def _hold_lock(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('locked', flush=True); time.sleep(60)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.parametrize("command", ["recover", "rebuild-index"])
def test_dry_runs_take_no_lock_and_only_warn_while_a_broker_holds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    root = copy(tmp_path, "crash_midwrite")
    holder = _hold_lock(root / "lock")
    try:
        before = snapshot(root)
        code, out, err = cli(capsys, command, str(root), "--dry-run")
        assert code in (0, 4) and "holds the lock" in err and "warning" in err
        code, out, err = cli(capsys, command, "--yes", str(root))
        assert code == 8 and "holds the lock" in err
        assert snapshot(root) == before
    finally:
        holder.kill()
        holder.wait()
    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(fcntl, "lockf", lambda *a: calls.append(a))
    monkeypatch.setattr(fcntl, "flock", lambda *a: calls.append(a))
    (root / "lock").unlink()
    code, out, err = cli(capsys, command, str(root), "--dry-run")
    assert calls == [] and not os.path.lexists(root / "lock") and code in (0, 4)


def test_a_missing_lock_file_is_not_left_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy(tmp_path, "crash_midwrite")
    (root / "lock").unlink()
    before = snapshot(root)
    code, out, err = cli(capsys, "recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b1"))
    assert code == 1 and not os.path.lexists(root / "lock")
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), "--quiet", "--backup-dir", str(tmp_path / "b2"))
    assert not os.path.lexists(root / "lock")
    if (tmp_path / "b2" / "manifest.json").exists():
        assert cli(capsys, "restore", "--yes", str(tmp_path / "b2"), str(root))[0] == 1  # restored
    assert cli(capsys, "restore", "--yes", str(tmp_path / "b1"), str(root))[0] == 1
    assert snapshot(root) == before


@pytest.mark.parametrize("setup", ["no commitlog dir", "only a stray file"])
def test_dump_commitlog_says_when_it_found_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str
) -> None:
    root = copy(tmp_path, "clean")
    shutil.rmtree(root / "commitlog")
    if setup == "only a stray file":
        (root / "commitlog").mkdir()
        (root / "commitlog" / "README").write_text("x")
    code, out, err = cli(capsys, "dump", "commitlog", str(root), "--format", "jsonl")
    assert jsonl_records(out, code) == [] and "no commitlog records found" in err


def test_dump_checkpoint_names_a_fifo_or_device_for_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy(tmp_path, "clean")
    (root / "checkpoint").unlink()
    os.mkfifo(root / "checkpoint")
    code, out, err = cli(capsys, "dump", "checkpoint", str(root))
    assert code == 8 and "FIFO" in err and "no checkpoint file" not in err
    (root / "checkpoint").unlink()
    (root / "checkpoint").symlink_to("/dev/zero")
    code, out, err = cli(capsys, "dump", "checkpoint", str(root))
    assert code == 8 and "/dev/zero" in err and "no checkpoint file" not in err


def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    """kill -9 of the main process: its pool workers get SIGKILL from the kernel
    (PR_SET_PDEATHSIG), so none stays alive holding the store's files."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux")
    code = (
        "import os, sys, time\n"
        "from rmqtool.recovery.transfer import pool\n"
        "ex = pool(2)\n"
        "futs = [ex.submit(time.sleep, 60) for _ in range(2)]\n"
        "time.sleep(1.0)\n"
        "print(' '.join(str(p) for p in ex._processes), flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert p.stdout is not None
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 2
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.time() + 10
    alive = pids
    while alive and time.time() < deadline:
        alive = [q for q in pids if _alive(q)]
        time.sleep(0.1)
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ")[1][0] not in "ZX"
    except FileNotFoundError:
        return False


def test_restore_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A backup holding a 1 GiB file (sparse here, its bytes still go through restore's
    copy and hash): restore runs under a 1 GiB address-space limit. (The store: ``clean``
    with only its first commitlog file, extended to 1 GiB, the mapped size then: recover
    cuts the GiB after its records. A file of 1 GiB among files of 64 KiB, as this test
    had, makes the broker refuse the store, and recover now refuses it too: issue 33 R11.)"""
    root = copy(tmp_path, "clean")
    for f in sorted((root / "commitlog").iterdir())[1:]:
        f.unlink()
    big = root / "commitlog" / "00000000000000000000"
    with open(big, "r+b") as f:
        f.truncate(1 << 30)
        f.seek((1 << 30) - 4096)
        f.write(b"\1" * 4096)
    before = snapshot(root)
    o = child("recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b1"), mem=TWO_GIB)
    assert o.code in (0, 1, 4, 5)
    if not (tmp_path / "b1" / "manifest.json").exists():
        pytest.skip("recover changed nothing here")
    o = child("restore", "--yes", str(tmp_path / "b1"), str(root), mem=1 << 30, timeout=120)
    assert o.code == 1, o.err  # restored
    assert snapshot(root) == before


def test_repair_of_a_store_without_its_commitlog_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the soak once it ran repair (seed 2324): with commitlog/ removed, repair's
    plan asked the recovery outlook of a store without commitlog files for its cut count
    (internal error: TypeError). Now nothing is to be cut, and repair, like recover and
    the broker, empties the queues (they point at nothing), all of it in the backup."""
    root = copy(tmp_path, "many_files")
    shutil.rmtree(root / "commitlog")
    before = snapshot(root)
    code, _, _ = cli(capsys, "repair", "--dry-run", str(root))
    assert code == 4 and snapshot(root) == before
    code, _, _ = cli(capsys, "repair", "--yes", str(root), "--backup-dir", str(tmp_path / "b"))
    assert code == 1 and not list((root / "consumequeue").rglob("0000*"))
    code, _, _ = cli(capsys, "restore", "--yes", str(tmp_path / "b"), str(root), "--backup-dir", str(tmp_path / "r"))
    assert code == 1 and snapshot(root) == before


def test_repair_changes_nothing_while_a_commitlog_file_is_named_far_past_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1000110: a commitlog file of ``many_files`` renamed to Long.MAX_VALUE made
    repair fill the "gap" up to it with missing-file regions, 65536 bytes at a time, without
    end (a hang). Names that do not tile the offsets stop repair as they stop recover:
    status 4, one line naming the file, nothing changed."""
    root = copy(tmp_path, "many_files")
    (root / "commitlog" / "00000000000000393216").rename(root / "commitlog" / "09223372036854775807")
    before = snapshot(root)
    for argv in (("--dry-run",), ("--yes", "--backup-dir", str(tmp_path / "b"))):
        o = child("repair", str(root), *argv, timeout=60)
        assert o.code == 4 and o.seconds < 30 and "commitlog/09223372036854775807" in o.err, (o.code, o.err)
    assert snapshot(root) == before


def test_a_lone_commitlog_file_named_long_max_value_stops_recover_and_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 1000935: ``delay``'s only commitlog file renamed to 09223372036854775807.
    The first file's alignment was never checked: repair's walk overflowed (internal
    error: OverflowError), verify warned of a numpy overflow, and recover changed the
    index at every run. A misaligned first file now stops recover and repair like any
    misaligned name: status 4, one line, nothing changed."""
    root = copy(tmp_path, "delay")
    (root / "commitlog" / "00000000000000000000").rename(root / "commitlog" / "09223372036854775807")
    before = snapshot(root)
    for argv in (
        ("verify", str(root)),
        ("repair", "--dry-run", str(root)),
        ("repair", "--yes", str(root), "--backup-dir", str(tmp_path / "b1")),
        ("recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b2")),
        ("recover", "--yes", str(root), "--backup-dir", str(tmp_path / "b3")),
    ):
        code, out, err = cli(capsys, *argv)
        assert code == 4 and "commitlog/09223372036854775807" in out + err and "Warning" not in err, (argv, code, err)
    assert snapshot(root) == before


def test_no_damage_reaches_through_a_symlink_out_of_the_store(tmp_path: Path) -> None:
    """Found by the soak: a symlink damage made commitlog/ point at /tmp and a second damage
    listed (and could flip bits in) every file under /tmp. Damage stays in the store."""
    import random

    outside = tmp_path / "outside"
    (outside / "sub" / "0").mkdir(parents=True)
    for name in ("00000000000000000000", "checkpoint", "delayOffset.json", "sub/0/00000000000000000000"):
        (outside / name).write_bytes(bytes(range(256)) * 8)
    before = fd.tree_digest(outside)
    base = copy(tmp_path, "clean")
    for i, kind in enumerate(sorted(fd.KINDS) * 3):
        root = tmp_path / f"s{i}"
        shutil.copytree(base, root, symlinks=True)
        for d in ("commitlog", "config", "consumequeue", "index"):
            shutil.rmtree(root / d, ignore_errors=True)
            (root / d).symlink_to(outside)
        (root / "checkpoint").unlink()
        (root / "checkpoint").symlink_to(outside / "checkpoint")
        fd.KINDS[kind](root, random.Random(i))
        assert fd.tree_digest(outside) == before, kind
        fd.cleanup(root)


# ---------------------------------------------------------------------------------------
# the fuzz run: a fixed budget of damaged stores, every command on each

FUZZ_STORES = int(os.environ.get("RMQTOOL_FUZZ_STORES", "75"))  # every kind from seed 2300; ~23 commands each
FUZZ_SEED = int(os.environ.get("RMQTOOL_FUZZ_SEED", "2300"))


BROKER_SAMPLE = 10  # repaired stores the broker opens, in one batch JVM


def test_fuzz_damaged_stores(tmp_path: Path) -> None:
    """The fuzz run: every command on each damaged store (tests/fuzzdamage.py, run_store:
    issue 23's checks; issue 33's: no debris beside or in the store after any command, a
    dry run agreeing with the real run, repair of the damaged input followed by verify and
    recover --dry-run, its backup restoring the input), then the broker (the oracle
    harness, one JVM) opening up to BROKER_SAMPLE of the stores repair left, each holding
    every intact record of its damaged input with its queue entry."""
    keep = tmp_path / "repaired"
    results = fd.run_many(
        list(range(FUZZ_SEED, FUZZ_SEED + FUZZ_STORES)),
        tmp_path / "runs",
        jobs=2,
        timeout=60,
        mem_bytes=TWO_GIB,
        keep=keep,
        keep_max=BROKER_SAMPLE,
    )
    assert len(results) == FUZZ_STORES
    bad = [(r["seed"], r["kind"], r["desc"][:120], f) for r in results for f in r["failures"]]
    kept = sorted(p for p in keep.iterdir() if (p / "meta.json").exists())[:BROKER_SAMPLE] if keep.exists() else []
    if kept:
        why = fd._oracle_harness().missing_tools()
        if why and os.environ.get("CI", "").lower() == "true":
            bad.append(("broker sample", "-", "-", ("oracle", "missing", why)))
        elif not why:
            bad += [(int(seed), "-", "-", ("broker", cat, detail)) for seed, cat, detail in fd.broker_sample(kept)]
    assert bad == [], "\n".join(map(str, bad[:20]))
    kinds = {r["kind"] for r in results}
    assert kinds == set(fd.KINDS), set(fd.KINDS) - kinds
    assert len(kept) == min(BROKER_SAMPLE, len(kept)) and (kept or FUZZ_STORES < 20)


def test_damages_never_read_a_sparse_huge_file_whole(tmp_path: Path) -> None:
    """The soak's second damage after a sparse_huge one (soak seeds 1001771, 1002165) read
    the 64 GiB file whole and died of its own memory limit: every damage that reads a file
    whole now passes over files above DAMAGE_READ_LIMIT. Run in a forked child under a
    512 MiB address-space limit, every such damage with 40 seeds leaves the huge file as
    it was."""
    import random

    root = tmp_path / "store"
    shutil.copytree(real_store("many_files"), root, symlinks=True)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    huge = sorted((root / "commitlog").iterdir())[-1]
    head = huge.read_bytes()[:4096]
    os.truncate(huge, 64 << 30)
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, only an exit status
        code = 0
        try:
            fd.limit_address_space(512 << 20)
            for kind in ("bitflip", "absurd_length", "zero_range", "truncate", "nul_topic"):
                for seed in range(40):
                    fd.KINDS[kind](root, random.Random(seed))
        except MemoryError:
            code = 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert huge.stat().st_size == 64 << 30
    with open(huge, "rb") as f:
        assert f.read(4096) == head


# ---------------------------------------------------------------------------------------
# found by the soak with --broker-version auto (the soak had pinned 4.9.4 before)

DEEP_JSON = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("argv", [("verify",), ("recover", "--dry-run"), ("info",)])
def test_the_version_guess_survives_a_topics_json_nested_too_deep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]
) -> None:
    from rmqtool.recovery.identify import four_x_shutdown
    from rmqtool.recovery.store import Store

    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy(tmp_path, "clean")
    (root / "config" / "topics.json").write_text(DEEP_JSON, encoding="utf-8")
    assert (
        four_x_shutdown(Store.open(root, 65536, 640, 100, 400)) is None
    )  # not evidence of anything (was: RecursionError)
    before = snapshot(root)
    code, _out, _err = cli(
        capsys, argv[0], str(root), *argv[1:], *(("--broker-version", "auto") if argv[0] != "info" else ())
    )
    assert code in (0, 2, 4, 8)
    assert snapshot(root) == before


def test_the_version_guess_skips_a_truncated_index_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqtool.recovery.identify import index_counting_rule
    from rmqtool.recovery.store import Store

    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy(tmp_path, "delay")
    newest = sorted((root / "index").iterdir())[-1]
    os.truncate(newest, 5039)  # the header and part of the slot table, not a multiple of 4 bytes
    index_counting_rule(Store.open(root, 65536, 640, 100, 400))  # (was: ValueError from numpy)
    for argv in (("recover", "--dry-run"), ("rebuild-index", "--dry-run"), ("repair", "--dry-run")):
        code, _out, _err = cli(capsys, argv[0], str(root), *argv[1:], "--broker-version", "auto")
        assert code in (0, 2, 4, 8)


def test_journal_and_manifest_nested_too_deep_are_clear_errors(tmp_path: Path) -> None:
    from rmqtool.recovery.backups import needed_backups
    from rmqtool.recovery.safety import JOURNAL_DIR
    from rmqtool.recovery.safety.journal import JournalError, read_journal
    from rmqtool.recovery.safety.restoring import ManifestError, load_manifest

    (tmp_path / "manifest.json").write_text(DEEP_JSON, encoding="utf-8")
    with pytest.raises(ManifestError, match="corrupt manifest"):
        load_manifest(tmp_path)
    jdir = tmp_path / "store" / JOURNAL_DIR / "0001"
    jdir.mkdir(parents=True)
    (jdir / "journal.json").write_text(DEEP_JSON, encoding="utf-8")
    with pytest.raises(JournalError, match="not valid JSON"):
        read_journal(jdir)
    assert needed_backups(tmp_path / "store") == set()


def test_a_queue_offset_of_long_max_wraps_as_the_brokers_long_multiply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QUEUEOFFSET = Long.MAX_VALUE (found by the soak, seed 1003386): the broker's
    expectLogicOffset = cqOffset * 20 is a long multiply, -20; the first put of a queue
    then creates its file at 0 and skips the record (expect < the write position), where a
    Python product (1.8e20) made the scalar put start the queue's file there and the batch
    put fail converting it to int64 (rebuild-index and repair: internal error)."""
    from rmqtool.recovery.indexbuild import CQ_SKIPPED_BEHIND, ConsumeQueueWriter

    w = ConsumeQueueWriter(file_size=600)
    assert w.put(1000, 100, 0, (1 << 63) - 1) == CQ_SKIPPED_BEHIND
    assert w._write == 0 and w._last_from == 0
    root = copy(tmp_path, "delay")
    p = root / "commitlog" / "00000000000000000000"
    b = bytearray(p.read_bytes())
    assert struct.unpack_from(">i", b, 851 + 4)[0] == -626843481  # (MAGICCODE: a record starts at 851)
    struct.pack_into(">q", b, 851 + 20, (1 << 63) - 1)
    p.write_bytes(bytes(b))
    for argv in (("rebuild-index", "--dry-run"), ("repair", "--dry-run"), ("recover", "--dry-run")):
        code, _out, _err = cli(capsys, argv[0], str(root), *argv[1:])
        assert code in (0, 1, 4, 5, 8)


def test_info_on_a_sparse_queue_file_reads_only_its_data(tmp_path: Path) -> None:
    """``info`` looked for a queue's first and last unit over every unit of its files: a
    queue file sparse-extended to 1 GiB made 53 million-unit arrays (1.2 GB resident,
    0.67 s; now 39 MB, 0.23 s): only the file's data extents are looked at. A file of 64
    GiB, which could not even be mapped under the 2 GiB limit (status 8, the one line
    naming it), is now mapped only to the queue file size, as the broker maps it (issue 33
    R8): info works on it too."""
    root = copy(tmp_path, "clean")
    q = root / "consumequeue" / "TopicB" / "0"
    last = sorted(q.iterdir())[-1]
    os.truncate(last, 1 << 30)
    o = child("info", str(root), "--format", "json")
    assert o.code == 0 and not o.hang and not o.memory, o.err
    os.truncate(last, 64 << 30)
    o = child("info", str(root), "--format", "json")
    assert o.code == 0 and not o.memory and "allocate memory" not in o.err, o.err


def test_a_second_cut_is_the_brokers_with_recovers_deviations() -> None:
    """Soak seed 1017050: the first run's cut removed the last files, so the second run (as
    the broker's second start) walked from further back and cut again at a body CRC
    mismatch. The broker's start changed the files it deleted and the queues; recover's
    also the bytes it zero-fills in the file holding the new end and the index entries
    past it (its deviations): the same cut. Without a commitlog cut by the broker, those
    are not excused."""
    theirs = {"commitlog/00000000000000458752", "consumequeue/TopicM/0"}
    ours = {"commitlog/00000000000000393216", "commitlog/00000000000000458752", "consumequeue/TopicM/0", "index"}
    assert ours <= fd.deviation_cover(theirs, ours)
    assert not ours <= fd.deviation_cover({"consumequeue/TopicM/0"}, ours)
    assert not {"consumequeue/TopicA/2"} <= fd.deviation_cover(theirs, {"consumequeue/TopicA/2"})


def test_the_broker_sample_expects_the_queue_offset_repair_writes_back(tmp_path: Path) -> None:
    """Soak seed 2000211 (many_files, TopicM/2's record at 285380 with its QUEUEOFFSET set
    to 2^62; described as ``queue_offset=0``, the value drawn for another field): the body
    CRC does not cover the field, so the harness took the record for intact with the
    damaged value, and the broker sample called it lost when repair wrote its queue
    offset back (116, as man rmqtool-repair says and tests/oracle/test_repair_fields_oracle.py
    judges). The expectation now takes the queue offset the record's queue gives it (its
    neighbours 115 and 117), the value repair wrote; the description names the value
    written."""
    from intact import intact_records

    from rmqtool.formats import commitlog as cl
    from rmqtool.recovery.versions import BrokerProfile

    root, kind, desc = fd.make_store(tmp_path / "s", 2000211)
    assert kind == "absurd_length" and desc.endswith(f"queue_offset={1 << 62} commitlog/00000000000000262144@23236")
    intact = intact_records(root, BrokerProfile.for_version("4.9.4"))
    assert {r["off"]: r["qoff"] for r in intact}[285380] == 1 << 62
    quarantined: list[dict] = []
    regions: list[dict] = []

    def cmd(*argv: str) -> fd.Outcome:
        return fd.run_inprocess(list(argv), 60)

    codes: dict[str, int] = {}
    assert fd.repair_as_planned(root, cmd, tmp_path / "b", None, codes, quarantined, regions) == []
    assert codes["repair"] == 1
    written = cl.decode_message((root / "commitlog" / "00000000000000262144").read_bytes(), 23236).queue_offset
    expected = {r["off"]: r for r in fd._as_repaired(intact, quarantined, regions)}
    queue = sorted((r["off"], r["qoff"]) for r in expected.values() if (r["topic"], r["qid"]) == ("TopicM", 2))
    i = [o for o, _q in queue].index(285380)
    assert written == expected[285380]["qoff"] == 116 == queue[i - 1][1] + 1 == queue[i + 1][1] - 1


@pytest.mark.parametrize("seed", [2000678, 2000719])
def test_a_dledger_store_s_dry_run_replays_its_dispatch_as_the_real_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """Soak seeds 2000609, 2000678, 2000719, 2000736 (DLedger twins of many_files and
    clean, a file of DLedger's removed or a sparse checkpoint): recover --dry-run exited 4
    on a start-up reput of "? records" that the real run found had nothing to write (exit
    0, "0 changes"): the DLedger planner never replayed its dispatch in memory as the
    classic one does (issue 33 R5). Now the dry run says what the real run finds."""
    root, _kind, desc = fd.make_store(tmp_path / "s", seed)
    assert "DLedger twin" in desc
    code, out, err = cli(capsys, "recover", str(root), "--dry-run", "--format", "json", "--broker-version", "4.9.4")
    plan = json.loads(out)["plan"]
    assert code == 0 and plan["summary"]["nothing_to_do"] and plan["summary"]["dispatch_writes"] is False, err
    assert [d["records"] for d in plan["dispatch"] if d["name"] == "startup_reput"] == [0]
    before = fd.tree_digest(root)
    code, _out, err = cli(
        capsys, "recover", str(root), "--yes", "--backup-dir", str(tmp_path / "b"), "--broker-version", "4.9.4"
    )
    assert code == 0 and fd.tree_digest(root) == before, err


def test_the_broker_replay_of_a_dledger_twin_reads_its_fixture_s_config_with_dledger_on(tmp_path: Path) -> None:
    """Soak seed 2000916 (a DLedger twin of crash_midwrite): recover's second run added the
    last record's index keys again, and the broker replay that judges it failed before any
    start, looking for ``crash_midwrite (DLedger twin)/scenario.json``. The twin's config is
    its fixture's with the DLedger commitlog on (without it the broker reads no entry)."""
    root, _kind, desc = fd.make_store(tmp_path, 2000916)
    fixture = desc.split(":", 1)[0]
    assert fixture == "crash_midwrite" + fd.DLEDGER_TWIN and (root / "dledger-n0").is_dir()
    cfg = fd.fixture_config(fixture)
    assert cfg == {**fd.fixture_config("crash_midwrite"), "enableDLegerCommitLog": True}
    assert "enableDLegerCommitLog" not in fd.fixture_config("crash_midwrite")


def test_a_one_byte_commitlog_file_is_a_finding_not_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fuzz seed 2306 (``many_files``, a commitlog file of one byte named past the data's
    end): verify's timer check, whose quick pass walks every file (9e6be76), stopped with
    an internal error (IndexError in batch.plain's gather: a file shorter than an 8-byte
    field has an empty int64 view). The file holds no record: verify reports it (exit 4)."""
    root, _kind, desc = fd.make_store(tmp_path, 2306)
    assert desc == "many_files: far name byte commitlog/00000000000000720896", desc
    code, _out, err = cli(capsys, "verify", str(root), "--quiet")
    assert code == 4 and "internal error" not in err, err


@pytest.mark.parametrize(
    "seed, desc_start",
    [
        (2330, "crash_midwrite (DLedger twin): DLedger twin (1152 entries); absurd phys_offset=-1"),
        (2355, "crash_midwrite (DLedger twin): DLedger twin (1152 entries); dledger entry header byte"),
        (2341, "many_files (DLedger twin): DLedger twin (236 entries, 8 classic files first); sparse middle"),
        (2001199, "clean (DLedger twin): DLedger twin (420 entries); absurd topic=1"),
        (2001326, "delay (DLedger twin): DLedger twin (106 entries); absurd body=268435456"),
        (2001269, "crash_midwrite (DLedger twin): DLedger twin (0 entries, 12 classic files first); config"),
    ],
    ids=["2330", "2355", "2341", "2001199", "2001326", "2001269"],
)
def test_repair_of_a_dledger_store_leaves_no_finding_it_could_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, desc_start: str
) -> None:
    """Fuzz seeds 2330, 2355 and 2341 after repair learnt DLedger stores (c6e6c83): an
    intact message inside an entry with a garbled PHYSICALOFFSET (2330) or QUEUEOFFSET
    (2355) was kept as it was, and verify after repair still reported CL_PHYS_OFFSET_MISMATCH
    / CQ_WRONG_RECORD; repair writes those fields back as on a classic store. A mixed
    store's classic file of another size (2341) was left, the broker refusing the result:
    repair refuses it (exit 8, dry run alike, nothing changed). Seeds 2001199 and 2001326
    (issue 33 soak): an absurd length inside an entry's message; after recover and
    rebuild-index no unit points at the lost message and its topic does not read, so repair
    gave its queue offset no tombstone and appended the queue's later messages one offset
    early (CQ_WRONG_RECORD); the hole now goes to the damaged entry between its two intact
    neighbours, as on a classic store. Seed 2001269: a mixed store whose member holds no
    entry yet; the broker then recovers the classic files as a classic store (the ledger
    would begin after them), but repair planned DLedger's empty ledger, ending the data at 0
    and zeroing the checkpoint (CKPT_ZERO after it); it repairs such a store as a classic
    one. Each failed before."""
    monkeypatch.setenv("RMQTOOL_BROKER_VERSION", "4.9.4")
    _root, _kind, desc = fd.make_store(tmp_path / "probe", seed)
    assert desc.startswith(desc_start), desc
    (res,) = fd.run_many([seed], tmp_path / "runs", jobs=1, timeout=60, mem_bytes=TWO_GIB)
    assert res["failures"] == [], res["failures"]


def test_repair_refuses_a_mixed_dledger_store_with_a_far_named_classic_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fuzz seed 2001160 (issue 33 soak): a mixed DLedger store (two classic files first)
    with a one-byte file named far ahead in its classic commitlog/ directory. The broker
    loads every file of commitlog/ and refuses one of another size, wherever its name puts
    it; repair checked the sizes of the classic files below the divided offset only, planned
    an index rebuild, exited 0 and left FILE_WRONG_SIZE. It refuses now (exit 8, dry run
    alike, nothing changed), as for a classic file of another size below that offset."""
    monkeypatch.setenv("RMQTOOL_BROKER_VERSION", "4.9.4")
    root, _kind, desc = fd.make_store(tmp_path / "probe", 2001160)
    assert desc.endswith("far name byte commitlog/00000000006553665536"), desc
    before = fd.tree_digest(root)
    for extra in (["--dry-run"], ["--yes", "--backup-dir", str(tmp_path / "bk")]):
        assert run(["repair", str(root), "-q", *extra]) == 8
        err = capsys.readouterr().err
        assert "commitlog/00000000006553665536" in err and "mixed DLedger store" in err, err
        assert fd.tree_digest(root) == before
    assert not (tmp_path / "bk").exists()
