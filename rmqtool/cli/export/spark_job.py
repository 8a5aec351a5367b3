"""spark-submit entry point of ``rmqtool export``.

On a cluster::

    python -m rmqtool.cli.export.spark_job --make-zip rmqtool.zip
    spark-submit --master spark://HOST:7077 --py-files rmqtool.zip \\
        "$(python -c 'import rmqtool.cli.export.spark_job as j; print(j.__file__)')" \\
        /data/broker-a/store /data/broker-b/store --to hdfs:///forensics/incident-42

The arguments are those of ``rmqtool export`` (``--master`` is ignored: spark-submit sets
the master). ``--make-zip`` writes the rmqtool package (rmqtool, rmqtool.cli.export, rmqtool.formats,
rmqtool.recovery) into a zip for ``--py-files``; its dependencies (construct, crcmod,
numpy, click) must be installed on every executor, and every executor must read the
stores at the same paths as the driver.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    # run as a script (spark-submit rmqtool/cli/export/spark_job.py): the package's own folder must
    # not shadow top-level names, rmqtool is imported as a package
    sys.path.pop(0)


def package_dirs() -> list[tuple[Path, str]]:
    """(folder, archive name) of rmqtool and of every package below it (rmqtool.cli.export,
    the mapped rmqtool.formats and rmqtool.recovery, and their subpackages such as
    rmqtool.recovery.safety), each once."""
    # imported here, after the sys.path fix above (run as a script)
    import rmqtool
    import rmqtool.formats
    import rmqtool.recovery

    out: dict[str, Path] = {}
    for pkg, arc in (
        (rmqtool, "rmqtool"),
        (rmqtool.formats, "rmqtool/formats"),
        (rmqtool.recovery, "rmqtool/recovery"),
    ):
        # (__file__ is typed optional; a regular package, as these are, has it)
        root = Path(pkg.__file__).resolve().parent  # type: ignore[arg-type]
        for d, dirs, _files in os.walk(root):  # (a symlink, as rmqtool/formats in a checkout, is not followed)
            dirs[:] = sorted(x for x in dirs if (Path(d) / x / "__init__.py").is_file())
            rel = Path(d).relative_to(root).as_posix()
            out.setdefault(arc if rel == "." else f"{arc}/{rel}", Path(d))
    return [(folder, arc) for arc, folder in sorted(out.items())]


def make_zip(path: str | os.PathLike[str]) -> list[str]:
    """Write the rmqtool package into a zip laid out as ``rmqtool/...`` (the installed
    package maps formats/ and recovery/ under rmqtool), subpackages included. Returns the
    archive names."""
    names = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for folder, arc in package_dirs():
            for p in sorted(folder.glob("*.py")):
                name = f"{arc}/{p.name}"
                zf.write(p, name)
                names.append(name)
            typed = folder / "py.typed"
            if typed.exists():
                zf.write(typed, f"{arc}/py.typed")
    return names


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--make-zip"]:
        if len(args) != 2:
            print("usage: python -m rmqtool.cli.export.spark_job --make-zip ZIP", file=sys.stderr)
            return 2
        names = make_zip(args[1])
        print(f"rmqtool: wrote {len(names)} modules to {args[1]}", file=sys.stderr)
        return 0
    # the export command itself, not the CLI group: from a --py-files zip the group cannot
    # list its command modules (it looks for them on disk); imported here, after the
    # sys.path fix above
    from rmqtool.cli.errors import report_exception
    from rmqtool.cli.export.command import command

    try:
        rv = command.main(args=args, prog_name="rmqtool export", standalone_mode=False)
    except SystemExit as exc:  # --help and click's own exits
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except BaseException as exc:  # noqa: BLE001 - one line and an exit code, as rmqtool.cli.run
        return report_exception(exc)
    return int(rv) if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
