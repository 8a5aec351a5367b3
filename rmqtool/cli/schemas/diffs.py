"""The schema declarations of ``diff`` (see :mod:`.declare`)."""

from __future__ import annotations

from typing import Any

from .common import B, I, S, arr, command_file, null, obj, summary, verdict_fields

# --------------------------------------------------------------------------------- diff


def diff() -> dict[str, Any]:
    msg_props = {
        "physical_offset": I,
        "size": I,
        "topic": S,
        "queue_id": I,
        "queue_offset": I,
        "msg_id": S,
        "uniq_key": null(S),
        "keys": arr(S),
        "tags": null(S),
        "store_timestamp": I,
    }
    msg_req = ("physical_offset", "size", "topic", "queue_id", "queue_offset", "msg_id", "keys")
    unit_at = null(obj({"commitlog_offset": I, "size": I}, ("commitlog_offset", "size")))
    listed = obj(
        {**msg_props, "in_consume_queue_a": B, "in_consume_queue_b": B, "other_unit": unit_at},
        (*msg_req, "in_consume_queue_a", "in_consume_queue_b"),
    )
    message = obj(
        {"type": {"const": "message"}, "pair": I, "side": {"enum": ["a", "b"]}, "store": S, **listed["properties"]},
        ("type", "pair", "side", "store", *msg_req),
    )
    side_counts = {
        "count": I,
        "bytes": I,
        "moved": I,
        "first_store_timestamp": null(I),
        "last_store_timestamp": null(I),
        "truncated": B,
    }
    only = obj({**side_counts, "messages": arr(listed)}, tuple(side_counts) + ("messages",))
    only_head = obj(side_counts, tuple(side_counts))
    at = null(
        obj(
            {**msg_props, "status": S, "field": S},
            ("physical_offset", "status"),
        )
    )
    divergence = null(
        obj(
            {"first_differing_byte": I, "record_offset": I, "a": at, "b": at},
            ("first_differing_byte", "record_offset", "a", "b"),
        )
    )
    index = obj(
        {
            "files": I,
            "entries": I,
            "begin_phy_offset": null(I),
            "end_phy_offset": null(I),
            "begin_timestamp": null(I),
            "end_timestamp": null(I),
        },
        ("files", "entries"),
    )
    ientry = obj({"commitlog_offset": I, "key_hash": I}, ("commitlog_offset", "key_hash"))
    ionly = obj({"count": I, "entries": arr(ientry)}, ("count", "entries"))
    index_entries = obj(
        {"only_on_a": ionly, "only_on_b": ionly, "in_both": I, "problems": arr(S)},
        ("only_on_a", "only_on_b", "in_both", "problems"),
    )
    qunit = obj({"commitlog_offset": I, "size": I, "tags_code": I}, ("commitlog_offset", "size", "tags_code"))
    queue_props = {
        "topic": S,
        "queue_id": I,
        "a_queue_offsets": null(arr(I)),
        "b_queue_offsets": null(arr(I)),
        "first_difference": null(obj({"queue_offset": I, "a": qunit, "b": qunit}, ("queue_offset", "a", "b"))),
        "differing_units": I,
    }
    queue_req = ("topic", "queue_id", "a_queue_offsets", "b_queue_offsets", "first_difference", "differing_units")
    queue = obj({"type": {"const": "queue"}, "pair": I, **queue_props}, ("type", "pair", *queue_req))
    table = null(
        obj(
            {
                "only_a": arr(S),
                "only_b": arr(S),
                "changed": arr(obj({"name": S, "fields": arr(S)}, ("name", "fields"))),
            },
            ("only_a", "only_b", "changed"),
        )
    )
    co_props = {"topic": S, "group": S, "queue_id": I, "a": null(I), "b": null(I)}
    config = obj(
        {
            "topics": table,
            "subscription_groups": table,
            "consumer_offsets": null(obj({"differ": arr(obj(co_props, tuple(co_props)))}, ("differ",))),
            "problems": arr(S),
        },
        ("topics", "subscription_groups", "consumer_offsets", "problems"),
    )
    pair_head = {
        "a": S,
        "b": S,
        "a_first_offset": I,
        "a_end_offset": I,
        "b_first_offset": I,
        "b_end_offset": I,
        "overlap": null(obj({"from": I, "to": I}, ("from", "to"))),
        "hash": S,
        "range_bytes": I,
        "relation": {"enum": ["identical", "prefix", "diverged", "disjoint"]},
        "behind": null({"enum": ["a", "b"]}),
        "lag_bytes": null(I),
        "gap_bytes": I,
        "ranges_hashed": I,
        "bytes_hashed": I,
        "divergence": divergence,
        "starts_later": obj({"side": {"enum": ["a", "b"]}, "bytes": I}, ("side", "bytes")),
    }
    pair_req = ("a", "b", "relation", "divergence", "behind", "lag_bytes", "ranges_hashed")
    pair_doc = obj(
        {
            **pair_head,
            "only_on_a": only,
            "only_on_b": only,
            "consume_queues": obj(
                {"queues": I, "same": I, "differ": arr(obj(queue_props, queue_req))}, ("queues", "same", "differ")
            ),
            "index": obj({"a": index, "b": index, "entries": index_entries}, ("a", "b", "entries")),
            "config": config,
        },
        (*pair_req, "only_on_a", "only_on_b", "consume_queues", "index", "config"),
    )
    pair = obj(
        {
            "type": {"const": "pair"},
            "pair": I,
            **pair_head,
            "only_on_a": only_head,
            "only_on_b": only_head,
            "queues_differ": I,
            "index": obj({"a": index, "b": index, "entries": index_entries}, ("a", "b", "entries")),
        },
        ("type", "pair", *pair_req, "only_on_a", "only_on_b", "queues_differ", "index"),
    )
    entry = arr(I)  # [epoch, start offset] or [epoch, start offset, end offset]
    epochs = obj(
        {
            "file": S,
            "present": B,
            "bak_present": B,
            "source": null({"enum": ["main", "bak"]}),
            "entries": arr(entry),
            "cache": arr(entry),
            "main_problem": null(S),
            "bak_problem": null(S),
            "broker_start_fails": null(S),
            "cache_empty_why": null(S),
            "recovered_end_offset": I,
            "recovery_cuts_messages": I,
            "confirm_offset": I,
        },
        ("file", "present", "bak_present", "source", "entries", "cache", "broker_start_fails"),
    )
    rep_props = {
        "store": S,
        "broker_version": S,
        "first_offset": I,
        "end_offset": I,
        "end": S,
        "commitlog_files": I,
        "epochs": epochs,
    }
    rep_req = ("store", "broker_version", "first_offset", "end_offset", "end", "commitlog_files")
    replica = obj({"type": {"const": "replica"}, **rep_props}, ("type", *rep_req))
    behind_cut = null(
        obj(
            {
                "count": I,
                "lost": I,
                "messages": arr(obj({**msg_props, "on_new_master": B}, (*msg_req, "on_new_master"))),
                "truncated": B,
            },
            ("count", "lost", "messages", "truncated"),
        )
    )
    hs_props = {
        "replica": S,
        "outcome": {
            "enum": ["new_replica", "no_consistent_point", "not_aligned", "nothing", "truncate", "does_not_start"]
        },
        "why": null(S),
        "consistent_point": null(I),
        "consistent_epoch": null(I),
        "local_epochs": arr(entry),
        "master_epochs": arr(entry),
        "epochs_removed": arr(entry),
        "epoch_file_rewritten": B,
        "max_offset": I,
        "truncated_bytes": I,
        "behind_cut": behind_cut,
        "copies_from_master_bytes": I,
    }
    handshake = obj(
        {"type": {"const": "handshake"}, "new_master": S, **hs_props}, ("type", "new_master", "replica", "outcome")
    )
    fo_props = {
        "new_master": S,
        "new_epoch": I,
        "outcome": S,
        "own_cut": obj(
            {"from_offset": I, "to_offset": I, "messages": I, "truncate_invalid_msg": B},
            ("from_offset", "to_offset", "messages", "truncate_invalid_msg"),
        ),
        "epochs_after": arr(entry),
        "epochs_removed": arr(entry),
        "epoch_appended": B,
    }
    failover_rec = obj({"type": {"const": "failover"}, **fo_props}, ("type", "new_master", "new_epoch", "outcome"))
    failover_doc = obj(
        {**fo_props, "followers": arr(obj(hs_props, ("replica", "outcome")))},
        ("new_master", "new_epoch", "outcome", "followers"),
    )
    cfg_rec = obj(
        {
            "type": {"const": "config"},
            "pair": I,
            "table": {"enum": ["topics", "subscription_groups"]},
            "name": S,
            "change": {"enum": ["only_a", "only_b", "changed"]},
            "fields": arr(S),
        },
        ("type", "pair", "table", "name", "change", "fields"),
    )
    co_rec = obj({"type": {"const": "consumer_offset"}, "pair": I, **co_props}, ("type", "pair", *co_props))
    # DLedger groups: members, pairs of ledgers, the election, what each member loses
    member_props = {
        "store": S,
        "broker_version": S,
        "member": S,
        "self_id": null(S),
        "library": S,
        "loads": B,
        "load_problem": null(S),
        "data_files": I,
        "begin_index": I,
        "last_index": I,
        "last_term": I,
        "end_offset": I,
        "end": S,
        "committed_index": I,
        "checkpoint_committed_index": null(S),
        "checkpoint_end_index": null(S),
        "curr_term": null(S),
        "vote_leader": null(S),
    }
    entry_props = {"index": I, "term": I, "pos": I, "entry_size": I, "status": S, **msg_props, "field": S}
    entry_at = obj(entry_props, ("index", "term", "pos", "entry_size", "status"))
    lost_at = obj({**entry_props, "on_leader": B}, ("index", "term", "pos", "entry_size", "status", "on_leader"))
    lpair_props = {
        "a": S,
        "b": S,
        "common": null(obj({"from": I, "to": I}, ("from", "to"))),
        "bytes_compared": I,
        "first_unequal_index": null(I),
        "relation": {"enum": ["identical", "prefix", "diverged", "disjoint"]},
        "behind": null({"enum": ["a", "b"]}),
        "a_entry": null(entry_at),
        "b_entry": null(entry_at),
        "common_last_index": I,
        "lag_entries": null(I),
    }
    el_member = obj(
        {"member": S, "last_term": I, "last_index": I, "votes": I, "can_win": B},
        ("member", "last_term", "last_index", "votes", "can_win"),
    )
    el_props = {"group_size": I, "majority": I, "members": arr(el_member), "best": arr(S)}
    trunc_props = {
        "leader": S,
        "member": S,
        "keeps_through_index": I,
        "lost_from_index": null(I),
        "lost_entries": I,
        "lost_bytes": I,
        "lost_committed": I,
        "moved": I,
        "gains_entries": I,
        "truncated": B,
    }
    lpair_stores = {
        "consume_queues": obj(
            {"queues": I, "same": I, "differ": arr(obj(queue_props, queue_req))}, ("queues", "same", "differ")
        ),
        "index": obj({"a": index, "b": index, "entries": index_entries}, ("a", "b", "entries")),
        "config": config,
    }
    dledger_doc = obj(
        {
            "notes": arr(S),
            "members": arr(obj(member_props, tuple(member_props))),
            "pairs": arr(obj({**lpair_props, **lpair_stores}, (*lpair_props, *lpair_stores))),
            "election": obj(
                {
                    **el_props,
                    "outlook": arr(
                        obj(
                            {
                                "leader": S,
                                "followers": arr(
                                    obj({**trunc_props, "entries": arr(lost_at)}, (*trunc_props, "entries"))
                                ),
                            },
                            ("leader", "followers"),
                        )
                    ),
                },
                (*el_props, "outlook"),
            ),
            "diverged": I,
        },
        ("notes", "members", "pairs", "election", "diverged"),
    )
    member_rec = obj({"type": {"const": "member"}, **member_props}, ("type", *member_props))
    lpair_rec = obj(
        {
            "type": {"const": "ledger_pair"},
            "pair": I,
            **lpair_props,
            "index": lpair_stores["index"],
            "queues_differ": I,
        },
        ("type", "pair", *lpair_props, "index", "queues_differ"),
    )
    election_rec = obj({"type": {"const": "election"}, **el_props}, ("type", *el_props))
    trunc_rec = obj({"type": {"const": "truncation"}, **trunc_props}, ("type", *trunc_props))
    lost_rec = obj(
        {"type": {"const": "lost_entry"}, "leader": S, "member": S, **entry_props, "on_leader": B},
        ("type", "leader", "member", "index", "term", "pos", "entry_size", "status", "on_leader"),
    )
    doc = obj(
        {
            "replicas": arr(obj(rep_props, rep_req)),
            "pairs": arr(pair_doc),
            "controller": null(obj({"failover": arr(failover_doc)}, ("failover",))),
            "dledger": null(dledger_doc),
            "diverged": I,
            **verdict_fields(),
        },
        ("replicas", "pairs", "controller", "dledger", "diverged", "schema_version", "verdict", "exit_status"),
    )
    summ = summary(
        "diff",
        {"stores": arr(S), "pairs": I, "diverged": I, "controller_mode": B, "dledger": B},
        ("stores", "pairs", "diverged", "controller_mode", "dledger"),
    )
    defs = {
        "replica": replica,
        "pair": pair,
        "message": message,
        "queue": queue,
        "config": cfg_rec,
        "consumer_offset": co_rec,
        "failover": failover_rec,
        "handshake": handshake,
        "member": member_rec,
        "ledger_pair": lpair_rec,
        "election": election_rec,
        "truncation": trunc_rec,
        "lost_entry": lost_rec,
        "note": obj({"type": {"const": "note"}, "note": S}, ("type", "note")),
        "summary": summ,
        "document": doc,
    }
    return command_file(
        "diff",
        defs,
        [
            "replica",
            "pair",
            "message",
            "queue",
            "config",
            "consumer_offset",
            "failover",
            "handshake",
            "member",
            "ledger_pair",
            "election",
            "truncation",
            "lost_entry",
            "note",
        ],
    )
