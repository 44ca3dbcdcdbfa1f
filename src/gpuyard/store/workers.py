"""The one writer of workers' states: every change of a stored worker's state goes through here.

Each function checks the move against the worker table (:data:`WORKER_TRANSITIONS` in
:mod:`gpuyard.models.worker`), from the state its caller read, and raises
:class:`~gpuyard.errors.IllegalTransition` before anything is written, as the job's
:func:`~gpuyard.services.transitions.transition` does. Unlike a job, a worker row carries no
version: its bookkeeping (a handle, an exit) is recorded whatever its job did meanwhile, and a
caller narrows a write with extra conditions where it must (``also``: a cancel only while no
handle is recorded, say). A worker's other columns (signals sent, notices) are not its state and
are written where they happen.

A failed launch's message is stored cut to :data:`LAUNCH_MESSAGE_LIMIT` characters, whichever
launcher failed (the job's, a node check, ``gpuyard exec run``, a shell).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, bindparam, update
from sqlalchemy.orm import Session

from gpuyard.models.worker import Handle, WorkerKey, WorkerState, check_worker_transition
from gpuyard.store.tables import WorkerRow

__all__ = [
    "LAUNCH_MESSAGE_LIMIT",
    "launch_failed",
    "launch_message",
    "record_launches",
    "set_worker_state",
    "set_worker_state_at",
]

LAUNCH_MESSAGE_LIMIT = 2000
"""Characters of a failed launch's message kept in the worker's ``detail`` (an executor's
error can carry a whole log)."""


def launch_message(message: str) -> str:
    """A failed launch's message as a worker's ``detail`` keeps it."""
    return message[:LAUNCH_MESSAGE_LIMIT]


def set_worker_state(
    session: Session,
    worker: WorkerRow,
    target: WorkerState,
    *also: ColumnElement[bool],
    **changes: Any,
) -> None:
    """Move ``worker`` (as read) to ``target``, setting ``changes`` in the same UPDATE; raise
    IllegalTransition if the table does not allow it. ``also``: further conditions on the row."""
    _write(session, worker.id, worker.state, target, (WorkerRow.id == worker.id, *also), changes)


def set_worker_state_at(
    session: Session,
    key: WorkerKey,
    current: WorkerState,
    target: WorkerState,
    *also: ColumnElement[bool],
    **changes: Any,
) -> None:
    """:func:`set_worker_state` for a worker known by its key, not read (a shell the server
    reserved as ``current`` and launches itself)."""
    where = (
        WorkerRow.job_id == key.job_id,
        WorkerRow.attempt == key.attempt,
        WorkerRow.rank == key.rank,
        *also,
    )
    _write(session, key, current, target, where, changes)


def record_launches(
    session: Session, workers: Iterable[WorkerRow], handles: Mapping[int, Handle], now: float
) -> None:
    """The workers launched (``handles``: worker id -> handle) run: each one's handle and start
    time, in one statement for a gang's workers (executemany)."""
    launched = [w for w in workers if w.id in handles]
    for w in launched:
        check_worker_transition(w.id, w.state, WorkerState.RUNNING)
    if launched:
        session.connection().execute(
            _SET_HANDLE, [{"worker": w.id, "handle": handles[w.id], "at": now} for w in launched]
        )


def launch_failed(
    session: Session, worker: WorkerRow | WorkerKey, message: str, now: float, *also: Any
) -> None:
    """A worker that could not be launched is lost, with why (cut to
    :data:`LAUNCH_MESSAGE_LIMIT`); one known by its key was reserved (pending)."""
    changes = {"detail": launch_message(message), "finished_at": now}
    if isinstance(worker, WorkerKey):
        set_worker_state_at(
            session, worker, WorkerState.PENDING, WorkerState.LOST, *also, **changes
        )
    else:
        set_worker_state(session, worker, WorkerState.LOST, *also, **changes)


def _write(
    session: Session,
    who: object,
    current: WorkerState,
    target: WorkerState,
    where: tuple[ColumnElement[bool], ...],
    changes: dict[str, Any],
) -> None:
    check_worker_transition(who, current, target)
    session.execute(update(WorkerRow).where(*where).values(state=target, **changes))


_WORKERS = cast("Table", WorkerRow.__table__)
_SET_HANDLE = (
    update(_WORKERS)
    .where(_WORKERS.c.id == bindparam("worker"))
    .values(handle=bindparam("handle"), state=WorkerState.RUNNING, started_at=bindparam("at"))
)
