"""One column spec per record type (recovery/records.py) serves dump's table, the export's
columns and verify's findings table: each names only fields the records have."""

from __future__ import annotations

from typing import Any

from conftest import real_store

from rmqtool.cli.export.rows import MARK_COLUMNS, columns_for
from rmqtool.cli.options import make_profile
from rmqtool.recovery import records as rec
from rmqtool.recovery.query import iter_cq_entries, iter_index
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import Finding


def _keys(records: Any) -> set[str]:
    return {k for r in records for k in r}


def test_every_dump_field_is_a_column_of_its_spec() -> None:
    store = Store.open(real_store("crash_midwrite"))
    records = list(rec.commitlog_records(store, make_profile("4.9.4"), body_hash=True))
    assert {r["type"] for r in records} >= {"message", "blank"}
    names = {c.name for c in rec.COMMITLOG.columns}
    assert _keys(records) <= names
    assert _keys(iter_cq_entries(store)) <= {c.name for c in rec.CONSUMEQUEUE.columns}
    assert _keys(iter_index(store, entries=True)) <= {c.name for c in rec.INDEX.columns}
    assert _keys([rec.checkpoint_record(store)]) >= set(rec.CHECKPOINT.table)
    finding = Finding("CODE", "error", "commitlog/0", 0, 0, "message").to_dict()
    assert set(rec.FINDING.table) <= set(finding)


def test_the_export_columns_are_the_spec_in_export_order() -> None:
    for what, spec in (("commitlog", rec.COMMITLOG), ("consumequeue", rec.CONSUMEQUEUE), ("index", rec.INDEX)):
        cols = columns_for(what)
        assert cols[0] == ("store", "string")
        # commitlog rows end with the export's marks (issue 36: the timer state and copy_of),
        # computed across records by the export driver, not fields a record decodes to
        marks = MARK_COLUMNS if what == "commitlog" else []
        assert cols[1:] == [(c, spec.column(c).type) for c in spec.export] + marks
    assert MARK_COLUMNS == [("state", "string"), ("copy_of", "bigint")]
    assert columns_for("commitlog", with_body=True)[-1] == ("body", "binary")


def test_every_table_column_has_a_heading() -> None:
    for spec in (
        rec.COMMITLOG,
        rec.CONSUMEQUEUE,
        rec.INDEX,
        rec.INDEX_HIT,
        rec.CHECKPOINT,
        rec.CONFIG,
        rec.FINDING,
        rec.CHECK,
    ):
        headed = spec.table_columns()
        assert [k for k, _h in headed] == list(spec.table)
        assert all(h for _k, h in headed)
        assert len({c.name for c in spec.columns}) == len(spec.columns)  # one column per name
