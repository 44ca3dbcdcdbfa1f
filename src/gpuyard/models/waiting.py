"""Why a queued job waits, as a code: set by the scheduler, stored on the job's row, shown on
the wire (``JobView.wait_code``), and read back by ``squeue``'s reason column."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["WaitCode"]


class WaitCode(StrEnum):
    QUOTA = "quota"
    """Its owner or group is at its quota for the job's tier."""
    PRIORITY = "priority"
    """The room it could use is held for a job of a higher tier."""
    RESERVED = "reserved"
    """The room it could use is held for a job that goes before it (a larger one, usually)."""
    RESOURCES = "resources"
    """No node has room for it now."""
    PREEMPTING = "preempting"
    """Lower-tier jobs are being suspended to make room for it."""
    POOL = "pool"
    """Its pool, node list or driver version can never hold it."""
    UNSATISFIABLE = "unsatisfiable"
    """Larger than the pool could ever offer."""
    HELD = "held"
    """Held by a person until released."""
    DEPENDENCY = "dependency"
    """It waits for other jobs (its ``after``)."""
    BEGIN = "begin"
    """It may not start before its begin time (Slurm's ``--begin``)."""
    ARRAY_LIMIT = "array-limit"
    """As many tasks of its job array run as its throttle allows (``--array=0-9%2``)."""


WAIT_CODES = ", ".join(code.value for code in WaitCode)
"""Every code, for a field's description."""
