"""One road for broker settings (issue 32): recovery.brokerconf's table names, per honoured
setting, the option that mirrors it and where its value lands (a ``BrokerProfile`` field or
a parameter of the command); the CLI walks every row in one loop and names no setting
itself; an override is ``dataclasses.replace(profile, ...)``, never a keyword of a core
function."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest

from rmqtool.cli import COMMANDS, _module_exists
from rmqtool.recovery import broker as br
from rmqtool.recovery import brokerconf as bc
from rmqtool.recovery import check as ck
from rmqtool.recovery.recover import plan_recovery
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.recovery.walks import broker_walk

ROOT = Path(__file__).resolve().parent.parent


def _cli_module(name: str) -> ModuleType:
    """A CLI module wherever the CLI keeps it (rmqtool/cli/NAME.py, or rmqtool/NAME.py
    before the move)."""
    for mod in (f"rmqtool.cli.{name}", f"rmqtool.{name}"):
        try:
            return importlib.import_module(mod)
        except ModuleNotFoundError:
            continue
    raise AssertionError(f"no CLI module {name}")


def _commands() -> Iterator[click.Command]:
    def walk(cmd: click.Command) -> Iterator[click.Command]:
        yield cmd
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                yield from walk(sub)

    for mod in COMMANDS.values():
        if _module_exists(mod):
            yield from walk(importlib.import_module(mod).command)


# --------------------------------------------------------------------------- the table


def test_one_row_per_honoured_setting() -> None:
    # every setting field of the profile is set by exactly one row, every other row lands
    # in a parameter of the command
    fields = [f.name for f in dataclasses.fields(BrokerProfile) if f.name != "version"]
    assert len(fields) >= 5
    assert Counter(r.field for r in bc.ROADS.values() if r.field is not None) == Counter(fields)
    assert set(bc.ROADS) == {n for n, d in bc.DECISIONS.items() if d.road is not None}
    for name, road in bc.ROADS.items():
        assert name in bc.SETTINGS and bc.DECISIONS[name].kind != bc.IRRELEVANT, name
        assert road.flag and road.param and bc.DECISIONS[name].option == road.option
    assert bc.ROADS["checkCRCOnRecover"].field == "check_crc_on_recover" and bc.ROADS["checkCRCOnRecover"].negated
    assert bc.ROADS["messageIndexSafe"].flag == "--message-index-safe"


def test_every_road_is_an_option_of_the_cli_and_every_mirroring_option_a_road() -> None:
    options: dict[str, set[str]] = {}  # flag -> parameter names
    mirrors: list[tuple[str, list[str]]] = []
    arguments: set[str] = set()
    for cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Argument):
                arguments.add(p.name or "")
                continue
            for o in p.opts + p.secondary_opts:
                options.setdefault(o, set()).add(p.name or "")
            m = re.search(r"[Mm]irrors (\w+)", getattr(p, "help", None) or "")
            if m:
                mirrors.append((m.group(1), p.opts))
    assert "store" in arguments and len(options) > 40
    for name, road in bc.ROADS.items():
        if road.flag == "STORE":
            assert road.param == "store"
            continue
        assert options.get(road.flag) == {road.param}, (name, road.flag, options.get(road.flag))
    assert len(mirrors) >= 7
    for name, opts in mirrors:
        assert name in bc.ROADS and bc.ROADS[name].flag in opts, (name, opts)


def test_brokeropts_names_no_setting() -> None:
    """The CLI's broker-settings module walks the table: no setting's name in its text."""
    mod = _cli_module("brokeropts")
    path = Path(inspect.getfile(mod))
    assert path.name == "brokeropts.py"
    text = path.read_text(encoding="utf-8")
    named = sorted(n for n in bc.SETTINGS if re.search(rf"\b{re.escape(n)}\b", text))
    assert not named, named
    assert "ROADS" in text  # (it walks the table)


# --------------------------------------------------------------------------- the loop


def _other(name: str) -> Any:
    """A value of setting ``name`` other than the broker's default."""
    d = bc.DECISIONS[name]
    t = bc.SETTINGS[name].type
    if t == "boolean":
        return not d.default
    if t in ("int", "long"):
        return 4096
    return "1s 2s"


def _conf_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _explicit(road: bc.Road, value: Any) -> tuple[Any, list[str], Any]:
    """A value of the setting in the file, command-line words that set the option against
    it, and the value the setting then has (``value``: the file's non-default value)."""
    if road.toggle:
        return value, ([f"--no-{road.flag[2:]}"] if value else [road.flag]), not value
    if isinstance(value, bool):  # a plain flag: given, it states the non-default value
        return not value, [road.flag], value
    if isinstance(value, int):
        return value, [road.flag, "8192"], 8192
    return value, [road.flag, "3s"], "3s"


def _probe() -> tuple[click.Command, dict[str, Any]]:
    """A store command with every option the table declares (and repair's
    --max-message-size), which keeps what it was called with and its profile."""
    cmdopts = _cli_module("cmdopts")
    brokeropts = _cli_module("brokeropts")
    options = _cli_module("options")
    seen: dict[str, Any] = {}

    @click.command()
    @cmdopts.store_command_options("read", brokeropts.recovery_walk_options)
    @click.option("--max-message-size", type=int, default=4 * 1024 * 1024)
    def probe(broker_version: str, **kw: Any) -> None:
        seen.clear()
        seen.update(kw)
        seen["profile"] = options.make_profile(broker_version)

    return probe, seen


@pytest.mark.parametrize("name", sorted(n for n, r in bc.ROADS.items() if r.flag != "STORE"))
def test_every_road_carries_the_file_and_the_option_wins(name: str, tmp_path: Path) -> None:
    road = bc.ROADS[name]
    probe, seen = _probe()
    value = _other(name)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"{name}={_conf_text(value)}\n", encoding="latin-1")
    base = ["--broker-version", "5.3.3", str(tmp_path)]

    def landed() -> Any:
        if road.field is None:
            return seen[road.param]
        assert road.param not in seen, "the profile is the only road of a profile setting"
        return getattr(seen["profile"], road.field)

    def expect(v: Any) -> Any:
        if road.field is None:
            return v
        return road.convert(v) if road.convert is not None else v

    probe.main(["--broker-config", str(conf), *base], standalone_mode=False)
    assert landed() == expect(value), "from the file"
    in_file, args, wins = _explicit(road, value)
    conf.write_text(f"{name}={_conf_text(in_file)}\n", encoding="latin-1")
    probe.main(["--broker-config", str(conf), *args, *base], standalone_mode=False)
    assert landed() == expect(wins), "the explicit option wins"
    probe.main(base, standalone_mode=False)
    default = bc.DECISIONS[name].default
    if road.field is not None:
        assert landed() == getattr(BrokerProfile.for_version("5.3.3"), road.field) == expect(default)


def test_the_file_and_the_option_give_the_same_profile(tmp_path: Path) -> None:
    probe, seen = _probe()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "checkCRCOnRecover=false\nmessageIndexSafe=true\nforceVerifyPropCRC=true\n"
        "recheckReputOffsetFromCq=true\nmessageDelayLevel=1s 1m\n",
        encoding="latin-1",
    )
    probe.main(["--broker-config", str(conf), "--broker-version", "5.3.3", str(tmp_path)], standalone_mode=False)
    from_file = seen["profile"]
    probe.main(
        [
            "--no-crc",
            "--message-index-safe",
            "--force-verify-prop-crc",
            "--recheck-reput-offset-from-cq",
            "--message-delay-level",
            "1s 1m",
            "--broker-version",
            "5.3.3",
            str(tmp_path),
        ],
        standalone_mode=False,
    )
    want = dataclasses.replace(
        BrokerProfile.for_version("5.3.3"),
        check_crc_on_recover=False,
        message_index_safe=True,
        force_verify_prop_crc=True,
        recheck_reput_offset_from_cq=True,
        delay_levels=(1000, 60_000),
    )
    assert from_file == seen["profile"] == want


def test_a_bad_delay_level_names_the_option_and_the_setting(tmp_path: Path) -> None:
    probe, _seen = _probe()
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s 5x\n", encoding="latin-1")
    with pytest.raises(click.BadParameter) as exc:
        probe.main(["--broker-config", str(conf), "--broker-version", "5.3.3", str(tmp_path)], standalone_mode=False)
    assert "--message-delay-level (messageDelayLevel)" in exc.value.format_message()


# --------------------------------------------------------------------------- no second road


@pytest.mark.parametrize(
    "func, gone",
    [
        (plan_recovery, ("check_crc", "message_index_safe")),
        (br.start_file_index, ("message_index_safe", "check_crc")),
        (br.abnormal_start_index, ("message_index_safe", "check_crc")),
        (ck.check_record, ("force_verify_prop_crc",)),
        (broker_walk, ("force_verify_prop_crc",)),
        (BrokerProfile.for_version, ("delay_levels", "force_verify_prop_crc", "check_crc_on_recover")),
    ],
    ids=lambda x: getattr(x, "__qualname__", "-"),
)
def test_a_setting_reaches_the_core_only_in_the_profile(func: Any, gone: tuple[str, ...]) -> None:
    params = inspect.signature(func).parameters
    assert not set(gone) & set(params), (func.__qualname__, set(gone) & set(params))
    assert "profile" in params or func.__name__ == "for_version"
