"""Typed errors shared by every rmqtool layer.

The core raises these; the CLI (``rmqtool/``) maps them to one-line messages and exit
codes in one place. Every error carries the file and the byte offset it is about, so the
message can name both.
"""

from __future__ import annotations

from pathlib import Path


class RmqToolError(Exception):
    """Base of every error rmqtool raises on purpose."""

    def __init__(self, message: str, path: str | Path | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.offset = offset

    def one_line(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.offset is not None:
                where += f" at offset {self.offset}"
            where += ": "
        return (where + self.message).replace("\n", " ")

    def __str__(self) -> str:
        return self.one_line()


class FormatError(RmqToolError):
    """Bytes that do not decode as the structure they should hold (bad magic, short read,
    absurd length). ``construct_path`` names the schema field where decoding stopped."""

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        offset: int | None = None,
        construct_path: str | None = None,
    ) -> None:
        super().__init__(message, path, offset)
        self.construct_path = construct_path


class StoreLayoutError(RmqToolError):
    """The directory is not a store, or its file names/sizes make it unreadable."""


class RecoveryError(RmqToolError):
    """Recovery cannot continue safely."""
