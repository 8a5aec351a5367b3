"""File and directory names, format markers and the content types of the safety package."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

LOCK_FILE = "lock"
JOURNAL_DIR = ".rmqtool-journal"
JOURNAL_FILE = "journal.json"
STAGING_DIR = "staging"
MANIFEST_FILE = "manifest.json"
CRASH_ENV = "RMQTOOL_TEST_CRASH_AFTER"
JOURNAL_FORMAT = "rmqtool-journal"
MANIFEST_FORMAT = "rmqtool-backup"
FORMAT_VERSION = 2  # 2: digests may describe a zero tail instead of hashing it (see file_digest)
READABLE_VERSIONS = (1, 2)
# Store subdirectories the broker scans; a backup must never live inside them.
BROKER_DIRS = ("commitlog", "consumequeue", "index")

CHUNK = 1 << 20
ZEROS = bytes(CHUNK)
ROLLBACK_STATES = ("staging", "prepared")
FORWARD_STATES = ("applying", "done")

Writer = Callable[[BinaryIO], None]
"""Writes the new content into the file object it is given (opened ``w+b``; it may seek)."""
Data = bytes | bytearray | memoryview | os.PathLike[str] | Writer
"""New file content: bytes, a path whose content is copied, or a :data:`Writer`."""
