"""The plain test of a chain of record starts: now :mod:`recovery.batch.plain` (the one
batch decoder's home); the names stay importable from here."""

from .batch.plain import Plain, crc_failures, plain_records

__all__ = ["Plain", "crc_failures", "plain_records"]
