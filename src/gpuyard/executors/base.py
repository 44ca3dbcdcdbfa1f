"""The executor interface: what the controller needs from whatever runs worker processes.

An executor presents nodes, launches one worker per (job, attempt, rank) under a supervisor,
reports each worker's status, delivers stop signals, and serves log bytes. Handles are plain
JSON-able dicts that the controller stores with the worker, so that a restarted control plane
can adopt workers it did not launch. Every method must be safe to call again after a crash:
``launch`` of a worker that already runs returns its handle instead of starting a second copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "PREEMPT_SIGNAL",
    "Bind",
    "ControlState",
    "Executor",
    "File",
    "LaunchError",
    "NodeInfo",
    "Notice",
    "Tools",
    "WorkerKey",
    "WorkerLaunch",
    "WorkerPhase",
    "WorkerStatus",
]

Handle = dict[str, Any]

PREEMPT_SIGNAL = "SIGUSR1"
"""The preemption notice's signal (docs/preemption.md); Slurm's and Lightning's choice too."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as an executor presents it."""

    name: str
    address: str
    gpus: int
    cpus: float
    memory: int
    gpu_model: str = ""
    gpu_devices: tuple[str, ...] = ()
    """What CUDA_VISIBLE_DEVICES names for local GPU i (index or UUID)."""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkerKey:
    job_id: int
    attempt: int
    rank: int

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} worker {self.rank}"


@dataclass(frozen=True, slots=True)
class File:
    content: str
    mode: int = 0o644


@dataclass(frozen=True, slots=True)
class Bind:
    """Make ``source`` appear at ``target`` (a path in the worker's workspace)."""

    target: str
    source: str
    readonly: bool


@dataclass(frozen=True, slots=True)
class WorkerLaunch:
    """Everything needed to start one worker; built by :mod:`gpuyard.launch`."""

    key: WorkerKey
    node: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    grace: float
    """Seconds between SIGTERM and SIGKILL when the worker is told to stop."""
    files: Mapping[str, File] = field(default_factory=dict)
    """Files to write before the command starts (absolute path -> content)."""
    binds: Sequence[Bind] = ()
    """The workspace: directories to bind (read-only where asked and the OS allows)."""
    role: str = "worker"
    task: int = 0
    primary: bool = True
    """Whether the worker's exit decides the job (False for helpers: MPI targets, PS)."""


class WorkerPhase(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"
    """The supervisor vanished without recording an exit (node lost, killed, …)."""


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    phase: WorkerPhase
    exit_code: int | None = None
    signal: str | None = None
    """Name of the signal that ended the process, if one did."""
    escalated: bool = False
    """It did not exit within its graceful period after SIGTERM and was SIGKILLed."""
    finished_at: float | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Notice:
    """A preemption notice: checkpoint and exit by ``deadline`` (docs/preemption.md)."""

    requested_at: float
    deadline: float
    reason: str
    by: str


@dataclass(frozen=True, slots=True)
class ControlState:
    """What a worker's in-job runtime has told the platform through its control directory."""

    acknowledged_at: float | None = None
    checkpoint_at: float | None = None
    checkpoint_step: int | None = None
    progress_at: float | None = None
    step: int | None = None
    suspended_at: float | None = None
    """A process of the worker called ``suspend()`` (it exits to be requeued)."""
    listening: bool = False
    """A process of the worker listens for the notice (it will save a checkpoint when told)."""


class LaunchError(Exception):
    """A worker could not be launched; the message says why."""


@dataclass(frozen=True, slots=True)
class Tools:
    """Where an executor's nodes have gpuyard's own in-job tools."""

    python: str = "python3"
    """An interpreter that can run the stdlib-only tools below."""
    rexec: str = ""
    """Path of gpuyard/runtime/rexec.py (MPI's remote launch without ssh)."""


class Executor(Protocol):
    name: str

    @property
    def interface(self) -> str:
        """The network interface that carries the nodes' addresses (eth0 on a cluster, lo for
        virtual nodes); MPICH's Hydra needs to be told."""
        ...

    def tools(self) -> Tools: ...

    def nodes(self) -> list[NodeInfo]: ...

    def base_env(self, node: str) -> Mapping[str, str]:
        """The environment a worker on ``node`` starts from, before the job's own."""
        ...

    def job_dir(self, job_id: int) -> str:
        """The job's directory (outputs, checkpoints) as workers see it."""
        ...

    def launch(self, request: WorkerLaunch) -> Handle: ...

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]: ...

    def terminate(self, handle: Handle, grace: float) -> None:
        """SIGTERM now, SIGKILL after ``grace`` seconds unless it has exited."""
        ...

    def kill(self, handle: Handle) -> None:
        """SIGKILL the worker's whole process group now."""
        ...

    def notify(self, handle: Handle, notice: Notice) -> None:
        """Raise the preemption notice: the flag file in the worker's control directory and
        the notice signal to the worker's processes that registered for it."""
        ...

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        """What each worker's runtime wrote to its control directory (ack, checkpoint, …)."""
        ...

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the worker's log from ``offset``, and the log's size."""
        ...

    def remove_job(self, job_id: int) -> None:
        """Delete what the executor keeps for a job (logs, work files)."""
        ...

    def set_wakeup(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when a worker may have changed state (best effort)."""
        ...

    def close(self) -> None: ...
