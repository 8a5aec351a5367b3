"""The old name of :mod:`rmqtool.export.parquet`: this module *is* that one once imported,
so attributes set on either are seen by both."""

import sys
from typing import TYPE_CHECKING

from .export import parquet as _parquet

if TYPE_CHECKING:  # what type checkers and IDEs see here
    from .export.parquet import *  # noqa: F403

sys.modules[__name__] = _parquet
