"""The old name of :mod:`rmqtool.export.spark` (``python -m rmqtool.export_spark`` and old
imports): this module *is* that one once imported, so attributes set on either are seen by
both."""

import sys
from typing import TYPE_CHECKING

from .export import spark as _spark

if TYPE_CHECKING:  # what type checkers and IDEs see here
    from .export.spark import *  # noqa: F403

if __name__ == "__main__":
    sys.exit(_spark.main())
sys.modules[__name__] = _spark
