"""Where ``rmqtool export`` writes: a plain path, a ``file:`` URI, or a Hadoop file system
URI (``hdfs:``, ``s3a:``...). No pyarrow, no pyspark: the CLI checks OUT with it before
any Spark start, the executors' writer (:mod:`rmqtool.cli.export.parquet`) with the same rule."""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def url_scheme(out: str) -> str | None:
    """The URI scheme of ``out`` ("hdfs", "s3a", "file"), None for a plain path. Also
    ``hdfs:/x``, which is what a path argument makes of ``hdfs:///x``."""
    m = _SCHEME.match(out)
    return m.group(1).lower() if m else None


def local_path(out: str) -> str | None:
    """The local path of ``out`` (a plain path or a file: URI), None for other schemes."""
    scheme = url_scheme(out)
    if scheme is None:
        return out
    if scheme != "file":
        return None
    rest = out[len("file:") :]
    if rest.startswith("//"):  # file://host/path or file:///path
        rest = rest[2:]
        rest = rest[rest.index("/") :] if "/" in rest else "/"
    return rest


__all__ = ["local_path", "url_scheme"]
