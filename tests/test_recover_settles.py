"""recover agrees with itself and settles in one run (issue 33): a dry run never promises
a change the real run does not make (R5), one run leaves nothing for a second after a
missing middle commitlog file or a short file (R7), a store the broker refuses to load is
refused and left as it is (R11), and a deleted middle consume queue file is a problem
that names repair (R13)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
from pathlib import Path

import fuzzdamage as fd
import pytest
from conftest import copy_store

from rmqtool.cli import run

ROLLBACK = 12  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


def _recover(root: Path, tmp_path: Path, *extra: str, name: str = "b") -> tuple[int, dict]:
    """recover on ``root`` (--yes with a backup under ``tmp_path``, unless a dry run):
    its status and its JSON document."""
    args = ["recover", str(root), "-q", "--format", "json", *extra]
    if "--dry-run" not in extra:
        args += ["--yes", "--backup-dir", str(tmp_path / name)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = run(args)
    return rc, json.loads(buf.getvalue()) if buf.getvalue().strip() else {}


def _rollback_after_the_last_message(root: Path) -> int:
    """A copy of ``clean``'s last message written after it as a ROLLBACK transaction (the
    kind of record repair's quarantine records are): the consume queues end before it, so
    the 4.x start-up reput dispatches it at every start, and it reaches no queue and no
    index. Returns its offset."""
    f = root / "commitlog" / "00000000000000327680"
    b = bytearray(f.read_bytes())
    last = 377646 - 327680
    (size,) = struct.unpack_from(">i", b, last)
    pos = last + size
    rec = bytearray(b[last : last + size])
    struct.pack_into(">q", rec, 28, 327680 + pos)  # PHYSICALOFFSET
    (sysflag,) = struct.unpack_from(">i", rec, 36)
    struct.pack_into(">i", rec, 36, (sysflag & ~0xC) | ROLLBACK)
    b[pos : pos + size] = rec
    f.write_bytes(bytes(b))
    return 327680 + pos


def test_a_dispatch_that_writes_nothing_is_nothing_to_do_in_the_dry_run_too(tmp_path: Path) -> None:
    """R5: records after the consume queues' end that reach no queue and no index (a
    ROLLBACK record; repair's quarantine records are such records) made every dry run exit
    4 ("? records" to dispatch) while the real run said "0 changes": the dry run now does
    the dispatch in memory, as the real run does, and finds nothing to do."""
    root = copy_store("clean", tmp_path)
    at = _rollback_after_the_last_message(root)
    before = fd.tree_digest(root)
    rc, doc = _recover(root, tmp_path, "--dry-run")
    assert rc == 0, doc
    plan = doc["plan"]
    assert plan["summary"]["nothing_to_do"] and plan["dispatch_writes"] is False
    assert [(d["name"], d["from_offset"], d["records"]) for d in plan["dispatch"]] == [("startup_reput", at, 1)]
    rc, doc = _recover(root, tmp_path)
    assert rc == 0 and doc.get("result") is None and fd.tree_digest(root) == before


@pytest.mark.parametrize("case", ["zeroed_tail", "no_commitlog"])
def test_after_repair_recover_agrees_with_itself(tmp_path: Path, case: str) -> None:
    """R5, the issue's reproducers: after repair, recover --dry-run exited 4 for ever while
    recover --yes said "0 changes" (a zeroed tail of crash_midwrite's last full file,
    which repair fills with a quarantine record; clean without commitlog/, whose empty
    queue directories the plan said it would destroy). Now the dry run, the real run and
    the dry run after it agree: nothing to do."""
    if case == "zeroed_tail":
        root = copy_store("crash_midwrite", tmp_path)
        p = root / "commitlog" / "00000000000000720896"
        b = bytearray(p.read_bytes())
        b[49336 : 49336 + 16200] = bytes(16200)
        p.write_bytes(bytes(b))
    else:
        root = copy_store("clean", tmp_path)
        shutil.rmtree(root / "commitlog")
    assert run(["repair", str(root), "--yes", "-q", "--backup-dir", str(tmp_path / "r")]) in (0, 1)
    d1, doc1 = _recover(root, tmp_path, "--dry-run", name="d1")
    h = fd.tree_digest(root)
    r, doc = _recover(root, tmp_path, name="r")
    d2, _ = _recover(root, tmp_path, "--dry-run", name="d2")
    assert (d1, r, d2) == (0, 0, 0), doc1["plan"]["summary"]
    assert fd.tree_digest(root) == h


def test_a_deleted_middle_queue_file_is_a_problem_that_names_repair(tmp_path: Path) -> None:
    """R13: with a middle file of a queue of six gone, recover exited 1 ("changed") and left
    the gap, which verify then reported (FILE_GAP): the gap is a problem now (status 5 for
    the run that changes the store, 4 after), named with repair, which writes the queue
    anew; verify's next step for it is repair too."""
    root = copy_store("crash_midwrite", tmp_path)
    (root / "consumequeue" / "TopicA" / "0" / "00000000000000001280").unlink()
    gap = "consumequeue/TopicA/0/00000000000000001920"
    rc, doc = _recover(root, tmp_path, "--dry-run")
    assert rc == 4
    assert [(p["code"], p["path"]) for p in doc["plan"]["problems"]] == [("LAYOUT", gap)]
    assert "rmqtool repair" in doc["plan"]["problems"][0]["message"]
    rc, _ = _recover(root, tmp_path, name="r1")
    assert rc == 5
    rc, _ = _recover(root, tmp_path, name="r2")
    assert rc == 4 and not (tmp_path / "r2").exists()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run(["verify", str(root), "--format", "json"]) == 4
    findings = [f for f in json.loads(buf.getvalue())["findings"] if f["code"] == "FILE_GAP"]
    assert [f["file"] for f in findings] == [gap] and findings[0]["next"].startswith(f"rmqtool repair {root}")
    assert run(["repair", str(root), "--yes", "-q", "--backup-dir", str(tmp_path / "rp")]) == 1
    rc, _ = _recover(root, tmp_path, "--dry-run")
    assert rc == 0


def test_a_missing_middle_commitlog_file_settles_in_one_run(tmp_path: Path) -> None:
    """R7: with ``crash_midwrite``'s file 131072 gone, the abnormal recovery's walk goes from
    file to file across the gap, as the broker's does, but its dispatch stopped at the gap
    (the reput's rule): the checkpoint's logicsMsgTimestamp came from the last record before
    it, and every --abnormal run wrote the checkpoint again (status 5, 5, then 4). The
    dispatch now walks as the recovery walk does: one run, and logicsMsgTimestamp is the
    last record's, as the broker's abnormal start leaves it (the oracle test:
    tests/oracle/test_fixed_point_oracle.py)."""
    root = copy_store("crash_midwrite", tmp_path)
    (root / "commitlog" / "00000000000000131072").unlink()
    codes, shots = [], []
    for i in range(3):
        rc, doc = _recover(root, tmp_path, "--abnormal", name=f"b{i}")
        codes.append(rc)
        shots.append(fd.tree_digest(root))
        if i == 0:
            assert doc["result"]["dispatched"]["abnormal_recovery"] == doc["plan"]["records_valid"] == 1059
    assert codes == [5, 4, 4] and shots[0] == shots[1] == shots[2]
    cp = struct.unpack(">qqq", (root / "checkpoint").read_bytes()[:24])
    assert cp == (0, 1795302160670, 1795302160655)  # physic, logics (the last record's), index


def test_a_store_the_broker_refuses_to_load_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    """R11: with a middle commitlog file of ``many_files`` cut to 30000 bytes the broker
    refuses the store and changes nothing (4.9.4 and 5.x: the oracle test); recover cut at
    the short file, removed every later file (their intact messages to the backup) and
    the broker still refused the result (status 5). It now refuses too: status 8, nothing
    changed, no backup, one line naming the file and repair; the dry run says the same."""
    root = copy_store("many_files", tmp_path)
    short = root / "commitlog" / "00000000000000458752"
    os.truncate(short, 30000)
    before = fd.tree_digest(root)
    for extra in ((), ("--dry-run",), ("--abnormal",)):
        args = ["recover", str(root), "-q", *extra]
        if "--dry-run" not in extra:
            args += ["--yes", "--backup-dir", str(tmp_path / "b")]
        o = fd.run_inprocess(args, 60)
        assert o.code == 8 and o.err.count("\n") == 1, (extra, o.err)
        assert f"{short}: commitlog file is 30000 bytes" in o.err and "rmqtool repair" in o.err
        assert fd.tree_digest(root) == before and not (tmp_path / "b").exists()
    # the next step verify names for it is repair (recover refuses the store)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run(["verify", str(root), "--format", "json"]) == 4
    sizes = [f for f in json.loads(buf.getvalue())["findings"] if f["code"] == "FILE_WRONG_SIZE"]
    assert len(sizes) == 1 and sizes[0]["next"].startswith(f"rmqtool repair {root}")
