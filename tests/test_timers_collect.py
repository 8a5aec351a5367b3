"""recovery.timers.collect without a record decoded where the store has no timer or delay
record (verify's timer check walked every record of every store with check_record: 9-10 s
CPU on the 1.2 GiB A/B bench store, whose other checks take 2.3 s): the quick pass's result
is the record-by-record walk's on every shape, the real fixtures and the timer fixtures, and
it falls back to that walk where a record of the timer or schedule topic is walked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NAMES, open_timer_fixture, real_store

from rmqtool.recovery import timers
from rmqtool.recovery.shapes import SHAPES, write_shape_store
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import verify_store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


def _collect(store: Store, profile: BrokerProfile, monkeypatch: pytest.MonkeyPatch, quick: bool) -> tuple[Any, int]:
    """(collect's result, record-by-record walks made), the quick pass on or off."""
    walks = []
    real_walk = timers.iter_store_records

    def counted(*a: Any, **kw: Any) -> Any:
        walks.append(1)
        return real_walk(*a, **kw)

    with monkeypatch.context() as m:
        m.setattr(timers, "iter_store_records", counted)
        if not quick:
            m.setattr(timers, "_unscheduled_end", lambda *a: None)
        progress: list[int] = []
        got = timers.collect(store, profile, progress=progress.append)
    assert sum(progress) == sum(f.size for f in store.commitlog)  # (every file reported once)
    return got, len(walks)


def _same(quick: Any, slow: Any) -> None:
    assert (quick.end_offset, quick.min_offset) == (slow.end_offset, slow.min_offset)
    assert (quick.timer, quick.schedule, quick.by_phys) == (slow.timer, slow.schedule, slow.by_phys)


@pytest.mark.parametrize("name", REAL_NAMES)
def test_collect_on_the_real_fixtures(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(real_store(name))
    quick, walked = _collect(store, P494, monkeypatch, True)
    slow, _ = _collect(store, P494, monkeypatch, False)
    _same(quick, slow)
    assert quick.delivered == slow.delivered  # (none has a copy without its scheduled record)
    # the delay fixture holds SCHEDULE_TOPIC_XXXX records: walked record by record; the others
    # are decoded by no walk (before: every store was)
    assert walked == (1 if name == "delay" else 0)
    assert bool(slow.schedule) == (name == "delay")


@pytest.mark.usefixtures("ccore_backend")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_collect_on_every_shape(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = SHAPES[name]
    write_shape_store(
        tmp_path,
        shape,
        40 if name == "bodies_0_4mib" else 300,
        file_size=(16 << 20) if name == "bodies_0_4mib" else (256 << 10),
    )
    store = Store.open(tmp_path)
    quick, walked = _collect(store, shape.profile, monkeypatch, True)
    slow, _ = _collect(store, shape.profile, monkeypatch, False)
    _same(quick, slow)
    assert walked == (1 if slow.timer or slow.schedule else 0)
    if walked == 0:
        assert quick.delivered == {}


@pytest.mark.parametrize("name", ["clean514", "kill514"])
def test_collect_on_the_timer_fixtures(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_timer_fixture(name, tmp_path)
    store = Store.open(tmp_path / "store")
    p514 = BrokerProfile.for_version("5.1.4")
    quick, walked = _collect(store, p514, monkeypatch, True)
    slow, _ = _collect(store, p514, monkeypatch, False)
    assert walked == 1 and slow.timer  # (a timer record: the walk that finds the copies)
    _same(quick, slow)
    assert quick.delivered == slow.delivered


def test_collect_ends_where_a_damaged_walk_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_shape_store(tmp_path, SHAPES["gen_commitlog"], 300, file_size=256 << 10)
    store = Store.open(tmp_path)
    f = store.commitlog[-1]
    data = f.path.read_bytes()
    pos = 0
    for _ in range(10):  # the MAGIC of the last file's eleventh record zeroed
        pos += int.from_bytes(data[pos : pos + 4], "big")
    with open(f.path, "r+b") as fh:
        fh.seek(pos + 4)
        fh.write(bytes(4))
    quick, walked = _collect(store, P494, monkeypatch, True)
    slow, _ = _collect(store, P494, monkeypatch, False)
    _same(quick, slow)
    assert walked == 0 and quick.end_offset == f.base + pos


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of the timer check's two walks (the quick pass, the record-by-record walk)."""
    calls: Counter[str] = Counter()
    for fn in ("_unscheduled_end", "iter_store_records"):
        real = getattr(timers, fn)

        def counted(*a: Any, _real: Any = real, _fn: str = fn, **kw: Any) -> Any:
            calls[_fn] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(timers, fn, counted)
    return calls


@pytest.mark.parametrize("name", REAL_NAMES)
def test_verify_walks_a_clean_commitlog_once(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's timer check takes verify's own walk where that walk took every record the
    check's would (no commitlog or layout finding) and met no timer or schedule record: no
    second walk (before: a record-by-record walk of every store, 7-8 s of 10 on the 1.2 GiB
    bench store). Elsewhere the quick pass or, with such records, the full walk."""
    calls = _counted(monkeypatch)
    rep = verify_store(Store.open(real_store(name)), P494)
    timer = next(c for c in rep.to_dict()["checks"] if c["name"] == "timer")
    expected = {
        "clean": Counter(),
        "many_files": Counter(),
        "delay": Counter({"_unscheduled_end": 1, "iter_store_records": 1}),
        "crash_midwrite": Counter(),
    }
    assert calls == expected[name]
    assert (timer["stats"]["messages"] > 0) == (name == "delay")


def test_verify_of_a_damaged_commitlog_takes_the_quick_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where verify's commitlog check finds something, its walk may have taken other records
    than the timer check's (it resyncs past damage, checks CRCs): the check walks itself."""
    write_shape_store(tmp_path, SHAPES["gen_commitlog"], 300, file_size=256 << 10)
    f = Store.open(tmp_path).commitlog[0]
    with open(f.path, "r+b") as fh:  # a body byte of the first record: its CRC fails
        fh.seek(200)
        b = fh.read(1)
        fh.seek(200)
        fh.write(bytes([b[0] ^ 0xFF]))
    calls = _counted(monkeypatch)
    rep = verify_store(Store.open(tmp_path), P494)
    assert any(c["name"] == "commitlog" and c["errors"] for c in rep.to_dict()["checks"])
    assert calls == Counter({"_unscheduled_end": 1})


def test_collect_on_a_store_of_another_framing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick pass walks entries through the store's framing (tests/wrapframing.py: each
    record in a 48-byte entry): the same result as the record-by-record walk there too."""
    import wrapframing as wf

    from rmqtool.recovery import store as store_mod

    write_shape_store(tmp_path / "classic", SHAPES["gen_commitlog"], 300, file_size=128 << 10, cq=False)
    wf.wrap_store(tmp_path / "classic", tmp_path / "wrapped", P494)
    monkeypatch.setattr(store_mod, "FRAMINGS", [wf.detect])
    store = Store.open(tmp_path / "wrapped")
    assert store.framing is wf.WRAPPED
    quick, walked = _collect(store, P494, monkeypatch, True)
    slow, _ = _collect(store, P494, monkeypatch, False)
    _same(quick, slow)
    assert walked == 0 and quick.end_offset > 2 * (128 << 10)
