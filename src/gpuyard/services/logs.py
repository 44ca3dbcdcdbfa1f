"""Worker logs: a slice by byte offset, or a stream that follows the log as it grows.

A stream asks again, at most every :data:`RECHECK` seconds, whether the caller may still see
the job and whether the token it was opened with still signs it in: revoking the token (or
taking the caller's access) ends the stream within about that long."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import InvalidSpec, NotFound
from gpuyard.executors.base import Executor
from gpuyard.launch.check import CHECK_RANK_BASE
from gpuyard.models import LogChunk
from gpuyard.models.access import Action
from gpuyard.models.worker import WorkerState
from gpuyard.services.auth import Policy
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow

__all__ = ["LogService", "complete_utf8"]

MAX_CHUNK = 1 << 20
FOLLOW_POLL = 0.2
RECHECK = 1.0
"""Seconds between checks that a stream's token is still valid."""


def complete_utf8(data: bytes) -> bytes:
    """``data`` without a UTF-8 character cut off at its end (kept for the next read)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        if byte & 0x80 == 0:
            return data
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return data if back >= need else data[:-back]
    return data


class LogService:
    def __init__(self, store: Store, executor: Executor | None, policy: Policy) -> None:
        self.store = store
        self.executor = executor
        self.policy = policy

    def _worker(
        self, job_id: int, worker: int, attempt: int | None, actor: str
    ) -> tuple[JobRow, WorkerRow | None]:
        with self.store.read() as session:
            job = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.VIEW
            )
            # Every sub-task's workers and parameter servers, in rank order (launch/topology).
            count = (job.nodes + job.parameter_servers) * max(1, job.tasks)
            wanted = job.attempt if attempt is None else attempt
            row = session.scalars(
                select(WorkerRow).where(
                    WorkerRow.job_id == job_id,
                    WorkerRow.rank == worker,
                    WorkerRow.attempt == wanted,
                )
            ).first()
            # Node checks and `gpuyard exec run` add workers past the job's own ranks; those
            # exist when their row does.
            if not 0 <= worker < count and (worker < CHECK_RANK_BASE or row is None):
                raise NotFound(
                    f"job {job_id} has workers 0..{count - 1} (and those of its node checks "
                    f"and exec runs: `gpuyard exec {job_id} status`); there is no worker "
                    f"{worker} in attempt {wanted}"
                )
            return job, row

    def read(
        self,
        job_id: int,
        *,
        actor: str,
        worker: int = 0,
        attempt: int | None = None,
        offset: int = 0,
        limit: int = 65536,
    ) -> LogChunk:
        if offset < 0 or not 1 <= limit <= MAX_CHUNK:
            raise InvalidSpec(f"offset must be >= 0 and limit between 1 and {MAX_CHUNK}")
        job, row = self._worker(job_id, worker, attempt, actor)
        offset, data, size = self._read(row, offset, limit)
        data = complete_utf8(data)
        next_offset = offset + len(data)
        return LogChunk(
            job_id=job_id,
            worker=worker,
            attempt=row.attempt if row else job.attempt,
            offset=offset,
            next_offset=next_offset,
            size=size,
            data=data.decode("utf-8", errors="replace"),
            eof=_finished(job, row) and next_offset >= size,
        )

    def _read(self, row: WorkerRow | None, offset: int, limit: int) -> tuple[int, bytes, int]:
        """From ``offset``, or from the oldest byte kept when a capped log has dropped it:
        (where the bytes start, the bytes, the log's size)."""
        if row is None or row.handle is None or self.executor is None:
            return offset, b"", 0
        data, size = b"", 0
        for _ in range(3):  # the cap can drop what we asked for between the two calls
            offset = max(offset, self.executor.log_start(row.handle))
            data, size = self.executor.read_log(row.handle, offset, limit)
            if data or offset >= size:
                break
        return offset, data, size

    def check(
        self, job_id: int, *, actor: str, worker: int = 0, attempt: int | None = None
    ) -> None:
        """Raise what :meth:`follow` would (no such job or worker), before a stream starts:
        once it has, an error can only cut it."""
        self._worker(job_id, worker, attempt, actor)

    async def follow(
        self,
        job_id: int,
        *,
        actor: str,
        worker: int = 0,
        attempt: int | None = None,
        offset: int = 0,
        still_valid: Callable[[], bool] | None = None,
    ) -> AsyncIterator[bytes]:
        """Bytes of the log from ``offset`` as they are written, until the worker has ended,
        or until ``still_valid`` (the token the stream was opened with) says no."""
        valid = _Recheck(still_valid)
        while True:
            if not await valid():
                return
            job, row = await run_in_threadpool(self._worker, job_id, worker, attempt, actor)
            finished = _finished(job, row)
            while True:
                offset, data, size = await run_in_threadpool(self._read, row, offset, MAX_CHUNK)
                if not data:
                    break
                if not await valid():  # a log that never stops growing is checked too
                    return
                offset += len(data)
                yield data
            if finished and offset >= size:
                return
            await asyncio.sleep(FOLLOW_POLL)


class _Recheck:
    """Asks ``still_valid`` at most every :data:`RECHECK` seconds; True in between."""

    def __init__(self, still_valid: Callable[[], bool] | None) -> None:
        self.still_valid = still_valid
        self.checked = time.monotonic()

    async def __call__(self) -> bool:
        if self.still_valid is None or time.monotonic() - self.checked < RECHECK:
            return True
        self.checked = time.monotonic()
        return await run_in_threadpool(self.still_valid)


def _finished(job: JobRow, row: WorkerRow | None) -> bool:
    if row is not None and row.state in (WorkerState.EXITED, WorkerState.LOST):
        return True
    return job.state.is_terminal()
