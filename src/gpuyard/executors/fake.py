"""A fake executor for tests of the controller: it launches nothing and does what it is told.

It implements :class:`gpuyard.executors.base.Executor` faithfully (idempotent launch, status per
handle, terminate with an optional automatic exit), so controller tests exercise the real loop
against a designed seam instead of monkeypatching. A launch's OS account (``run_as``) is kept
with it in :attr:`FakeExecutor.launches`, for tests to check, and otherwise ignored.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuyard.executors.base import LaunchError
from gpuyard.executors.local.terminal import PtyTerminal, open_terminal
from gpuyard.models.worker import (
    ControlState,
    Handle,
    NodeInfo,
    Notice,
    Tools,
    WorkerKey,
    WorkerLaunch,
    WorkerState,
    WorkerStatus,
)

__all__ = ["FakeExecutor", "FakeWorker"]


@dataclass
class FakeWorker:
    launch: WorkerLaunch
    status: WorkerStatus = field(default_factory=lambda: WorkerStatus(WorkerState.RUNNING))
    terminated_with_grace: float | None = None
    killed: bool = False
    log: bytes = b""
    notices: list[Notice] = field(default_factory=list)
    signals: list[tuple[int, bool]] = field(default_factory=list)
    control: ControlState = field(default_factory=ControlState)
    terminal: int | None = None
    """The slave side of its terminal, when it was launched with one."""


class FakeExecutor:
    name = "fake"
    interface = "lo"

    def __init__(
        self,
        nodes: Sequence[NodeInfo] = (),
        *,
        exit_on_terminate: bool = True,
        fail_launch: Callable[[WorkerLaunch], str | None] = lambda _launch: None,
        before_launch: Callable[[WorkerLaunch], None] = lambda _launch: None,
    ) -> None:
        self._nodes = list(nodes) or [
            NodeInfo("fake0", "127.0.0.1", gpus=8, cpus=64, memory=1 << 40)
        ]
        self.exit_on_terminate = exit_on_terminate
        self.fail_launch = fail_launch
        self.before_launch = before_launch
        """Called at the start of each launch, outside the executor's lock (a test holds a
        launch there to act while it is in flight)."""
        self.workers: dict[WorkerKey, FakeWorker] = {}
        self.launches: list[WorkerLaunch] = []
        self.broken: dict[int, str] = {}
        """Job ids whose workers make ``status`` and ``control`` raise, with the message (a
        worker whose files break the executor)."""
        self._lock = threading.Lock()

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def tools(self) -> Tools:
        return Tools(python="/fake/python", rexec="/fake/rexec.py", slurm="/fake/slurmstep.py")

    def base_env(self, node: str) -> Mapping[str, str]:
        return {"PATH": "/usr/bin:/bin"}

    def job_dir(self, job_id: int) -> str:
        return f"/fake/jobs/{job_id}"

    def launch(self, request: WorkerLaunch) -> Handle:
        self.before_launch(request)
        handle = {
            "job": request.key.job_id,
            "attempt": request.key.attempt,
            "rank": request.key.rank,
        }
        with self._lock:
            if request.key in self.workers:
                return handle
            problem = self.fail_launch(request)
            if problem:
                raise LaunchError(problem)
            self.launches.append(request)
            self.workers[request.key] = FakeWorker(request)
        return handle

    def launch_terminal(
        self, request: WorkerLaunch, *, rows: int, cols: int
    ) -> tuple[Handle, PtyTerminal]:
        """A real pseudo-terminal with nothing on it: a test plays the worker on its slave
        side (:attr:`FakeWorker.terminal`)."""
        if request.key in self.workers:
            raise LaunchError(f"{request.key} was launched before")
        terminal, slave = open_terminal(rows, cols)
        try:
            handle = self.launch(request)
        except BaseException:
            terminal.close()
            os.close(slave)
            raise
        self.workers[request.key].terminal = slave
        return handle, terminal

    def _worker(self, handle: Handle) -> FakeWorker:
        return self.workers[WorkerKey(handle["job"], handle["attempt"], handle["rank"])]

    def _check(self, handles: Sequence[Handle]) -> None:
        for h in handles:
            if h["job"] in self.broken:
                raise RuntimeError(self.broken[h["job"]])

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]:
        with self._lock:
            self._check(handles)
            return [self._worker(h).status for h in handles]

    def terminate(self, handle: Handle, grace: float) -> None:
        with self._lock:
            worker = self._worker(handle)
            worker.terminated_with_grace = grace
            if self.exit_on_terminate and worker.status.state is WorkerState.RUNNING:
                worker.status = WorkerStatus(WorkerState.EXITED, exit_code=143, signal="SIGTERM")

    def kill(self, handle: Handle) -> None:
        with self._lock:
            worker = self._worker(handle)
            worker.killed = True
            if worker.status.state is WorkerState.RUNNING:
                worker.status = WorkerStatus(WorkerState.EXITED, exit_code=137, signal="SIGKILL")

    def notify(self, handle: Handle, notice: Notice) -> None:
        with self._lock:
            self._worker(handle).notices.append(notice)

    def signal(self, handle: Handle, signum: int, *, steps: bool) -> None:
        with self._lock:
            self._worker(handle).signals.append((signum, steps))

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        with self._lock:
            self._check(handles)
            return [self._worker(h).control for h in handles]

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        with self._lock:
            log = self._worker(handle).log
        return log[offset : offset + limit], len(log)

    def remove_job(self, job_id: int) -> None:
        with self._lock:
            for key in [k for k in self.workers if k.job_id == job_id]:
                del self.workers[key]

    def set_wakeup(self, callback: Callable[[WorkerKey | None], None]) -> None:
        pass

    def close(self) -> None:
        pass

    # -- test controls --------------------------------------------------------------------

    def exit(
        self,
        job_id: int,
        rank: int = 0,
        code: int = 0,
        *,
        attempt: int = 0,
        escalated: bool = False,
        signal: str | None = None,
    ) -> None:
        """Make a worker exit with ``code``."""
        with self._lock:
            worker = self.workers[WorkerKey(job_id, attempt, rank)]
            worker.status = WorkerStatus(
                WorkerState.EXITED, exit_code=code, escalated=escalated, signal=signal
            )

    def lose(self, job_id: int, rank: int = 0, *, attempt: int = 0) -> None:
        with self._lock:
            self.workers[WorkerKey(job_id, attempt, rank)].status = WorkerStatus(
                WorkerState.LOST, message="node unreachable"
            )

    def report(self, job_id: int, rank: int = 0, *, attempt: int = 0, **state: float | int) -> None:
        """Make a worker's runtime report (acknowledged_at=…, checkpoint_at=…, …)."""
        with self._lock:
            worker = self.workers[WorkerKey(job_id, attempt, rank)]
            worker.control = replace(worker.control, **state)  # type: ignore[arg-type]

    def write_log(self, job_id: int, data: bytes, rank: int = 0, *, attempt: int = 0) -> None:
        with self._lock:
            self.workers[WorkerKey(job_id, attempt, rank)].log += data
