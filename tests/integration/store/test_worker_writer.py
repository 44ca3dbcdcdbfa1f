"""The one writer of workers' states: legal moves written, illegal ones refused unwritten."""

from __future__ import annotations

import pytest

from gpuyard.errors import IllegalTransition
from gpuyard.models.worker import WorkerKey, WorkerRole, WorkerState
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow
from gpuyard.store.workers import (
    LAUNCH_MESSAGE_LIMIT,
    launch_failed,
    record_launches,
    set_worker_state,
    set_worker_state_at,
)


def _workers(store: Store, count: int) -> list[WorkerRow]:
    with store.write() as session:
        job = JobRow(
            name="j",
            owner="a",
            state="starting",
            version=0,
            priority="normal",
            spec={"command": "x"},
            attempt=0,
            created_at=1.0,
        )
        session.add(job)
        session.flush()
        rows = [
            WorkerRow(job_id=job.id, attempt=0, rank=r, node="n0", state=WorkerState.PENDING)
            for r in range(count)
        ]
        session.add_all(rows)
        session.flush()
        for row in rows:
            session.refresh(row)
        session.expunge_all()
        return rows


def _read(store: Store, worker_id: int) -> WorkerRow:
    with store.read() as session:
        row = session.get(WorkerRow, worker_id)
        assert row is not None
        session.expunge(row)
        return row


def test_launches_and_exits_are_written(store: Store) -> None:
    a, b = _workers(store, 2)
    with store.write() as session:
        record_launches(session, [a, b], {a.id: {"pid": 1}}, 5.0)
    row = _read(store, a.id)
    assert (row.state, row.handle, row.started_at, row.role) == (
        WorkerState.RUNNING,
        {"pid": 1},
        5.0,
        WorkerRole.WORKER,
    )
    assert _read(store, b.id).state is WorkerState.PENDING
    with store.write() as session:
        set_worker_state(session, row, WorkerState.EXITED, exit_code=0, finished_at=6.0)
    ended = _read(store, a.id)
    assert (ended.state, ended.exit_code, ended.finished_at) == (WorkerState.EXITED, 0, 6.0)


def test_an_illegal_move_raises_before_writing(store: Store) -> None:
    [w] = _workers(store, 1)
    with pytest.raises(IllegalTransition), store.write() as session:
        set_worker_state(session, w, WorkerState.EXITED, exit_code=0)
    assert _read(store, w.id).state is WorkerState.PENDING
    with store.write() as session:
        set_worker_state(session, w, WorkerState.CANCELLED, finished_at=2.0)
    cancelled = _read(store, w.id)
    with pytest.raises(IllegalTransition), store.write() as session:
        record_launches(session, [cancelled], {w.id: {"pid": 1}}, 3.0)
    assert _read(store, w.id).state is WorkerState.CANCELLED


def test_a_failed_launch_is_lost_with_its_message_cut(store: Store) -> None:
    a, b = _workers(store, 2)
    with store.write() as session:
        launch_failed(session, a, "x" * 5000, 4.0)
        launch_failed(
            session, WorkerKey(b.job_id, 0, b.rank), "no", 4.0, WorkerRow.handle.is_(None)
        )
    lost = _read(store, a.id)
    assert (lost.state, lost.detail, lost.finished_at) == (
        WorkerState.LOST,
        "x" * LAUNCH_MESSAGE_LIMIT,
        4.0,
    )
    assert (_read(store, b.id).state, _read(store, b.id).detail) == (WorkerState.LOST, "no")


def test_a_reserved_worker_is_written_by_its_key(store: Store) -> None:
    [w] = _workers(store, 1)
    key = WorkerKey(w.job_id, 0, w.rank)
    with store.write() as session:
        set_worker_state_at(
            session, key, WorkerState.PENDING, WorkerState.RUNNING, handle={"pid": 2}
        )
    assert _read(store, w.id).state is WorkerState.RUNNING
    with pytest.raises(IllegalTransition), store.write() as session:
        set_worker_state_at(session, key, WorkerState.RUNNING, WorkerState.CANCELLED)
