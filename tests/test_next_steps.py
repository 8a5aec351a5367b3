"""Next steps that are checked (issue 34, item 3): every command a finding's next step names
is run on the store it was found on (a dry run where it changes the store) and must do
something there: never "nothing to do". Bit rot in an old commitlog file (the normal
recovery does not read it) names repair, with what a crash would cut there."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import copy_store

from rmqtool.cli import run

V = "4.9.4"


def _flip(path: Path, pos: int, n: int = 8) -> None:
    raw = bytearray(path.read_bytes())
    for i in range(n):
        raw[pos + i] ^= 0xFF
    path.write_bytes(bytes(raw))


def _rot(root: Path) -> None:
    """many_files, 8 body bytes flipped at 5215 of the first file (issue 34, pain 3)."""
    _flip(root / "commitlog" / "00000000000000000000", 5215)


def _last_file(root: Path) -> None:
    _flip(sorted((root / "commitlog").iterdir())[-2], 3000, 2)


def _cq(root: Path) -> None:
    q = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    q.write_bytes(q.read_bytes()[: 20 * 10])


def _index(root: Path) -> None:
    for p in (root / "index").iterdir():
        p.unlink()


def _stray(root: Path) -> None:
    (root / "commitlog" / "stray.txt").write_text("x")


CASES: dict[str, tuple[str, Callable[[Path], None] | None]] = {
    "clean": ("clean", None),
    "delay": ("delay", None),
    "crash_midwrite": ("crash_midwrite", None),
    "many_files": ("many_files", None),
    "rot": ("many_files", _rot),
    "last-file-damage": ("crash_midwrite", _last_file),
    "short-queue": ("clean", _cq),
    "no-index": ("clean", _index),
    "stray": ("crash_midwrite", _stray),
}


def _verify(capsys: pytest.CaptureFixture[str], root: Path) -> list[dict[str, object]]:
    capsys.readouterr()
    run(["verify", str(root), "-q", "--broker-version", V, "--format", "json"])
    findings: list[dict[str, object]] = json.loads(capsys.readouterr().out)["findings"]
    return findings


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_hint_acts_on_its_store(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixture, damage = CASES[case]
    root = copy_store(fixture, tmp_path / "s")
    if damage is not None:
        damage(root)
    ran = set()
    for f in _verify(capsys, root):
        argv = f["next_command"]
        if argv is None:
            assert not str(f["next"]).startswith("rmqtool"), f
            continue
        assert isinstance(argv, list) and str(f["next"]).startswith("rmqtool " + " ".join(argv)), f
        argv = [str(tmp_path / "salvage") if a == "DIR" else a for a in argv]
        if tuple(argv) in ran:
            continue
        ran.add(tuple(argv))
        if argv[0] != "dump":
            assert "--dry-run" in argv, argv  # a command that changes the store is named as its dry run first
        capsys.readouterr()
        code = run([*argv, "--broker-version", V, "-q"] if argv[0] != "dump" else [*argv, "--broker-version", V])
        cap = capsys.readouterr()
        said = cap.out + cap.err
        assert "nothing to do" not in said, (case, f["code"], argv, said[-300:])
        if argv[0] in ("recover", "repair"):
            assert code & 4, (case, argv, code)  # the dry run says a change is needed
        elif argv[0] == "rebuild-index":
            assert "0 to create, 0 to replace, 0 to remove" not in said, (case, argv)
        else:
            assert code == 0 and said.strip(), (case, argv, code)


def test_bit_rot_in_an_old_file_names_repair_and_the_cut_a_crash_would_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: verify exits 4 and said recover, whose dry run said "nothing to do"
    (exit 0). Now the step is repair, its dry run keeps what a crash would cut."""
    root = copy_store("many_files", tmp_path / "s")
    _rot(root)
    crc = next(f for f in _verify(capsys, root) if f["code"] == "CL_BODY_CRC")
    assert crc["next_command"] == ["repair", str(root), "--dry-run"]
    assert "after a crash the broker's abnormal recovery stops here and cuts 1289 messages" in str(crc["next"])
    capsys.readouterr()
    assert run(["recover", str(root), "--dry-run", "-q", "--broker-version", V]) == 0  # recover: the broker's start
    assert run(["repair", str(root), "--dry-run", "-q", "--broker-version", V, "--format", "json"]) == 4
    plan = json.loads(capsys.readouterr().out.splitlines()[-1])["plan"]
    assert plan["intact_records"] == 1299 and len(plan["quarantined"]) == 1


def test_a_setting_the_store_does_not_show_gets_both_outcomes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34, pain 4: on a 5.3 store whose every record carries __CRC32#, verify said
    "cuts 0 records" and named no step, while a broker with forceVerifyPropCRC=true cuts
    the intact records from the first mismatch. Now both outcomes, and a step that acts."""
    import test_identity as ti

    root = tmp_path / "crc"
    recs = ti.crc_store(root, abort=False)
    argv = ["verify", str(root), *ti.GEOM, "--broker-version", "5.3.3", "-q"]
    capsys.readouterr()
    assert run([*argv, "--format", "json"]) == 4
    doc = json.loads(capsys.readouterr().out)
    normal = doc["summary"]["recovery"]["normal"]
    assert normal["records_cut"] == 0
    assert normal["if_force_verify_prop_crc"] == {"stop_offset": recs[3]["offset"], "records_cut": 9}
    f = next(f for f in doc["findings"] if f["code"] == "CL_PROP_CRC")
    assert f["next_command"] == ["repair", str(root), "--dry-run", "--force-verify-prop-crc"]
    assert "with forceVerifyPropCRC=true its recovery stops here and cuts 9 records" in f["next"]
    assert run([*f["next_command"], *ti.GEOM, "--broker-version", "5.3.3", "-q"]) == 4  # repair acts
    assert "nothing to do" not in capsys.readouterr().out
    assert run(argv) == 4
    out = capsys.readouterr().out
    assert (
        f"with forceVerifyPropCRC=true (the usual companion of enabledAppendPropCRC) it stops at offset {recs[3]['offset']} and cuts 9 records"
        in out.replace("\n", " ")
    )
    assert run([*argv, "--force-verify-prop-crc", "--format", "json"]) == 4  # the setting given: one outcome
    normal = json.loads(capsys.readouterr().out)["summary"]["recovery"]["normal"]
    assert "if_force_verify_prop_crc" not in normal and normal["stop_offset"] == recs[3]["offset"]
