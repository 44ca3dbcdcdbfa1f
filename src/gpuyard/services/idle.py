"""Reclaiming idle interactive jobs (docs/interactive.md#idle): a notebook left open over the
weekend gives its GPUs back.

A running interactive job is *busy* while its GPUs are at or above ``idle_gpu_util``, or (a
notebook) while a kernel is executing. Otherwise it has been idle since the latest of: its
start, the last kernel or terminal activity JupyterLab reports (``/api/kernels``,
``/api/terminals``), and the last request through the proxy that changed something (for a
TensorBoard: any request; a notebook's open page polls on its own, so its polls do not count,
which is why an open tab alone keeps nothing alive). Past ``timeout - WARN_BEFORE`` it gets an
``idle`` event that says when it will be reclaimed; past ``timeout`` it is reclaimed: suspended
and held (its files kept; opening it through the proxy releases it, and it is queued like any
job) or stopped, as the pool's ``idle_action`` says, with an event that says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import select

from gpuyard.clock import Clock
from gpuyard.errors import IllegalTransition, StaleWrite
from gpuyard.models import JobState
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.service import IdleAction, ServiceKind
from gpuyard.quantities import format_duration
from gpuyard.services.interactive import PROBE_TIMEOUT, Interactive, ServiceTarget
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.suspension import begin_suspension
from gpuyard.services.transitions import record_event, transition
from gpuyard.spec_limits import DEFAULT_POOL
from gpuyard.store.engine import Store
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import JobRow, PoolRow

__all__ = ["WARN_BEFORE", "IdleReclaim", "JupyterActivity"]

log = logging.getLogger(__name__)

WARN_BEFORE = 600.0
"""Seconds before its reclaim that an idle job is warned (at most a tenth of the timeout)."""
ACTOR = Actor.POOL


class JupyterActivity:
    """What a JupyterLab says of its own use: when a kernel or terminal was last active, and
    whether a kernel is executing now. None and False when it cannot be asked."""

    def __call__(self, target: ServiceTarget) -> tuple[float | None, bool]:
        latest: float | None = None
        busy = False
        for path in ("api/kernels", "api/terminals"):
            for entry in self._get(target, path):
                when = _epoch(entry.get("last_activity"))
                if when is not None:
                    latest = when if latest is None else max(latest, when)
                busy = busy or entry.get("execution_state") == "busy"
        return latest, busy

    @staticmethod
    def _get(target: ServiceTarget, path: str) -> list[dict[str, Any]]:
        try:
            answer = httpx.get(
                target.origin + target.prefix + path,
                headers=target.headers(),
                timeout=PROBE_TIMEOUT,
            )
            found = answer.json() if answer.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            return []
        return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


class IdleReclaim:
    def __init__(
        self,
        store: Store,
        interactive: Interactive,
        *,
        clock: Clock,
        timeout: float,
        action: IdleAction,
        gpu_util: float,
        gpu_usage: Callable[[], dict[int, float | None]],
        jupyter: Callable[[ServiceTarget], tuple[float | None, bool]] | None = None,
        notify: Notify = nobody,
    ) -> None:
        self.store = store
        self.interactive = interactive
        self.clock = clock
        self.timeout = timeout
        self.action = action
        self.gpu_util = gpu_util
        self.gpu_usage = gpu_usage
        """Each running job's latest GPU utilisation (percent), where sampled."""
        self.jupyter = jupyter or JupyterActivity()
        self.notify = notify
        self._busy_at: dict[int, float] = {}
        self._warned: set[tuple[int, int]] = set()
        """(job, attempt) pairs warned already."""

    def sweep(self) -> list[int]:
        """One look at every running interactive job; the ids of those reclaimed. Each job's
        timeout is its pool's own where an admin set one, else ``timeout`` (0: never)."""
        now = self.clock.now()
        running = self._running()
        self._forget_all_but({row.id for row, _ in running})
        timeouts = self._pool_timeouts()
        if not running or (self.timeout <= 0 and not timeouts):
            return []
        usage = self.gpu_usage()
        reclaimed = []
        for row, kind in running:
            timeout = timeouts.get(row.pool or DEFAULT_POOL, self.timeout)
            if timeout <= 0:
                continue
            idle = now - self._active_at(row, kind, usage, now)
            if idle >= timeout:
                if self._reclaim(row.id, row.version, idle, now, timeout):
                    reclaimed.append(row.id)
            elif idle >= timeout - min(WARN_BEFORE, timeout / 10):
                self._warn(row, idle, now, timeout)
        if reclaimed:
            self.notify()
        return reclaimed

    def _forget_all_but(self, running: set[int]) -> None:
        """Drop what is kept of jobs that do not run any more (a pool runs for months)."""
        for job_id in set(self._busy_at) - running:
            del self._busy_at[job_id]
        self._warned = {key for key in self._warned if key[0] in running}
        activity = self.interactive.activity
        for job_id in (set(activity.last) | set(activity.changed)) - running:
            if not activity.open.get(job_id):
                activity.forget(job_id)

    def _pool_timeouts(self) -> dict[str, float]:
        """The pools whose admin set an idle timeout of their own."""
        with self.store.read() as session:
            rows = session.execute(
                select(PoolRow.name, PoolRow.idle_timeout).where(PoolRow.idle_timeout.is_not(None))
            ).all()
        return {name: float(timeout) for name, timeout in rows if timeout is not None}

    def _running(self) -> list[tuple[JobRow, ServiceKind]]:
        with self.store.read() as session:
            rows = session.scalars(select(JobRow).where(JobRow.state == JobState.RUNNING)).all()
            found = []
            for row in rows:
                service = (row.spec or {}).get("service")
                if service:
                    session.expunge(row)
                    found.append((row, ServiceKind(service["kind"])))
        return found

    def _active_at(
        self, row: JobRow, kind: ServiceKind, usage: dict[int, float | None], now: float
    ) -> float:
        """When the job was last in use (``now`` while it is busy)."""
        activity = self.interactive.activity
        seen = activity.last if kind is ServiceKind.TENSORBOARD else activity.changed
        times = [row.started_at or now, seen.get(row.id, 0.0), self._busy_at.get(row.id, 0.0)]
        util = usage.get(row.id)
        busy = util is not None and util >= self.gpu_util
        target = self.interactive.running_target(row, kind)
        if kind is ServiceKind.NOTEBOOK and target is not None:
            latest, executing = self.jupyter(target)
            busy = busy or executing
            times.append(latest or 0.0)
        if busy:
            self._busy_at[row.id] = now
            return now
        return max(times)

    def _warn(self, row: JobRow, idle: float, now: float, timeout: float) -> None:
        key = (row.id, row.attempt)
        if key in self._warned:
            return
        self._warned.add(key)
        left = format_duration(max(0.0, timeout - idle))
        what = "suspended and held" if self.action is IdleAction.SUSPEND else "stopped"
        with self.store.write() as session:
            fresh = session.get(JobRow, row.id)
            if fresh is None or fresh.state != JobState.RUNNING:
                return
            record_event(
                session,
                fresh,
                kind=EventKind.IDLE,
                actor=ACTOR,
                time=now,
                reason=f"idle for {format_duration(idle)}: it will be {what} in {left} unless "
                "it is used (run a cell, open a terminal, or change something in it)",
            )

    def _reclaim(self, job_id: int, version: int, idle: float, now: float, timeout: float) -> bool:
        why = (
            f"idle for {format_duration(idle)} (the pool reclaims interactive jobs idle for "
            f"{format_duration(timeout)})"
        )
        try:
            with self.store.write() as session:
                row = session.get(JobRow, job_id)
                if row is None or row.version != version or row.state != JobState.RUNNING:
                    return False
                self._act(session, row, why, now)
        except (StaleWrite, IllegalTransition):
            return False
        self._busy_at.pop(job_id, None)
        self.interactive.activity.forget(job_id)
        log.info("job %s reclaimed: %s", job_id, why)
        return True

    def _act(self, session: Any, row: JobRow, why: str, now: float) -> None:
        if self.action is IdleAction.STOP:
            transition(session, row, JobState.STOPPING, actor=ACTOR, why=why, time=now, reason=why)
            return
        begin_suspension(session, row, actor=ACTOR, why=why, now=now, notice=0.0)
        guarded_update(session, row, held=True)
        record_event(
            session,
            row,
            kind=EventKind.IDLE,
            actor=ACTOR,
            time=now,
            reason=f"{why}: suspended and held, its files kept; opening it again resumes it",
        )


def _epoch(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
