"""Workers as the controller and the executors share them: states, launches, reports.

A job runs as one worker per placed slot. The controller stores each worker's state
(:class:`WorkerState`); an executor launches a :class:`WorkerLaunch` (built by
:mod:`gpuyard.launch`) and reports what happened as a :class:`WorkerStatus`. Plain frozen
dataclasses, so the pure launch planner, the executors and the controller agree on one shape
without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuyard.errors import IllegalTransition
from gpuyard.models.resources import ZERO, Resources

__all__ = [
    "IMAGE_LIBRARY",
    "POOL_ACCOUNT_PREFIX",
    "PREEMPT_SIGNAL",
    "WORKER_TRANSITIONS",
    "Bind",
    "ControlState",
    "File",
    "Handle",
    "NodeInfo",
    "Notice",
    "RunAs",
    "SlurmStep",
    "Tools",
    "WorkerImage",
    "WorkerKey",
    "WorkerLaunch",
    "WorkerRole",
    "WorkerState",
    "WorkerStatus",
    "check_worker_transition",
]


class WorkerState(StrEnum):
    """Where one worker is in its life, as stored and as an executor reports it."""

    PENDING = "pending"
    """Placed; not launched yet."""
    RUNNING = "running"
    """Its supervisor runs (the command may still be starting)."""
    EXITED = "exited"
    """Its command ended and the supervisor recorded how."""
    LOST = "lost"
    """It vanished without a recorded exit (its supervisor died, its node left, its launch
    failed)."""
    CANCELLED = "cancelled"
    """The job ended before it was launched."""

    def is_ended(self) -> bool:
        return self in _ENDED


_ENDED = frozenset({WorkerState.EXITED, WorkerState.LOST, WorkerState.CANCELLED})

WORKER_TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    # RUNNING: launched (its handle is written with it). LOST: its launch failed, or the
    # controller gave up on its job. CANCELLED: its job ended (or a person stopped it, or the
    # server that reserved a shell never started it) before it was launched.
    WorkerState.PENDING: frozenset({WorkerState.RUNNING, WorkerState.LOST, WorkerState.CANCELLED}),
    # EXITED: its supervisor recorded its exit. LOST: it vanished, or the controller gave up.
    WorkerState.RUNNING: frozenset({WorkerState.EXITED, WorkerState.LOST}),
    WorkerState.EXITED: frozenset(),
    WorkerState.LOST: frozenset(),
    WorkerState.CANCELLED: frozenset(),
}
"""Allowed moves of a worker, as data: forward only; an ended worker never changes again (a
job's next attempt gets new worker rows)."""


def check_worker_transition(worker: object, current: WorkerState, target: WorkerState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is allowed; ``worker``
    names it in the message (a :class:`WorkerKey`, or its row's id)."""
    if target not in WORKER_TRANSITIONS[current]:
        why = f"it has already ended ({current.value})" if current.is_ended() else "it is pending"
        raise IllegalTransition(
            f"worker {worker} cannot become {target.value}: {why}",
            extra={"state": current.value, "target": target.value},
        )


class WorkerRole(StrEnum):
    """What a worker is to its job, as stored and on the wire (the launch planner assigns
    the first four from the job's topology; the others are the platform's own workers)."""

    WORKER = "worker"
    """A worker of the job's command."""
    LAUNCHER = "launcher"
    """An MPI job's launcher (``mpirun`` runs in it)."""
    MPI_TARGET = "mpi-target"
    """A node an MPI launcher starts its ranks on; it waits for them."""
    PS = "ps"
    """A parameter server."""
    CHECK = "check"
    """A node check that runs before the job's command (docs/fault-tolerance.md)."""
    EXEC = "exec"
    """A command run on a held job's nodes (``gpuyard exec run``)."""
    SHELL = "shell"
    """An interactive shell on a held job's node (``gpuyard exec JOB shell``)."""

    @property
    def primary(self) -> bool:
        """Whether this worker's exit decides the job."""
        return self in (WorkerRole.WORKER, WorkerRole.LAUNCHER)

    @property
    def runs_job_command(self) -> bool:
        """Whether this worker runs the job's own command: in an image, only such a worker
        gets the image's ENTRYPOINT in front (a command run in a held job, or a shell, is
        entered as ``docker exec`` enters a container: without it)."""
        return self in (WorkerRole.WORKER, WorkerRole.LAUNCHER, WorkerRole.PS)


Handle = dict[str, Any]

POOL_ACCOUNT_PREFIX = "gpy-"
"""OS accounts the pool makes for users no admin mapped (``gpy-<name>``); docs/security.md."""


class RunAs(StrEnum):
    """Which OS account runs a pool's jobs (the ``run_as`` setting, docs/security.md)."""

    OWNER = "owner"
    """Each job runs as its owner's account: the one an admin mapped, else ``gpy-<name>``."""
    POOL = "pool"
    """Jobs run as the pool's own user (what a pool not run by root falls back to)."""


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
    held: bool = False
    """``source`` is the pool's own (an uploaded dataset version, a node's copy of one), in
    a directory only the pool may enter: the worker's launcher opens it itself, not as the
    job's account (docs/datasets.md, "Who reaches a dataset's files")."""


@dataclass(frozen=True, slots=True)
class WorkerImage:
    """The image a worker runs in (docs/images.md, "Jobs in images")."""

    ref: str
    """The job's image, pinned to its digest at submission."""
    shm_size: int = 0
    """Bytes of its /dev/shm; 0: the executor's default (a share of the worker's memory)."""
    workdir: str | None = None
    """The job's own working directory (inside the image); None: the image's ``WorkingDir``,
    else the worker's workspace."""
    path: tuple[str, ...] = ()
    """gpuyard's own directories (the mpirun shim's, the Slurm commands'), to go before the
    image's ``PATH`` when the job sets none (the launch cannot know the image's)."""
    mounts: tuple[Bind, ...] = ()
    """Host paths bind-mounted at paths of the image (``target``: inside the image)."""
    weak_env: frozenset[str] = frozenset()
    """Names of the job's own variables whose value the image's ``Env`` replaces when it
    sets them (sbatch's pyxis default; empty: the job's values win)."""


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
    role: WorkerRole = WorkerRole.WORKER
    task: int = 0
    primary: bool = True
    """Whether the worker's exit decides the job (False for helpers: MPI targets, PS)."""
    limits: Resources = ZERO
    """What its processes may use together: memory (bytes) and CPUs are enforced where the
    executor can (cgroups); 0 means no limit. GPUs are given by ``CUDA_VISIBLE_DEVICES``."""
    run_as: str | None = None
    """The OS account its processes run as (:func:`gpuyard.launch.accounts.os_account`); None:
    the pool's own user. An account named ``POOL_ACCOUNT_PREFIX…`` is the pool's to create when
    it is missing; any other must exist. An executor never runs a job as uid 0 when this is
    set (docs/security.md)."""
    image: WorkerImage | None = None
    """The image its command runs in; None: the node's own environment. ``argv`` is the job's
    command, which the image's ``ENTRYPOINT`` goes in front of (the executor reads the image)."""


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    state: WorkerState
    """RUNNING, EXITED or LOST."""
    exit_code: int | None = None
    signal: str | None = None
    """Name of the signal that ended the process, if one did."""
    escalated: bool = False
    """It did not exit within its graceful period after SIGTERM and was SIGKILLed."""
    finished_at: float | None = None
    message: str = ""
    """Why it could not start, or why it was lost (set only then)."""
    cause: str = ""
    """What the executor knows about why a started worker ended, beyond its exit code, e.g.
    "out of memory: limit 4 GiB"; empty when nothing is known."""


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
    hardware_ratio: float | None = None
    """The job's ``hardware_ratio`` progress metric (docs/fault-tolerance.md), when valid."""
    saving_at: float | None = None
    """A process of the worker began saving a checkpoint then and has not finished."""
    suspended_at: float | None = None
    """A process of the worker called ``suspend()`` (it exits to be requeued)."""
    requeue_at: float | None = None
    """The job asked to be requeued at once (``scontrol requeue`` inside a Slurm batch job)."""
    listening: bool = False
    """A process of the worker listens for the notice (it will save a checkpoint when told)."""
    invalid: tuple[str, ...] = ()
    """Control files that were present but could not be read, each with why (too large, not
    the expected shape, …); their content was ignored."""


@dataclass(frozen=True, slots=True)
class SlurmStep:
    """An ``srun`` step of a Slurm batch job's worker (docs/slurm.md): what sacct shows as
    the ``<job>.<id>`` row."""

    id: int
    name: str
    nodes: tuple[str, ...]
    tasks: int
    start: float
    end: float | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class Tools:
    """Where an executor's nodes have gpuyard's own in-job tools."""

    python: str = "python3"
    """An interpreter that can run the stdlib-only tools below."""
    rexec: str = ""
    """Path of gpuyard/injob/rexec.py (MPI's remote launch without ssh)."""
    slurm: str = ""
    """Path of gpuyard/slurm/step/entry.py (a Slurm batch job's batch step and srun)."""
    check: str = ""
    """Path of gpuyard/injob/nodecheck.py (the node check before a job's command)."""

    def in_image(self) -> Tools:
        """The tools as a worker in an image reaches them: the image's ``python3`` runs the
        pool's package, mounted read-only at :data:`IMAGE_LIBRARY` (docs/images.md, "Launch
        modes in an image"). The node check runs outside the image and keeps the host's."""
        package = f"{IMAGE_LIBRARY}/gpuyard"
        return Tools(
            python="python3",
            rexec=f"{package}/injob/rexec.py",
            slurm=f"{package}/slurm/step/entry.py",
            check=self.check,
        )


IMAGE_LIBRARY = "/.gpuyard/lib"
"""Where a worker in an image finds the pool's own ``gpuyard`` package (read-only; the directory
is on the worker's ``PYTHONPATH``): its in-job tools and :mod:`gpuyard.runtime`."""
