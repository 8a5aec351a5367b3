"""The package list in pyproject.toml names every package directory of the tree: a
subpackage left out installs from a checkout (editable) but is missing from a wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"rmqtool": "rmqtool", "formats": "rmqtool.formats", "recovery": "rmqtool.recovery"}


def _package_dirs() -> set[str]:
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if folder == "rmqtool" and rel and rel[0] in ("formats", "recovery"):
                continue  # the symlinks to the core folders, listed under their own names
            found.add(".".join([name, *rel]))
    return found


def test_pyproject_lists_every_package() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = _package_dirs()
    assert {"rmqtool", "rmqtool.formats", "rmqtool.recovery"} <= found
    assert listed == found


def test_every_man_page_is_installed_and_the_readme_says_how_for_an_editable_install(tmp_path: Path) -> None:
    """(Issue 34, pain 10: `pip install -e .`, the README's own line, installs no man page.)
    pyproject.toml installs every page of man/ with a wheel; the README gives the line that
    links them into an editable install's virtualenv, and that line, run in a copy of the
    layout, makes `man` find every page there."""
    import re
    import shutil
    import subprocess

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pages = {Path(p).name for p in conf["tool"]["setuptools"]["data-files"]["share/man/man1"]}
    assert pages == {p.name for p in (ROOT / "man").glob("*.1")}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "an editable install (`pip install -e .`) installs no man page" in readme
    line = next(b.strip() for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "share/man/man1" in b)
    work = tmp_path / "checkout"
    shutil.copytree(ROOT / "man", work / "man")
    (work / ".venv" / "bin").mkdir(parents=True)
    env = {"PATH": f"{work / '.venv' / 'bin'}:/usr/bin:/bin", "MANPAGER": "cat", "LANG": "C"}

    def man_finds() -> str | None:
        m = subprocess.run(["man", "-w", "rmqtool-report"], env=env, capture_output=True, text=True, timeout=30)
        return m.stdout.strip() if m.returncode == 0 else None

    has_man = shutil.which("man") is not None
    if has_man:
        assert man_finds() is None  # (not before the link)
    p = subprocess.run(["bash", "-c", line], cwd=work, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    linked = work / ".venv" / "share" / "man" / "man1"
    assert {x.name for x in linked.iterdir()} == pages
    assert all((linked / x).resolve() == (work / "man" / x).resolve() for x in pages)
    if has_man:
        found = man_finds()
        assert found is not None and Path(found).resolve() == (work / "man" / "rmqtool-report.1").resolve()
