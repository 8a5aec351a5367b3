"""The optional compiled core (``rmqtool.recovery._ccore``, recovery/_ccore.c): built by
``pip install`` when a C compiler is there; without one the install goes on and
``recovery/ccore.py`` uses its pure-Python versions. Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("rmqtool.recovery._ccore", ["recovery/_ccore.c"], optional=True, extra_compile_args=["-O2"])]
)
