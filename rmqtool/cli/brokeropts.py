"""``--broker-config FILE`` and ``--broker-version auto``: one decorator per command that
resolves, before the command runs, what the broker's own properties file and the store
say (recovery.brokerconf holds the decision table; recovery.identify the inference).

Every honoured setting travels the road its row of ``recovery.brokerconf.DECISIONS``
names (``ROADS``), in one loop (:func:`_walk_roads`): the file, unless the option that
mirrors it is given (explicit options win), fills either the command's parameter (STORE,
the geometry, repair's filler size) or a ``BrokerProfile`` field, which ``make_profile``
sets with ``dataclasses.replace`` and every rule of recovery reads (the option's own
parameter is taken away from the command: the profile is the only road). The options of
the settings are declared here from the same rows. A store or setting rmqtool does not
handle is refused (exit 8) by the destructive commands before anything else; verify
reports it as a finding.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..recovery.brokerconf import (
    ROADS,
    ROCKSDB_EXTRA,
    ROCKSDB_REBUILD_REFUSAL,
    BrokerConf,
    Refusal,
    Road,
    UnsupportedStoreError,
    all_refusals,
    read_broker_conf,
)
from ..recovery.findingcodes import FindingCode
from ..recovery.versions import NEWEST, RELEASES, BrokerProfile, parse_version, supported_range, version_label

F = Callable[..., Any]


class AmbiguousVersion(click.ClickException):
    """--broker-version auto left releases whose recovery differs: a usage error (exit 2),
    one line."""

    exit_code = 2


def _declare(group: str) -> Callable[[F], F]:
    """The options of the honoured settings of ``group`` (see ``Road.group``), in the
    table's order."""

    def deco(f: F) -> F:
        for road in reversed([r for r in ROADS.values() if r.group == group]):
            if road.toggle:
                decls = [f"{road.flag}/--no-{road.flag[2:]}", road.param]
                f = click.option(*decls, default=None, help=road.help)(f)
            elif road.metavar is not None:
                f = click.option(road.flag, road.param, default=None, metavar=road.metavar, help=road.help)(f)
            else:
                f = click.option(road.flag, road.param, is_flag=True, help=road.help)(f)
        return f

    return deco


broker_setting_options = _declare("every")
broker_setting_options.__doc__ = """The options of the recovery settings every store command takes (explicit
options win over --broker-config)."""

recovery_walk_options = _declare("recovery")
recovery_walk_options.__doc__ = """The options of the settings of the broker's recovery walk, for the commands
that run it (recover) or predict it without running it (verify's and repair's outlook,
info --deep, offsets' queue ends)."""


timer_setting_options = _declare("timer")
timer_setting_options.__doc__ = """The options of the 5.x timer store's settings (precision, roll window, timer log
file size), for the commands that read the timer store (timers, dump timerlog|timerwheel,
verify, info, recover, repair)."""


def _explicit(ctx: click.Context, name: str) -> bool:
    src = ctx.get_parameter_source(name)
    return src in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _note(msg: str) -> None:
    click.echo(f"rmqtool: note: {msg}", err=True)


def _walk_roads(ctx: click.Context, conf: BrokerConf | None, kw: dict[str, Any]) -> dict[str, Any]:
    """Every honoured setting along its road: fills the command's parameters in ``kw`` from
    ``conf`` (where not given explicitly) and returns the profile fields to set."""
    fields: dict[str, Any] = {}
    for name, road in ROADS.items():
        if road.param in ("store", "stores"):
            continue  # where the store is: _locate
        given = road.param in kw and _explicit(ctx, road.param)
        if road.field is None:
            if road.param in kw and not given and conf is not None and conf.has(name):
                kw[road.param] = conf.get(name)
            continue
        value = kw.pop(road.param, None)  # the profile is the only road
        if given:
            value = (not value) if road.negated else value
        elif conf is not None and conf.has(name):
            value = conf.get(name)
        else:
            continue  # the broker's default: the profile's
        try:
            fields[road.field] = road.convert(value) if road.convert is not None else value
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=_hint(name, road)) from None
    return fields


def _hint(name: str, road: Road) -> str:
    return f"{road.flag} ({name})"


def _locate(conf: BrokerConf, kw: dict[str, Any], meta: dict[str, Any]) -> None:
    """Where the store is: STORE (export: its one STORE) and the commitlog directory."""
    if "store" in kw and kw.get("store") is None and conf.store_root is not None:
        kw["store"] = conf.store_root
    if "stores" in kw and not kw.get("stores") and conf.store_root is not None:  # export
        kw["stores"] = (conf.store_root,)
    if conf.sets_commitlog_dir:
        meta["commitlog_dir"] = conf.commitlog_dir()
    meta["dledger"] = conf.dledger_hint()


def _rocks_readable(root: Path, r: Refusal) -> Refusal | None:
    """verify: None for a RocksDB consume queue refusal whose database opens (verify checks
    it), else the refusal saying why it cannot be read."""
    if r.code != FindingCode.LAYOUT_ROCKSDB_CQ:
        return r
    from ..recovery.rocksdbcq import unreadable

    why = unreadable(root, r.path)
    if why is None:
        return None
    if "rocksdict" in why and "does not open" not in why:
        why = ROCKSDB_EXTRA
    return Refusal(r.code, r.path, f"a RocksDB consume queue rmqtool cannot read: {why}")


def broker_config_option(kind: str = "read") -> Callable[[F], F]:
    """``kind``: "read" (dump, export: notes only), "verify" (refusals become findings and
    exit 8, in the command), "destructive" (recover, rebuild-index: refusals exit 8, an
    ambiguous auto version exits 2), "restore" (refusals exit 8)."""

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            ctx = click.get_current_context()
            meta = ctx.meta.setdefault("rmqtool.broker", {})
            given = dict(kw)  # (a dry run per group of releases runs the command again from these)
            path = kw.pop("broker_config", None)
            conf = read_broker_conf(path) if path is not None else None
            meta["conf"] = conf
            if conf is not None:
                for n in conf.notes:
                    _note(f"{conf.path}: {n}")
                _locate(conf, kw, meta)
            meta["settings"] = _walk_roads(ctx, conf, kw)
            store = kw.get("store")
            stores: tuple[str | Path, ...] = kw.get("stores") or ()
            # (export: the version of its one store is inferred as for the other commands)
            version = _resolve_version(ctx, kw, store if store is not None or len(stores) != 1 else stores[0], kind)
            home = conf.home_commitlog_dir(version) if conf is not None and version is not None else None
            if conf is not None and home is not None:  # 4.6.0-4.9.3
                meta["commitlog_dir"], why = home
                _note(f"{conf.path}: {why}")
            if store is not None and kind in ("destructive", "restore", "verify"):
                refusals = all_refusals(Path(store), conf, version)
                if kind == "verify" or ctx.info_name in ("rebuild-index", "recover", "repair", "restore"):
                    # (verify checks batch consume queues: its BCQ_* findings; rebuild-index
                    # writes them as the broker's reput does, recover as its recovery does,
                    # repair as rebuild-index from the repaired commitlog; restore puts back
                    # the bytes those commands backed up)
                    refusals = [r for r in refusals if r.code != FindingCode.LAYOUT_BATCH_CQ]
                if kind == "verify" or ctx.info_name == "recover":
                    # ... and RocksDB consume queues (RCQ_*) that rocksdict opens; one it does
                    # not (or rocksdict missing) stays refused, saying why (recover: leaves the
                    # database as it is, or refuses where the broker's start would write into it)
                    refusals = [r for r in (_rocks_readable(Path(store), r) for r in refusals) if r is not None]
                if kind == "verify" or ctx.info_name == "recover":
                    from ..recovery.rocksdbcq import layout_shows_setting

                    refusals = [r for r in refusals if not layout_shows_setting(Path(store), conf, r)]
                if ctx.info_name == "rebuild-index":
                    refusals = [
                        Refusal(r.code, r.path, f"{r.message}: {ROCKSDB_REBUILD_REFUSAL}")
                        if r.code == FindingCode.LAYOUT_ROCKSDB_CQ
                        else r
                        for r in refusals
                    ]
                cl_dir = meta.get("commitlog_dir")
                if (
                    conf is not None
                    and cl_dir is not None
                    and kind != "verify"
                    and Path(os.path.abspath(cl_dir)) != Path(os.path.abspath(store)) / "commitlog"
                ):
                    refusals.append(conf.commitlog_outside_store(cl_dir))
                refusals = [*meta.get("version_refusals", []), *refusals]
                meta["refusals"] = refusals
                if refusals and kind != "verify":
                    r = refusals[0]
                    more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
                    raise UnsupportedStoreError(
                        f"refused, nothing changed: {r.message}{more}",
                        Path(store) / r.path if r.code != FindingCode.UNSUPPORTED_SETTING else r.path,
                    )
            if meta.get("ambiguous") is not None:
                raise meta["ambiguous"]
            groups = meta.pop("version_groups", None)
            if groups is not None:
                # a dry run without a release: one plan per group of candidates (issue 34, pain 8)
                from .versiongroups import run_per_group

                def again(k: dict[str, Any]) -> int:
                    for key in ("version_refusals", "refusals", "ambiguous", "version"):
                        meta.pop(key, None)
                    return int(wrapper(*args, **k))

                return run_per_group(ctx.info_name or "", groups, again, given, bool(given.get("quiet")))
            return f(*args, **kw)

        return click.option(
            "--broker-config",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            metavar="FILE",
            help="The broker's own properties file (mqbroker -c FILE): STORE, the commitlog directory, the geometry "
            "and the recovery settings are read from it (explicit options win); settings rmqtool does not "
            "implement are refused.",
        )(wrapper)

    return deco


def _resolve_version(ctx: click.Context, kw: dict[str, Any], store: Any, kind: str) -> tuple[int, int, int] | None:
    meta = ctx.meta["rmqtool.broker"]
    v = kw.get("broker_version")
    if v is None:
        return None
    if v != "auto":
        try:
            given = parse_version(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--broker-version") from None
        if ctx.get_parameter_source("broker_version") == click.core.ParameterSource.COMMANDLINE:
            # (RMQTOOL_BROKER_VERSION is a default for every store a shell or a test run
            # touches: only the release given for this store on its command line is checked)
            _refuse_contradicted(given, v, store, kw, meta)
        return given
    if store is None:
        return None
    from ..recovery.store import Store  # start-up time: numpy and the schemas, when a store is opened

    try:
        s = Store.open(
            store,
            kw.get("commitlog_file_size"),
            kw.get("cq_file_size"),
            kw.get("index_slot_num"),
            kw.get("index_num"),
            commitlog_dir=meta.get("commitlog_dir"),
            dledger=meta.get("dledger"),
        )
    except Exception:  # noqa: BLE001 - not a store: the command itself says so
        return None
    # (identify reads the store and pulls in the batch decoder: imported when a command
    # asks for auto, not at every start-up, about 50 ms)
    from ..recovery.identify import Inference, infer_version, narrow_for_store, newer_release_evidence

    newer = newer_release_evidence(s.root)
    if newer:
        # the policy for a release rmqtool does not know yet (man rmqtool, BROKER VERSIONS)
        newest = version_label(NEWEST)
        more = f" (and {len(newer) - 1} more)" if len(newer) > 1 else ""
        meta["version_refusals"] = [
            Refusal(
                FindingCode.LAYOUT_NEWER_RELEASE,
                str(store),
                f"{newer[0]}{more}: a RocketMQ release newer than rmqtool knows ({supported_range()}) wrote this "
                f"store; to judge it as the newest one rmqtool knows, give --broker-version {newest} "
                "(at your own risk: man rmqtool, BROKER VERSIONS)",
            )
        ]
        if kind in ("destructive", "restore", "verify"):
            return None
        _note(f"--broker-version auto: {meta['version_refusals'][0].message}")
    inf = infer_version(s)
    if not inf.candidates:
        meta["version_refusals"] = [
            Refusal(
                FindingCode.VERSION_CONTRADICTION,
                str(store),
                f"--broker-version auto: the store's evidence contradicts itself ({inf.describe_evidence()}): "
                "no one release wrote it as it is; give the release the broker runs with --broker-version",
            )
        ]
        if kind in ("destructive", "restore", "verify"):
            return None
        _note(meta["version_refusals"][0].message)
        inf = Inference(list(RELEASES), inf.evidence)
    if inf.ambiguous and kind != "destructive":
        # quirk Q8 read back from a full index file is evidence for every command: a
        # read-only one then judges the index by the release that counted it so
        from ..recovery.identify import index_counting_rule

        counted = {BrokerProfile(v).hash_slot_count_every_put for v in inf.candidates}
        rule = index_counting_rule(s) if len(counted) > 1 else None
        if rule is not None:
            every = rule[0] == "every_put"
            inf = Inference(
                [v for v in inf.candidates if BrokerProfile(v).hash_slot_count_every_put == every],
                [*inf.evidence, rule[1]],
                inf.moot,
            )
    if inf.ambiguous and kind == "destructive":
        # what this command would do with each candidate: releases that recover this store
        # identically (the quirks between them cannot act on it) are no longer told apart
        mode = None
        if ctx.info_name == "recover":
            normal = kw.get("normal")
            mode = (
                ("abnormal" if s.abort_present else "normal")
                if normal is None
                else ("normal" if normal else "abnormal")
            )
        inf = narrow_for_store(s, inf, ctx.info_name or "", mode)
    if inf.ambiguous and kind == "destructive" and kw.get("dry_run") and kw.get("salvage_to") is None:
        # "what would the broker do?" has an answer per group of candidates: the command
        # runs once per group (after the refusals, which come first: exit 8)
        meta["version_groups"] = inf
        return None
    if inf.ambiguous and kind == "destructive":  # raised after the refusals (which come first: exit 8)
        example = ".".join(map(str, inf.assumed()))
        meta["ambiguous"] = AmbiguousVersion(
            f"--broker-version auto: the store leaves releases that recover it differently: {inf.describe_candidates()} "
            f"({inf.describe_evidence()}); give the release the broker runs, e.g. --broker-version {example} "
            f"or RMQTOOL_BROKER_VERSION={example} (the broker's lib/rocketmq-store-VERSION.jar names it)"
        )
        return None
    chosen = inf.assumed()
    label = ".".join(map(str, chosen))
    meta["version"] = label
    kw["broker_version"] = label
    moot = f"; {inf.describe_moot()}" if inf.moot else ""
    if kw.get("quiet"):  # -q: no chatter (the note changes no result; the refusal above still speaks)
        return chosen
    if inf.ambiguous:
        _note(
            f"--broker-version auto: assuming {label} (candidates {inf.describe_candidates()}; {inf.describe_evidence()})"
        )
    elif len(inf.candidates) > 1:
        _note(
            f"--broker-version auto: {_span_of(inf.candidates)} recover this store identically "
            f"({inf.describe_evidence()}{moot}); emulating {label}"
        )
    else:
        _note(f"--broker-version auto: {inf.describe_candidates()} ({inf.describe_evidence()}); emulating {label}")
    return chosen


def _refuse_contradicted(given: tuple[int, int, int], text: str, store: Any, kw: dict[str, Any], meta: Any) -> None:
    """A 4.x release given for a store whose layout only 5.x writes: a usage error (2) with
    the evidence (it was accepted silently, and every rule of the wrong release applied)."""
    if given >= (5, 0, 0) or store is None:
        return
    from ..recovery.identify import five_x_layout
    from ..recovery.store import Store

    try:
        s = Store.open(
            store,
            kw.get("commitlog_file_size"),
            kw.get("cq_file_size"),
            kw.get("index_slot_num"),
            kw.get("index_num"),
            commitlog_dir=meta.get("commitlog_dir"),
        )
    except Exception:  # noqa: BLE001 - not a store: the command itself says so
        return
    why = five_x_layout(s)
    if why is not None:
        raise click.BadParameter(
            f"{text} is a 4.x release, but {why}: the store was written by 5.x; give its release "
            "(--broker-version auto names the candidates)",
            param_hint="--broker-version",
        )


def _span_of(cands: list[tuple[int, int, int]]) -> str:
    def lab(v: tuple[int, int, int]) -> str:
        return ".".join(map(str, v))

    return lab(cands[0]) if len(cands) == 1 else f"{lab(cands[0])}-{lab(cands[-1])}"


def version_for_store(store: Path, kw: dict[str, Any]) -> tuple[str, list[Refusal]]:
    """A command of several STOREs (report): the release to emulate for one of them, and
    what rmqtool refuses in it. ``kw["broker_version"]`` is the release given, or auto
    (resolved for this store as a read-only command resolves it, its note said unless -q);
    the refusals are the evidence auto refuses (a newer release, a contradiction) and the
    layouts and settings rmqtool does not handle, as verify finds them."""
    from ..recovery.versions import DEFAULT_VERSION

    ctx = click.get_current_context()
    meta = ctx.meta.setdefault("rmqtool.broker", {})
    for key in ("version_refusals", "version", "ambiguous"):
        meta.pop(key, None)
    k = dict(kw)
    given = k.get("broker_version") or "auto"
    version = _resolve_version(ctx, k, store, "verify") if given == "auto" else parse_version(given)
    label = given if given != "auto" else (k.get("broker_version") if version is not None else DEFAULT_VERSION)
    refusals = [*meta.pop("version_refusals", []), *all_refusals(Path(store), meta.get("conf"), version)]
    return str(label), refusals


def refusal_findings() -> list[dict[str, Any]]:
    """verify: the refusals the decorator found, as findings (code, severity, file, message)."""
    meta = click.get_current_context().meta.get("rmqtool.broker", {})
    return [
        {
            "code": r.code,
            "severity": "error",
            "file": r.path,
            "pos": None,
            "physical_offset": None,
            "message": f"{r.message}: rmqtool refuses the store (nothing checked)",
            "details": {},
        }
        for r in meta.get("refusals", [])
    ]
