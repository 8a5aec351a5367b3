"""dump commitlog through the CLI: "not found" says so (stderr, status 1), a malformed id
is a usage error (2), filters repeat (their union), UNIQ_KEYs match in any case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import broker_view, jsonl_records, real_store, scenario

from rmqtool.cli import run

CLEAN = str(real_store("clean"))


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = run(["dump", "commitlog", CLEAN, "--format", "jsonl", *argv])
    out, err = capsys.readouterr()
    return code, jsonl_records(out, code), err


def test_unknown_msg_id_key_and_topic_say_not_found_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    m = scenario("clean")["messages"][3]
    unknown_uniq = "F" * 32
    for argv in (
        ["--msg-id", unknown_uniq],
        ["--key", "NOPE"],
        ["--topic", "NoSuchTopic"],
        ["--from-offset", str(10**12)],
    ):
        code, recs, err = dump(capsys, *argv)
        assert (code, recs) == (1, []), argv
        assert err.startswith("rmqtool: not found:") and argv[1] in err and len(err.splitlines()) == 1
    _, _, err = dump(capsys, "--topic", "NoSuchTopic")
    assert "no consume queue for NoSuchTopic" in err and "3 topics have one" in err  # (not a list of them all)
    code, recs, err = dump(capsys, "--msg-id", m["msg_id"])
    assert code == 0 and len(recs) == 1 and err == ""


@pytest.mark.parametrize("bad", ["XYZ", "0123", "G" * 32, "A" * 33])
def test_malformed_msg_id_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, err = dump(capsys, "--msg-id", bad)
    assert code == 2 and recs == [] and "not a message id" in err and "--key" in err


def test_offset_msg_id_of_another_broker_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    m = scenario("clean")["messages"][3]
    other = "0A000005" + m["msg_id"][8:]  # host 10.0.0.5, same port and offset
    code, _recs, err = dump(capsys, "--msg-id", other)
    assert code == 1 and "10.0.0.5" in err and "another broker" in err


def test_repeated_filters_are_a_union(capsys: pytest.CaptureFixture[str]) -> None:
    msgs = scenario("clean")["messages"]
    a, b = msgs[5], msgs[40]
    code, recs, _ = dump(capsys, "--msg-id", b["msg_id"], "--msg-id", a["uniq_key"])
    assert code == 0 and [r["physical_offset"] for r in recs] == sorted([a["phys_offset"], b["phys_offset"]])
    keys = broker_view("clean")["query_message_by_key"]
    k1, k2 = keys[0], next(k for k in keys if k["key"] != keys[0]["key"])
    want = sorted(
        {o for k in keys if k["key"] in (k1["key"], k2["key"]) for o in k["phys_offsets_whose_message_has_this_key"]}
    )
    code, recs, _ = dump(capsys, "--key", k1["key"], "--key", k2["key"])
    assert code == 0 and [r["physical_offset"] for r in recs] == want
    code, recs, _ = dump(capsys, "--topic", "TopicA", "--topic", "TopicB")
    assert {r["topic"] for r in recs} == {"TopicA", "TopicB"}
    assert len(recs) == sum(1 for m in msgs if m["topic"] in ("TopicA", "TopicB"))
    code, recs, _ = dump(capsys, "--topic", "TopicA", "--queue", "0", "--queue-id", "1")
    assert {r["queue_id"] for r in recs} == {0, 1} and {r["topic"] for r in recs} == {"TopicA"}


def test_uniq_key_in_lower_case_is_found(capsys: pytest.CaptureFixture[str]) -> None:
    m = scenario("clean")["messages"][7]
    for extra in ([], ["--scan"]):
        code, recs, _ = dump(capsys, "--msg-id", m["uniq_key"].lower(), *extra)
        assert code == 0 and [r["physical_offset"] for r in recs] == [m["phys_offset"]], extra


def test_single_files_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    root = real_store("clean")
    run(["dump", "commitlog", str(root / "commitlog" / "00000000000000065536"), "--format", "jsonl"])
    recs = jsonl_records(capsys.readouterr().out)
    assert recs and {r["file"] for r in recs} == {"00000000000000065536"}
    assert all(65536 <= r["physical_offset"] < 131072 for r in recs)
    run(
        [
            "dump",
            "consumequeue",
            str(root / "consumequeue" / "TopicA" / "0" / "00000000000000000640"),
            "--format",
            "jsonl",
        ]
    )
    units = jsonl_records(capsys.readouterr().out)
    assert units and {u["file"] for u in units} == {"consumequeue/TopicA/0/00000000000000000640"}
    assert [u["queue_offset"] for u in units] == list(range(32, 32 + len(units)))
    name = sorted((root / "index").iterdir())[1].name
    run(["dump", "index", str(root / "index" / name), "--format", "jsonl"])
    assert {x["file"] for x in jsonl_records(capsys.readouterr().out)} == {f"index/{name}"}
    assert run(["dump", "index", str(root / "checkpoint")]) == 2  # not an index file


def test_consumequeue_range_and_resolve(capsys: pytest.CaptureFixture[str]) -> None:
    run(
        [
            "dump",
            "consumequeue",
            CLEAN,
            "--topic",
            "TopicB",
            "--queue",
            "0",
            "--from",
            "80",
            "--to",
            "83",
            "--resolve",
            "--format",
            "jsonl",
        ]
    )
    units = jsonl_records(capsys.readouterr().out)
    assert [u["queue_offset"] for u in units] == [80, 81, 82]
    by_off = {m["phys_offset"]: m for m in scenario("clean")["messages"]}
    for u in units:
        assert u["points_to"] == "OK" and u["message"]["physical_offset"] == u["commitlog_offset"]
        assert u["msg_id"] == by_off[u["commitlog_offset"]]["msg_id"] and u["store_time"].endswith("Z")


def test_every_dump_miss_is_not_found_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34, pain 6: dump consumequeue --topic Nope and dump index --key NOPE exited 0."""
    for argv, what in (
        (["consumequeue", CLEAN, "--topic", "Nope"], "no unit matches --topic Nope"),
        (["consumequeue", CLEAN, "--topic", "TopicA", "--queue", "9"], "no unit matches --topic TopicA, --queue-id 9"),
        (["index", CLEAN, "--key", "NOPE"], "no index entry matches --key NOPE"),
    ):
        capsys.readouterr()
        code = run(["dump", *argv, "--format", "jsonl"])
        cap = capsys.readouterr()
        assert code == 1 and jsonl_records(cap.out, 1) == [] and what in cap.err, (argv, code, cap.err)


def test_a_misspelt_topic_gets_did_you_mean_not_every_topic(capsys: pytest.CaptureFixture[str]) -> None:
    for sub in ("commitlog", "consumequeue"):
        capsys.readouterr()
        assert run(["dump", sub, CLEAN, "--topic", "TopicX", "--format", "jsonl"]) == 1
        err = capsys.readouterr().err
        assert "did you mean TopicC or TopicB or TopicA?" in err and "3 topics have one" in err, err
        assert "the topics with one" not in err  # (the list of every topic: 16 KB on a 1,000-topic store)


def test_repeated_filters_are_unions_on_every_dump(capsys: pytest.CaptureFixture[str]) -> None:
    def recs(*argv: str) -> list[dict[str, Any]]:
        capsys.readouterr()
        code = run(["dump", *argv, "--format", "jsonl"])
        return jsonl_records(capsys.readouterr().out, code)

    b0 = recs("consumequeue", CLEAN, "--topic", "TopicB", "--queue", "0")
    b1 = recs("consumequeue", CLEAN, "--topic", "TopicB", "--queue", "1")
    c = recs("consumequeue", CLEAN, "--topic", "TopicC")
    assert b0 and b1 and c
    assert recs("consumequeue", CLEAN, "--topic", "TopicB", "--queue", "0", "--queue", "1") == b0 + b1
    assert recs("consumequeue", CLEAN, "--topic", "TopicC", "--topic", "TopicB", "--queue", "0") == (
        [u for u in c if u["queue_id"] == 0] + b0
    )
    k1 = recs("index", CLEAN, "--key", "ORDER-1")
    k2 = recs("index", CLEAN, "--key", "USER-3")
    both = recs("index", CLEAN, "--key", "USER-3", "--key", "ORDER-1", "--key", "ORDER-1")
    assert k1 and k2 and both == sorted(k1 + k2, key=lambda r: r["commitlog_offset"])


def test_a_msg_id_miss_is_answered_by_the_index_never_a_scan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, pain 6: dump commitlog --msg-id <absent> walked the whole commitlog (45 s on
    1 GiB). The offset in the id and the index answer it: only the records after the
    index's last entry are walked, from that record (not from its file's start), and few
    records are decoded in all (every decode goes through check.check_record)."""
    from rmqtool.recovery import check as ck

    decoded = [0]
    check_record = ck.check_record

    def counting(*a: Any, **k: Any) -> Any:
        decoded[0] += 1
        return check_record(*a, **k)

    monkeypatch.setattr(ck, "check_record", counting)
    store = str(real_store("many_files"))  # 1,300 messages, every one indexed
    for absent in ("0A0000010F2C1B2C3D4E0000FFFF0001", "C0A8000A00002A9F00000000000FFFF0"):
        decoded[0] = 0
        capsys.readouterr()
        code = run(["dump", "commitlog", store, "--msg-id", absent, "--format", "jsonl", "--broker-version", "4.9.4"])
        assert code == 1 and jsonl_records(capsys.readouterr().out, 1) == []
        assert decoded[0] <= 40, (absent, decoded[0])  # was 1,300 and more: every record
    # one big commitlog file: the records past the index's end are walked from there, not
    # from the file's start (on the 1 GiB bench store: every record of the file)
    from rmqtool.recovery.synth import write_synthetic_store

    big = tmp_path / "big"
    write_synthetic_store(big, total_bytes=1_500_000, file_size=4 << 20, body_size=300, topics=3, queues_per_topic=2)
    assert run(["rebuild-index", "--yes", "-q", str(big), "--backup-dir", str(tmp_path / "bk")]) == 1
    decoded[0] = 0
    capsys.readouterr()
    code = run(["dump", "commitlog", str(big), "--msg-id", "0A0000010F2C1B2C3D4EFFFFFFFF0001", "--format", "jsonl"])
    assert code == 1 and decoded[0] <= 40, decoded[0]


def test_a_scan_a_lookup_cannot_avoid_shows_progress(capsys: pytest.CaptureFixture[str]) -> None:
    """--scan (or a store without a usable index) walks the commitlog: a progress bar says so
    (--progress: plain lines on a non-terminal stderr); a lookup through the index shows none."""
    store = str(real_store("many_files"))
    base = ["dump", "commitlog", store, "--format", "jsonl", "--broker-version", "4.9.4", "--progress"]
    capsys.readouterr()
    assert run([*base, "--key", "NOPE", "--scan"]) == 1
    err = capsys.readouterr().err
    assert "rmqtool: dump commitlog: scan: 100% (640.0 KiB of 640.0 KiB)" in err, err
    assert run([*base, "--key", "MKEY-3"]) == 0
    assert "scan:" not in capsys.readouterr().err
