"""The one transition function: guarded writes and an event for every move."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpuyard.errors import IllegalTransition, StaleWrite
from gpuyard.models import JobState
from gpuyard.services.transitions import transition
from gpuyard.store.engine import Store
from gpuyard.store.tables import EventRow, JobRow


def _job(store: Store) -> int:
    with store.write() as session:
        row = JobRow(
            name="j",
            owner="a",
            state="queued",
            version=0,
            priority="normal",
            spec={"command": "x"},
            attempt=0,
            created_at=1.0,
        )
        session.add(row)
        session.flush()
        return row.id


def test_transition_bumps_version_and_writes_an_event(store: Store) -> None:
    job_id = _job(store)
    with store.write() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        transition(
            session,
            row,
            JobState.STARTING,
            actor="scheduler",
            why="placed on n0",
            time=5.0,
            node="n0",
            placement=[{"node": "n0"}],
        )
    with store.read() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        assert (row.state, row.version, row.placement) == ("starting", 1, [{"node": "n0"}])
        events = session.scalars(select(EventRow).where(EventRow.job_id == job_id)).all()
        assert [(e.from_state, e.to_state, e.actor, e.reason, e.node, e.time) for e in events] == [
            ("queued", "starting", "scheduler", "placed on n0", "n0", 5.0)
        ]


def test_a_stale_write_changes_nothing(store: Store) -> None:
    job_id = _job(store)
    with store.read() as session:
        stale = session.get(JobRow, job_id)
    with store.write() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        transition(session, row, JobState.STOPPED, actor="user:a", why="stop", time=2.0)
    assert stale is not None
    with pytest.raises(StaleWrite), store.write() as session:
        transition(session, stale, JobState.STARTING, actor="scheduler", why="x", time=3.0)
    with store.read() as session:
        row = session.get(JobRow, job_id)
        assert row is not None and row.state == "stopped" and row.finished_at == 2.0
        assert session.query(EventRow).filter_by(job_id=job_id).count() == 1


def test_illegal_transition_raises_before_writing(store: Store) -> None:
    job_id = _job(store)
    with pytest.raises(IllegalTransition), store.write() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        transition(session, row, JobState.SUCCEEDED, actor="x", why="x", time=1.0)
    with store.read() as session:
        assert session.query(EventRow).count() == 0
