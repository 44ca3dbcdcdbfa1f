"""A fake executor for tests of the controller: it launches nothing and does what it is told.

It implements :class:`gpuyard.executors.base.Executor` faithfully (idempotent launch, status per
handle, terminate with an optional automatic exit), so controller tests exercise the real loop
against a designed seam instead of monkeypatching. A launch's OS account (``run_as``) is kept
with it in :attr:`FakeExecutor.launches`, for tests to check, and otherwise ignored.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuyard.executors.base import DataMismatch, DataNoRoom, LaunchDeferred, LaunchError
from gpuyard.executors.local.terminal import PtyTerminal, open_terminal
from gpuyard.models.dataprep import DataSource, PreparedData, copy_version
from gpuyard.models.health import Finding, Probe, ProbeStatus
from gpuyard.models.usage import NodeUsage, WorkerUsage
from gpuyard.models.worker import (
    ControlState,
    Handle,
    NodeInfo,
    Notice,
    SlurmStep,
    Tools,
    WorkerKey,
    WorkerLaunch,
    WorkerState,
    WorkerStatus,
)

__all__ = ["FakeExecutor", "FakeWorker"]

_ANSWERED = Finding(probe=Probe.HEARTBEAT, status=ProbeStatus.OK, message="the fake answered")


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
    slurm_steps: list[SlurmStep] = field(default_factory=list)
    """What ``slurm_steps`` reports for it: the srun steps a test says it ran."""
    usage: WorkerUsage | None = None
    """What ``usage`` reports for it (:meth:`FakeExecutor.use`); None: not measurable."""
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
        """Job ids whose workers make ``status``, ``control`` and ``usage`` raise, with the
        message (a worker whose files break the executor)."""
        self.findings: dict[str, list[Finding]] = {}
        """What ``inspect`` answers for a node (default: a heartbeat that answered, only)."""
        self.inspect_delay = 0.0
        """Seconds ``inspect`` takes (an agent that answers late)."""
        self.nodes_used: dict[str, NodeUsage] = {}
        """What ``node_usage`` reports (:meth:`use_node`)."""
        self.images: dict[tuple[str, str], int] = {}
        """The images each node holds, by (node, reference): their size in bytes."""
        self.image_size = 1 << 20
        """What a pull of an image the node lacks pulls."""
        self.registry_down = ""
        """While set, a pull of an image a node lacks is deferred with it as the reason."""
        self.pulls: list[tuple[str, str]] = []
        """Each pull asked of a node that lacked the image, in order."""
        self.data_copies: dict[tuple[str, str], set[int]] = {}
        """(node, copy key) -> the jobs pinning it."""
        self.data_full: set[str] = set()
        self.data_changed = ""
        self._lock = threading.Lock()

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def tools(self) -> Tools:
        return Tools(python="/fake/python", rexec="/fake/rexec.py", slurm="/fake/entry.py")

    def base_env(self, node: str) -> Mapping[str, str]:
        return {"PATH": "/usr/bin:/bin"}

    def job_dir(self, job_id: int) -> str:
        return f"/fake/jobs/{job_id}"

    def pull_image(self, node: str, ref: str, *, pulling: Callable[[], None]) -> int:
        if (node, ref) in self.images:
            return 0
        pulling()
        self.pulls.append((node, ref))
        if self.registry_down:
            raise LaunchDeferred(f"cannot pull image {ref} on {node}: {self.registry_down}")
        self.images[node, ref] = self.image_size
        return self.image_size

    def prepare_data(
        self,
        node: str,
        source: DataSource,
        *,
        job_id: int,
        progress: Callable[[int, int], None],
    ) -> PreparedData:
        """A copy recorded per (node, version); ``data_full`` nodes have no room and
        ``data_changed`` (a file's path) differs from its manifest."""
        path = f"/fake/data/{node}/{source.key}"
        with self._lock:
            pins = self.data_copies.get((node, source.key))
            if pins is not None:
                pins.add(job_id)
                return PreparedData(path, 0)
        if self.data_changed:
            raise DataMismatch(
                f"dataset {source.ref} changed under its version: {self.data_changed} differs"
            )
        if node in self.data_full:
            raise DataNoRoom(f"no room for a copy of dataset {source.ref} on {node}")
        progress(source.manifest.size // 2, source.manifest.size)
        progress(source.manifest.size, source.manifest.size)
        with self._lock:
            self.data_copies[node, source.key] = {job_id}
        return PreparedData(path, source.manifest.size)

    def data_jobs(self) -> set[int]:
        with self._lock:
            return {j for pins in self.data_copies.values() for j in pins}

    def data_held(self) -> dict[str, frozenset[int]]:
        """From :attr:`data_copies`: the copies ``prepare_data`` made and those a test put
        there (``data_copies[node, copy_key(version, digest)] = set()``)."""
        held: dict[str, set[int]] = {}
        with self._lock:
            for node, key in self.data_copies:
                version = copy_version(key)
                if version is not None:
                    held.setdefault(node, set()).add(version)
        return {node: frozenset(versions) for node, versions in held.items()}

    def release_data(self, job_id: int) -> None:
        with self._lock:
            for pins in self.data_copies.values():
                pins.discard(job_id)

    def sweep_data(self) -> None:
        return

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

    def slurm_steps(self, handle: Handle) -> list[SlurmStep]:
        with self._lock:
            worker = self.workers.get(WorkerKey(handle["job"], handle["attempt"], handle["rank"]))
            return [] if worker is None else list(worker.slurm_steps)

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        with self._lock:
            self._check(handles)
            return [self._worker(h).control for h in handles]

    def usage(self, handles: Sequence[Handle]) -> list[WorkerUsage | None]:
        with self._lock:
            self._check(handles)
            found = []
            for h in handles:
                worker = self.workers.get(WorkerKey(h["job"], h["attempt"], h["rank"]))
                found.append(None if worker is None else worker.usage)
            return found

    def node_usage(self) -> dict[str, NodeUsage]:
        with self._lock:
            return dict(self.nodes_used)

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        with self._lock:
            log = self._worker(handle).log
        return log[offset : offset + limit], len(log)

    def log_start(self, handle: Handle) -> int:
        return 0

    def memory_jobs(self) -> set[int]:
        return set()

    def drop_memory(self, job_id: int) -> None:
        return

    def remove_job(self, job_id: int) -> None:
        with self._lock:
            for key in [k for k in self.workers if k.job_id == job_id]:
                del self.workers[key]

    def inspect(self) -> dict[str, list[Finding]]:
        if self.inspect_delay:
            time.sleep(self.inspect_delay)
        with self._lock:
            return {n.name: list(self.findings.get(n.name, [_ANSWERED])) for n in self._nodes}

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

    def use(
        self,
        job_id: int,
        rank: int = 0,
        *,
        attempt: int = 0,
        cpu_seconds: float | None = None,
        memory: int | None = None,
        gpu_util: float | None = None,
        gpu_memory: int | None = None,
    ) -> None:
        """Make a worker's next usage reading these figures (CPU seconds is a counter: raise
        it between readings to show CPU in use)."""
        with self._lock:
            self.workers[WorkerKey(job_id, attempt, rank)].usage = WorkerUsage(
                cpu_seconds=cpu_seconds,
                memory=memory,
                gpu_util=gpu_util,
                gpu_memory=gpu_memory,
                source="fake",
            )

    def use_node(self, node: str, usage: NodeUsage | None) -> None:
        """Make ``node_usage`` report ``usage`` for ``node`` (None: nothing for it)."""
        with self._lock:
            if usage is None:
                self.nodes_used.pop(node, None)
            else:
                self.nodes_used[node] = usage

    def write_log(self, job_id: int, data: bytes, rank: int = 0, *, attempt: int = 0) -> None:
        with self._lock:
            self.workers[WorkerKey(job_id, attempt, rank)].log += data
