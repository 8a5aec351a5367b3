"""``--broker-config FILE`` and ``--broker-version auto``: one decorator per command that
resolves, before the command runs, what the broker's own properties file and the store
say (recovery.brokerconf holds the decision table; recovery.identify the inference).

Explicit options win over the file; the file fills STORE (storePathRootDir), the geometry
options, the recovery switches (--no-crc from checkCRCOnRecover, --message-index-safe,
forceVerifyPropCRC, messageDelayLevel, recheckReputOffsetFromCq) and the commitlog
directory. A store or setting rmqtool does not handle is refused (exit 8) by the
destructive commands before anything else; verify reports it as a finding.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..recovery.brokerconf import BrokerConf, Refusal, UnsupportedStoreError, all_refusals, read_broker_conf
from ..recovery.versions import parse_delay_levels, parse_version

F = Callable[..., Any]

GEOMETRY = (
    ("commitlog_file_size", "mappedFileSizeCommitLog"),
    ("cq_file_size", "mappedFileSizeConsumeQueue"),
    ("index_slot_num", "maxHashSlotNum"),
    ("index_num", "maxIndexNum"),
)


class AmbiguousVersion(click.ClickException):
    """--broker-version auto left releases whose recovery differs: a usage error (exit 2),
    one line."""

    exit_code = 2


def broker_setting_options(f: F) -> F:
    """The recovery settings of broker.conf that have no older rmqtool option, as options
    (explicit options win over --broker-config)."""
    f = click.option(
        "--recheck-reput-offset-from-cq/--no-recheck-reput-offset-from-cq",
        "recheck_reput_offset_from_cq",
        default=None,
        help="Mirrors recheckReputOffsetFromCq (5.x): the start-up reput catches up from the "
        "consume queues' max offset, as 4.x always does (default: false, or the broker config).",
    )(f)
    f = click.option(
        "--message-delay-level",
        default=None,
        metavar="LEVELS",
        help='Mirrors messageDelayLevel: the delay levels, e.g. "1s 5s 10s 30s 1m" (default: the broker\'s '
        "18 levels, or the broker config).",
    )(f)
    f = click.option(
        "--force-verify-prop-crc/--no-force-verify-prop-crc",
        "force_verify_prop_crc",
        default=None,
        help="Mirrors forceVerifyPropCRC (5.2.0+): recovery checks each whole record against its __CRC32# "
        "property instead of the body CRC (default: false, or the broker config).",
    )(f)
    return f


def _explicit(ctx: click.Context, name: str) -> bool:
    src = ctx.get_parameter_source(name)
    return src in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _note(msg: str) -> None:
    click.echo(f"rmqtool: note: {msg}", err=True)


def broker_config_option(kind: str = "read") -> Callable[[F], F]:
    """``kind``: "read" (dump, export: notes only), "verify" (refusals become findings and
    exit 8, in the command), "destructive" (recover, rebuild-index: refusals exit 8, an
    ambiguous auto version exits 2), "restore" (refusals exit 8)."""

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            ctx = click.get_current_context()
            meta = ctx.meta.setdefault("rmqtool.broker", {})
            path = kw.pop("broker_config", None)
            explicit = {
                k: kw.pop(k)
                for k in ("force_verify_prop_crc", "message_delay_level", "recheck_reput_offset_from_cq")
                if k in kw
            }
            conf = read_broker_conf(path) if path is not None else None
            meta["conf"] = conf
            if conf is not None:
                for n in conf.notes:
                    _note(f"{conf.path}: {n}")
                _apply(ctx, conf, kw, meta)
            for k, v in explicit.items():  # explicit options win over the file
                if v is not None:
                    meta[k] = v
            _recovery_walk_settings(conf, kw, meta)
            if meta.get("message_delay_level") is not None:
                try:
                    parse_delay_levels(meta["message_delay_level"])
                except ValueError as exc:
                    raise click.BadParameter(str(exc), param_hint="--message-delay-level (messageDelayLevel)") from None
            store = kw.get("store")
            stores: tuple[str | Path, ...] = kw.get("stores") or ()
            # (export: the version of its one store is inferred as for the other commands)
            version = _resolve_version(ctx, kw, store if store is not None or len(stores) != 1 else stores[0], kind)
            if conf is not None and version is not None and not conf.has("storePathCommitLog"):
                cl_dir = conf.commitlog_dir(version)
                if cl_dir is not None:  # 4.6.0-4.9.3
                    meta["commitlog_dir"] = cl_dir
                    _note(
                        f"{conf.path}: storePathCommitLog is not set: RocketMQ {'.'.join(map(str, version))} reads the "
                        f"commitlog from {cl_dir} (its default up to 4.9.3, whatever storePathRootDir says)"
                    )
            if store is not None and kind in ("destructive", "restore", "verify"):
                refusals = all_refusals(Path(store), conf, version)
                cl_dir = meta.get("commitlog_dir")
                if (
                    cl_dir is not None
                    and kind != "verify"
                    and Path(os.path.abspath(cl_dir)) != Path(os.path.abspath(store)) / "commitlog"
                ):
                    refusals.append(
                        Refusal(
                            "UNSUPPORTED_SETTING",
                            str(conf.path if conf else ""),
                            f"storePathCommitLog={cl_dir}: a commitlog outside STORE/commitlog "
                            "(rmqtool changes only stores laid out under one root)",
                        )
                    )
                meta["refusals"] = refusals
                if refusals and kind != "verify":
                    r = refusals[0]
                    more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
                    raise UnsupportedStoreError(
                        f"refused, nothing changed: {r.message}{more}",
                        Path(store) / r.path if r.code != "UNSUPPORTED_SETTING" else r.path,
                    )
            if meta.get("ambiguous") is not None:
                raise meta["ambiguous"]
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


def _apply(ctx: click.Context, conf: BrokerConf, kw: dict[str, Any], meta: dict[str, Any]) -> None:
    if "store" in kw and kw.get("store") is None and conf.store_root is not None:
        kw["store"] = conf.store_root
    if "stores" in kw and not kw.get("stores") and conf.store_root is not None:  # export
        kw["stores"] = (conf.store_root,)
    for param, name in GEOMETRY:
        if param in kw and kw[param] is None and conf.has(name):
            kw[param] = conf.get(name)
    if conf.has("storePathCommitLog"):
        meta["commitlog_dir"] = conf.commitlog_dir()
    if "no_crc" in kw and not _explicit(ctx, "no_crc") and conf.has("checkCRCOnRecover"):
        kw["no_crc"] = not conf.get("checkCRCOnRecover")
    if "message_index_safe" in kw and not _explicit(ctx, "message_index_safe") and conf.has("messageIndexSafe"):
        kw["message_index_safe"] = conf.get("messageIndexSafe")
    if "max_message_size" in kw and not _explicit(ctx, "max_message_size") and conf.has("maxMessageSize"):
        kw["max_message_size"] = conf.get("maxMessageSize")  # (repair: no filler record is longer)
    for name, key in (
        ("forceVerifyPropCRC", "force_verify_prop_crc"),
        ("messageDelayLevel", "message_delay_level"),
        ("recheckReputOffsetFromCq", "recheck_reput_offset_from_cq"),
    ):
        if conf.has(name):
            meta[key] = conf.get(name)


def _recovery_walk_settings(conf: BrokerConf | None, kw: dict[str, Any], meta: dict[str, Any]) -> None:
    """checkCRCOnRecover and messageIndexSafe as the command will use them (its --no-crc /
    --message-index-safe, already filled from the file by _apply, else the file): kept in
    the context so that make_profile puts them into the profile, which every recovery rule
    (recover's plan, verify's and repair's recovery outlook, info --deep) reads."""
    if "no_crc" in kw:
        meta["check_crc_on_recover"] = not kw["no_crc"]
    elif conf is not None and conf.has("checkCRCOnRecover"):
        meta["check_crc_on_recover"] = bool(conf.get("checkCRCOnRecover"))
    if "message_index_safe" in kw:
        meta["message_index_safe"] = bool(kw["message_index_safe"])
    elif conf is not None and conf.has("messageIndexSafe"):
        meta["message_index_safe"] = bool(conf.get("messageIndexSafe"))


def recovery_walk_options(f: F) -> F:
    """--no-crc and --message-index-safe for the commands that predict the broker's
    recovery without running it (verify's and repair's outlook, info --deep, offsets' queue
    ends): recover has its own, which also change what it does."""
    f = click.option(
        "--message-index-safe",
        is_flag=True,
        help="Mirrors messageIndexSafe=true: the abnormal start file of the broker's recovery this command "
        "predicts also honours the checkpoint's indexMsgTimestamp (default: --broker-config, else false).",
    )(f)
    f = click.option(
        "--no-crc",
        is_flag=True,
        help="Mirrors checkCRCOnRecover=false: the walk of the broker's recovery this command predicts does not "
        "stop at a record whose body CRC fails (verify still checks and reports every CRC; default: "
        "--broker-config, else CRC on).",
    )(f)
    return f


def _resolve_version(ctx: click.Context, kw: dict[str, Any], store: Any, kind: str) -> tuple[int, int, int] | None:
    meta = ctx.meta["rmqtool.broker"]
    v = kw.get("broker_version")
    if v is None:
        return None
    if v != "auto":
        try:
            return parse_version(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--broker-version") from None
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
        )
    except Exception:  # noqa: BLE001 - not a store: the command itself says so
        return None
    # (identify reads the store and pulls in the batch decoder: imported when a command
    # asks for auto, not at every start-up, about 50 ms)
    from ..recovery.identify import infer_version, narrow_for_store

    inf = infer_version(s)
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


def _span_of(cands: list[tuple[int, int, int]]) -> str:
    def lab(v: tuple[int, int, int]) -> str:
        return ".".join(map(str, v))

    return lab(cands[0]) if len(cands) == 1 else f"{lab(cands[0])}-{lab(cands[-1])}"


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
