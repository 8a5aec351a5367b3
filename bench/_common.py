"""Shared by the bench scripts (run as ``python bench/<script>.py``: this directory is on
the path)."""

from __future__ import annotations


def peak_memory() -> str:
    """A line with the peak RSS of this process and of its largest child (getrusage)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (KiB on Linux)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return (
        f"peak RSS: this process {me:,.0f} MiB, largest worker process {kids:,.0f} MiB "
        "(pages of the mapped commitlog and of shared memory count in each process that touched them)"
    )
