"""Finding codes and check reasons are typed (issue 32): ``FindingCode`` and ``check.Reason``
are ``StrEnum``\\ s whose values are the stable codes; code names members, never bare
strings, so a misspelt code fails the type check. (That the output stays byte for byte
what it was: tests/test_golden_output.py.)"""

from __future__ import annotations

import ast
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rmqtool.recovery import check as ck
from rmqtool.recovery.findingcodes import FindingCode
from rmqtool.recovery.verify.report import CODES, finding
from rmqtool.recovery.versions import BrokerProfile

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "data" / "golden"


# --------------------------------------------------------------------------- typed codes


def test_the_registry_holds_every_member_and_nothing_else() -> None:
    assert list(CODES) == list(FindingCode)  # (the man page's order: tests/test_verify.py checks the page)
    assert all(type(c) is FindingCode and c.value == c.name for c in CODES)
    assert finding(FindingCode.CL_BODY_CRC, None, None, None, "m").severity == "error"


def _sources() -> list[Path]:
    out: list[Path] = []
    for folder in ("formats", "recovery", "rmqtool"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).parts
            if rel[0] == "rmqtool" and len(rel) > 1 and (ROOT / "rmqtool" / rel[1]).is_symlink():
                continue
            out.append(p)
    return out


def test_the_core_and_the_cli_write_finding_codes_as_members() -> None:
    """No string literal of the core or the CLI is a finding code (docstrings and
    ``__all__`` aside): code names members, which the type check holds to the enum."""
    values = {c.value for c in FindingCode}
    hits = []
    files = _sources()
    assert any(p.name == "report.py" for p in files) and any(p.name == "nextsteps.py" for p in files)
    for p in files:
        if p.name == "findingcodes.py":
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"), str(p))
        skip: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                skip.add(id(body[0].value))  # a docstring
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                skip.update(id(e) for e in ast.walk(node.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in values and id(node) not in skip:
                hits.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert not hits, hits


def test_a_misspelt_code_fails_the_type_check(tmp_path: Path) -> None:
    snippet = tmp_path / "misspelt_code.py"
    snippet.write_text(
        "from rmqtool.recovery.findingcodes import FindingCode\n"
        "from rmqtool.recovery.verify.report import finding\n\n"
        'finding(FindingCode.CL_BODY_CRC, None, None, None, "right")\n'
        'finding(FindingCode.CL_BODY_CRCC, None, None, None, "misspelt member")\n'
        'finding("CL_BODY_CRC", None, None, None, "a bare string")\n',
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, out.stdout + out.stderr
    assert ':5: error: "type[FindingCode]" has no attribute "CL_BODY_CRCC"' in out.stdout
    assert ':6: error: Argument 1 to "finding" has incompatible type "str"' in out.stdout
    with pytest.raises(AttributeError):
        FindingCode.CL_BODY_CRCC  # noqa: B018  (and at run time where it is written)


def test_codes_and_reasons_print_and_travel_as_their_values() -> None:
    assert (
        json.dumps({FindingCode.CL_BODY_CRC: [ck.CRC, ck.SHORT]})
        == '{"CL_BODY_CRC": ["BODY_CRC_MISMATCH", "TRUNCATED"]}'
    )
    assert f"{ck.CRC} {FindingCode.CQ_HOLE}" == "BODY_CRC_MISMATCH CQ_HOLE"
    assert ck.Reason("TRUNCATED") is ck.SHORT and {ck.SHORT: 1}["TRUNCATED"] == 1
    # (worker processes send them back pickled)
    assert pickle.loads(pickle.dumps(ck.CRC)) is ck.CRC
    assert pickle.loads(pickle.dumps(FindingCode.CL_BODY_CRC)) is FindingCode.CL_BODY_CRC
    assert ck.check_record(b"\0" * 64, 0, 64, BrokerProfile.for_version("4.9.4")).reason is ck.Reason.END_OF_DATA
