"""Guarded writes: a change made on what was read applies only if nobody changed it since.

Jobs carry a ``version``. A decision (the scheduler's start, the controller's transition, a
person's priority change) is taken on a row read earlier; it is written with an UPDATE whose
WHERE clause names the id *and* the version read, and bumps the version. If someone else wrote
the job in between, nothing changes and :class:`~gpuyard.errors.StaleWrite` says so: the caller
drops its decision and looks again. These two functions are the only ones that do it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from gpuyard.errors import StaleWrite
from gpuyard.store.tables import JobRow

__all__ = ["current", "guarded_update"]


def current(session: Session, job_id: int, version: int) -> JobRow | None:
    """The job's row if its version is still ``version``; None if it changed or is gone."""
    row: JobRow | None = session.get(JobRow, job_id)
    if row is None or row.version != version:
        return None
    return row


def guarded_update(session: Session, job: JobRow, **values: Any) -> None:
    """Set ``values`` and bump the version, if the row still has ``job.version``; raise
    :class:`StaleWrite` otherwise. ``job`` is updated in place to match the row."""
    values = {**values, "version": job.version + 1}
    result = session.execute(
        update(JobRow)
        .where(JobRow.id == job.id, JobRow.version == job.version)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleWrite(f"job {job.id} changed since it was read; nothing was applied")
    for key, value in values.items():
        # The row already holds these values; reflect them without marking the object dirty,
        # or the ORM would flush an unguarded UPDATE of its own.
        set_committed_value(job, key, value)
