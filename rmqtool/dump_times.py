"""ISO 8601 twins of dump's epoch-millisecond fields: the rule lives in
``recovery.times`` (recover's salvage lines use it too); this name stays for the CLI."""

from .recovery.times import FIELDS, add_times, iso_ms, timed

__all__ = ["FIELDS", "add_times", "iso_ms", "timed"]
