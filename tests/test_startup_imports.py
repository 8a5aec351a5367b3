"""Start-up time (issue 22): each command imports what its own path uses. A fresh
interpreter runs the command through the CLI, as ``python -m rmqtool`` does, and reports
``sys.modules`` afterwards; the modules that only another path needs must not be there.
Not timed, so a regression (one top-level import) is caught by CI, not by a benchmark."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import real_store

# the Spark extra is export's alone; hypothesis is the tests'; tqdm draws bars on a terminal only
NEVER = ("pyspark", "pyarrow", "pandas", "hypothesis", "tqdm")
# what a command's --help needs is click and the option declarations: no store code at all
HELP_NEVER = NEVER + (
    "numpy",
    "construct",
    "crcmod",
    "rich",
    "rmqtool.recovery.store",
    "rmqtool.recovery.safety",
    "rmqtool.recovery.recover",
    "rmqtool.recovery.batch",
    "multiprocessing",
)

_RUN = (
    "import json, sys\n"
    "from rmqtool.cli import run\n"
    "out = sys.argv.pop(1)\n"
    "rc = run(sys.argv[1:])\n"
    "json.dump({'rc': rc, 'modules': sorted(sys.modules)}, open(out, 'w'))\n"
)


def _loaded(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    """The exit status of ``rmqtool ARGS`` in a fresh interpreter and the modules it loaded."""
    out = tmp_path / "modules.json"
    p = subprocess.run([sys.executable, "-c", _RUN, str(out), *args], capture_output=True, text=True, timeout=120)
    assert out.exists(), p.stderr
    doc = json.loads(out.read_text())
    return doc["rc"], set(doc["modules"])


def _present(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` loaded, as a package or any module under it."""
    return [n for n in names if n in modules or any(m.startswith(n + ".") for m in modules)]


def _copy(tmp_path: Path, abort: bool = False) -> Path:
    store = tmp_path / "store"
    shutil.copytree(real_store("clean"), store)
    if abort:
        (store / "abort").write_bytes(b"")
    return store


@pytest.mark.parametrize("command", ["recover", "rebuild-index", "info"])
def test_command_help_loads_no_store_code(tmp_path: Path, command: str) -> None:
    rc, modules = _loaded(tmp_path, command, "--help")
    assert rc == 0 and f"rmqtool.cli.commands.{command.split('-')[0]}" in modules
    assert _present(modules, HELP_NEVER) == []


def test_recover_with_nothing_to_do_loads_no_apply_path(tmp_path: Path) -> None:
    """A normal recovery of a clean store plans and finds nothing to do: the dispatch
    (reput), the writers, the transaction, repair, verify and the committed-offsets code
    stay unloaded."""
    rc, modules = _loaded(tmp_path, "recover", "--normal", "--yes", str(_copy(tmp_path)))
    assert rc == 0 and "rmqtool.recovery.recover.planning" in modules
    assert (
        _present(
            modules,
            NEVER
            + (
                "rmqtool.recovery.recover.applying",
                "rmqtool.recovery.recover.writing",
                "rmqtool.recovery.reput",
                "rmqtool.recovery.repair",
                "rmqtool.recovery.verify",
                "rmqtool.recovery.offsets",
                "rmqtool.cli.commands.offsets",
                "rmqtool.recovery.batch.decoder",
                "rmqtool.recovery.safety.transaction",
            ),
        )
        == []
    )


def test_abnormal_recovery_loads_no_repair_nor_verify(tmp_path: Path) -> None:
    rc, modules = _loaded(tmp_path, "recover", "--abnormal", "--yes", str(_copy(tmp_path, abort=True)))
    assert rc == 1 and "rmqtool.recovery.reput" in modules
    assert (
        _present(
            modules, NEVER + ("rmqtool.recovery.repair", "rmqtool.recovery.verify", "rmqtool.cli.commands.offsets")
        )
        == []
    )


def test_rebuild_index_loads_no_recovery_plan(tmp_path: Path) -> None:
    rc, modules = _loaded(tmp_path, "rebuild-index", "--yes", str(_copy(tmp_path)))
    assert rc == 0 and "rmqtool.recovery.rebuild" in modules
    assert (
        _present(
            modules,
            NEVER
            + (
                "rmqtool.recovery.recover",
                "rmqtool.recovery.repair",
                "rmqtool.recovery.verify",
                "rmqtool.recovery.offsets",
            ),
        )
        == []
    )


def test_verify_loads_no_recovery_nor_dispatch(tmp_path: Path) -> None:
    rc, modules = _loaded(tmp_path, "verify", str(real_store("clean")))
    assert rc == 0 and "rmqtool.recovery.verify.run" in modules
    assert (
        _present(
            modules,
            NEVER
            + (
                "rmqtool.recovery.recover",
                "rmqtool.recovery.reput",
                "rmqtool.recovery.repair",
                "rmqtool.recovery.safety",
                "rmqtool.cli.destructive",
            ),
        )
        == []
    )


def test_dump_commitlog_loads_no_decoder_nor_writers(tmp_path: Path) -> None:
    rc, modules = _loaded(tmp_path, "dump", "commitlog", str(real_store("clean")))
    assert rc == 0 and "rmqtool.recovery.batch.plainrun" in modules
    assert (
        _present(
            modules,
            NEVER
            + (
                "rmqtool.recovery.batch.decoder",
                "rmqtool.recovery.indexbuild",
                "rmqtool.recovery.recover",
                "rmqtool.recovery.safety",
                "rmqtool.recovery.verify",
            ),
        )
        == []
    )


def test_info_loads_no_recovery_nor_verify(tmp_path: Path) -> None:
    rc, modules = _loaded(tmp_path, "info", str(real_store("clean")))
    assert rc == 0 and "rmqtool.recovery.storeinfo" in modules
    assert (
        _present(
            modules,
            NEVER
            + (
                "rmqtool.recovery.recover",
                "rmqtool.recovery.verify",
                "rmqtool.recovery.reput",
                "rmqtool.recovery.repair",
                "rmqtool.recovery.safety.transaction",
                "rmqtool.recovery.safety.apply",
            ),
        )
        == []
    )


@pytest.mark.parametrize("package", ["rmqtool.recovery.batch", "rmqtool.recovery.recover", "rmqtool.recovery.safety"])
def test_lazy_package_names_all_resolve(package: str) -> None:
    """Every name a package exports, its lazily imported ones included, is there (the
    packages' tables of lazy names and their ``__all__`` agree)."""
    mod = importlib.import_module(package)
    missing = [n for n in mod.__all__ if getattr(mod, n, None) is None]
    assert missing == []
    with pytest.raises(AttributeError):
        _ = mod.no_such_name


def test_batch_table_of_lazy_names_is_its_all() -> None:
    import rmqtool.recovery.batch as batch

    assert sorted(n for names in batch._FROM.values() for n in names) == sorted(batch.__all__)


def test_the_split_packages_are_plain_modules_and_keep_their_lazy_submodules_unloaded() -> None:
    """(Issue 32: ``PatchablePackage`` is gone.) ``safety`` and ``recover`` are plain
    modules: a name set on the package stays on the package (tests patch the module that
    uses a name, or the walk's ``TUNING``), and setting one imports no lazy submodule."""
    code = (
        "import types, sys\n"
        "import rmqtool.recovery.safety as s, rmqtool.recovery.recover as r\n"
        "print(type(s) is types.ModuleType, type(r) is types.ModuleType)\n"
        "s.apply_step = 'patched'\n"
        "r.plan_recovery = 'patched'\n"
        "print('rmqtool.recovery.safety.transaction' in sys.modules, 'rmqtool.recovery.recover.applying' in sys.modules)\n"
        "import rmqtool.recovery.recover.planning as p, rmqtool.recovery.safety.transaction as t\n"
        "print(t.apply_step == 'patched', callable(p.plan_recovery))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "False", "False", "False", "True"]


@pytest.mark.parametrize("first", ["s.load_manifest", "import rmqtool.recovery.safety.restoring"])
def test_safety_restore_stays_the_function_when_its_module_loads_lazily(first: str) -> None:
    """``safety.restore`` is a function of a lazily imported submodule (``restoring``, no
    longer of the function's name, which the import system overwrote with the module):
    importing that submodule lazily (through another of its names, or directly) leaves the
    package's ``restore`` the function, as the eager import did."""
    code = (
        "import types\nimport rmqtool.recovery.safety as s\n"
        f"{first}\n"
        "from rmqtool.recovery.safety import restore\n"
        "print(isinstance(restore, types.FunctionType), isinstance(s.restore, types.FunctionType))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
