"""The old name of :mod:`rmqtool.export.parquet`: this module *is* that one once imported,
so attributes set on either are seen by both."""

import sys

from .export import parquet as _parquet

sys.modules[__name__] = _parquet
