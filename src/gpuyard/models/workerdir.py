"""The worker directory protocol: what each file holds and who writes it (docs/runtime.md,
"The worker directory").

Each worker has two directories on its node:

- the **worker directory** the job is pointed at, ``<job dir>/attempts/<attempt>/worker-<rank>``,
  with the ``log`` and ``control/``, which the job's runtime writes (ack, checkpoint, progress,
  suspended, listeners) and the pool reads, and where the pool writes the notice
  (``preempt.json``);
- the **supervisor directory**, ``<home>/supervisors/<job>-<attempt>-<rank>`` (mode 0700), with
  the supervisor's spec, state and exit record and the executor's terminate request. The job is
  never told where it is.

A job that runs as its owner's OS account (docs/security.md) can write only its control
directory and its workspace, and cannot reach the supervisor directory at all; a job that runs
as the pool's own user (``run_as: pool``) could rewrite either. So everything here is parsed as
untrusted input all the same (strict types, finite numbers, unknown keys ignored, files capped
at :data:`FILE_CAP` bytes), and what the pool believes about a worker's life comes from its
supervisor process, not from these files (docs/runtime.md says how).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "CONTROL_FILES",
    "FILE_CAP",
    "MAX_LISTENERS",
    "AccountSpec",
    "AckFile",
    "BindSpec",
    "CgroupSpec",
    "CheckpointFile",
    "ContainerRuntimeName",
    "ControlFile",
    "ExitRecord",
    "FileSpec",
    "ImageMountSpec",
    "ImageSpec",
    "Poke",
    "PreemptFile",
    "ProgressFile",
    "SandboxSpec",
    "SavingFile",
    "SlurmStepFile",
    "SupervisorSpec",
    "SupervisorState",
    "SuspendedFile",
    "TerminateRequest",
]

FILE_CAP = 64 * 1024
"""Bytes any file of either directory may have; a larger one is ignored as invalid."""
MAX_LISTENERS = 256
"""Entries of ``control/listeners`` looked at; more are ignored (and reported)."""

Pid = Annotated[int, Field(ge=1, le=(1 << 22))]
"""Linux's largest pid_max is 2^22."""
Count = Annotated[int, Field(ge=0)]


class _Record(BaseModel):
    """Strict: a number is not a string, a bool is not a number, NaN and infinities are not
    numbers; keys this version does not know are ignored (a newer writer may add some)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, allow_inf_nan=False)


# -- control/: written by the job's runtime (gpuyard.runtime), read by the pool --------------


class ControlFile(_Record):
    time: float
    """When the runtime wrote it (Unix time)."""


class AckFile(ControlFile):
    """``ack.json``: a process of the worker saw the preemption notice."""

    pid: Pid | None = None
    rank: Count | None = None


class CheckpointFile(ControlFile):
    """``checkpoint.json``: a checkpoint is complete."""

    step: Count | None = None
    path: str | None = None


class SavingFile(ControlFile):
    """``saving.json``: a process of the worker is saving a checkpoint (removed when done); a
    hang timer allows for it (docs/fault-tolerance.md)."""

    pid: Pid | None = None


HARDWARE_RATIO = "hardware_ratio"
"""The progress metric that says what share of a step's wall time went to kernels or
collectives (0 to 1); performance detection watches it where a job reports it."""


class ProgressFile(ControlFile):
    """``progress.json``: the training loop's last reported step."""

    step: Count
    metrics: dict[str, float | int | str | None] = Field(default_factory=dict)


class SuspendedFile(ControlFile):
    """``suspended.json``: a process called ``suspend()`` and exits to be requeued."""

    pid: Pid | None = None
    requeue: bool = False
    """Written by ``scontrol requeue`` inside a Slurm batch job: requeue the whole job now
    (Slurm's requeue ends every step at once), without waiting for the writer to exit."""


SLURM_STEPS = "slurm-steps"
"""``control/slurm-steps/<n>``: one file per ``srun`` step of a Slurm batch job."""
MAX_SLURM_STEPS = 1000
"""Step files looked at (sacct shows the first ones, by step id)."""
STEP_FILE_CAP = 16 * 1024


class SlurmStepFile(ControlFile):
    """``control/slurm-steps/<n>``: step ``n`` of a Slurm batch job, as its ``srun`` wrote it
    (``slurm/step/main.py``) when it started and again when it ended; empty while
    reserved. What sacct shows as the ``<job>.<n>`` row."""

    name: Annotated[str, Field(max_length=1024)]
    """The program the step ran (sacct's JobName of a step)."""
    nodes: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=1024)]
    tasks: Count
    start: float
    end: float | None = None
    exit_code: Annotated[int, Field(ge=0, le=255)] | None = None
    """srun's exit status (128 + N: its worst task was killed by signal N)."""


CONTROL_FILES: dict[str, type[ControlFile]] = {
    "ack.json": AckFile,
    "checkpoint.json": CheckpointFile,
    "progress.json": ProgressFile,
    "saving.json": SavingFile,
    "suspended.json": SuspendedFile,
}
"""The control files the pool reads, by name. ``listeners/<pid>`` (empty files named by the
pids that handle the notice signal) is the other thing it reads there."""


class PreemptFile(_Record):
    """``control/preempt.json``: the notice, written by the pool, read by the job."""

    requested_at: float
    deadline: float
    reason: str
    by: str


# -- the supervisor directory: written by the executor or the supervisor ---------------------


class FileSpec(_Record):
    content: str
    mode: int


class BindSpec(_Record):
    target: str
    source: str
    readonly: bool
    held: bool = False


class CgroupSpec(_Record):
    """The worker's cgroup: its directories (by controller; ``unified`` for v2) and limits."""

    version: Literal[1, 2]
    dirs: dict[str, str]
    memory: Count = 0
    """Bytes; 0 is no limit."""
    mcpus: Count = 0
    """Thousandths of a CPU; 0 is no limit."""
    pids: Count = 0
    """Processes; 0 is no limit."""
    ceiling_pids: Count = 0
    """Processes of all the node's workers together (the pool's cgroup); 0 is none."""
    ceiling_memory: Count = 0
    """Bytes of all the node's workers together (the pool's cgroup); 0 is none."""
    deny_devices: list[str] = Field(default_factory=list)
    """Device rules written to ``devices.deny`` (cgroup v1: ``c 195:1 rwm``)."""


class SandboxSpec(_Record):
    """The worker's mount namespace (:mod:`gpuyard.executors.local.sandbox`): what it makes
    private, what it keeps of the host below that, what it hides."""

    private: list[str] = Field(default_factory=list)
    """Directories covered by an empty tmpfs of the worker's own (``/tmp``, ``/dev/shm``)."""
    keep: list[str] = Field(default_factory=list)
    """Host directories below a private one, mounted back at the same path (the pool's home,
    the job's working directory)."""
    hide: list[str] = Field(default_factory=list)
    """Files (GPU device files) covered by ``mask``, an empty file no account may open."""
    mask: str = ""


def _inside_path(path: str) -> str:
    """An absolute path without ``..`` (a mount point or device inside the image)."""
    if not path.startswith("/") or ".." in path.split("/") or "\0" in path:
        raise ValueError(f"{path!r} is not an absolute path without '..'")
    return path


InsidePath = Annotated[str, AfterValidator(_inside_path)]


def _device(path: str) -> str:
    if not _inside_path(path).startswith("/dev/"):
        raise ValueError(f"{path!r} is not a device file below /dev")
    return path


class ImageMountSpec(_Record):
    """A host path bind-mounted into a worker's image (workspace, datasets, models, volumes)."""

    source: str
    """The host's path, opened as the job's account: what it cannot reach is refused."""
    target: InsidePath
    """The path inside the image (made when missing)."""
    readonly: bool = False


class ContainerRuntimeName(StrEnum):
    """The container runtimes the supervisor has (docs/decisions.md says why this one)."""

    NATIVE = "native"
    """The kernel's mounts and pivot_root in the supervisor's child."""


class ImageSpec(_Record):
    """The worker runs inside an image's root filesystem (docs/images.md, "How a worker runs in
    an image"; :mod:`gpuyard.executors.local.container`). With it, the spec's ``argv`` is the
    final command (ENTRYPOINT and CMD already applied by the caller), ``env`` the job's own on
    top of ``env`` here (the caller leaves the pool's PATH out), and ``cwd`` and ``sandbox``
    are unused: ``workdir`` is the working directory inside the image, which has a /tmp and
    /dev of its own. The spec's ``binds`` are made on the host first (below the workspace, as
    for any worker); a mount of the workspace here carries them in."""

    runtime: ContainerRuntimeName = ContainerRuntimeName.NATIVE
    rootfs: InsidePath
    """The unpacked image on the node (the cache's, shared, never written: the worker writes
    to a layer of its own above it)."""
    env: dict[str, str] = Field(default_factory=dict)
    """The image config's ``Env``."""
    workdir: InsidePath = "/"
    """The image config's ``WorkingDir`` (or the job's), inside the image."""
    mounts: list[ImageMountSpec] = Field(default_factory=list)
    shm_size: Annotated[int, Field(ge=1 << 20)] = 64 << 20
    """Bytes of the worker's ``/dev/shm`` (its pages count in the worker's memory limit)."""
    devices: list[Annotated[str, AfterValidator(_device)]] = Field(default_factory=list)
    """Host device files the worker may open (its GPUs' ``/dev/nvidiaN`` and the control
    devices present on the host), at the same path; no other device is there."""
    driver: list[InsidePath] = Field(default_factory=list)
    """Host paths (the GPU driver's user-space libraries) mounted read-only at the same path."""
    library: list[ImageMountSpec] = Field(default_factory=list)
    """The pool's own files its in-job tools need (its ``gpuyard`` package), opened as root
    (the pool's installation may be in a home the job's account cannot enter) and mounted
    read-only whatever ``readonly`` says."""
    links: list[tuple[Annotated[str, Field(min_length=1, max_length=4096)], InsidePath]] = Field(
        default_factory=list
    )
    """(target, link): links made in the image where it has none (the driver's, from its CDI
    spec: ``libcuda.so.1`` to the versioned file)."""


class AccountSpec(_Record):
    """The OS account the worker's command runs as (docs/security.md): the supervisor, root,
    switches to it between fork and exec."""

    name: str
    uid: Annotated[int, Field(ge=1)]
    """Never 0: the executor refuses root's accounts before it writes the spec."""
    gid: Annotated[int, Field(ge=1)]
    groups: list[Count] = Field(default_factory=list)


class SupervisorSpec(_Record):
    """``spec.json``: what the supervisor runs; written by the executor before it starts."""

    job: int
    attempt: Count
    rank: Count
    argv: list[str] = Field(min_length=1)
    env: dict[str, str]
    cwd: str
    grace: Annotated[float, Field(ge=0)]
    log: str
    log_max: Count = 0
    """Bytes the log may have; past them its oldest part is dropped (0: no cap)."""
    files: dict[str, FileSpec] = Field(default_factory=dict)
    binds: list[BindSpec] = Field(default_factory=list)
    notify: str = ""
    """The executor's notification socket (an abstract unix address); empty for none."""
    cgroup: CgroupSpec | None = None
    account: AccountSpec | None = None
    """Who runs the command; None: the supervisor's own user."""
    workspace: str = ""
    """The worker's workspace; with an account, every bind target lies below it."""
    job_dir: str = ""
    """The job's directory; with an account, every file of ``files`` lies below it."""
    sandbox: SandboxSpec | None = None
    """The worker's mount namespace; None: the host's, as it is. Unused with an ``image``."""
    image: ImageSpec | None = None
    """Run the command inside this image's root filesystem; None: on the host."""
    terminal: bool = False
    """The supervisor's stdin is the slave side of a terminal (``gpuyard exec JOB shell``):
    the command runs in a session of its own with it as its controlling terminal, on its
    stdin, stdout and stderr, instead of /dev/null and the log."""


class SupervisorState(_Record):
    """``state.json``: written by the supervisor when it starts and again once the command
    runs, for people and tools. The executor never acts on it: it knows its supervisors from
    the handles (and, adopting a worker without one, from /proc)."""

    supervisor_pid: Pid
    supervisor_start_time: Count
    """Field 22 of ``/proc/<pid>/stat``: clock ticks after boot."""
    boot_id: str = ""
    pid: Pid | None = None
    """The command's pid, which leads its process group."""
    started_at: float | None = None
    workspace: str = ""
    """How the workspace was made: ``bind`` (mounts), ``link`` (symbolic links) or empty."""


class ExitRecord(_Record):
    """``exit.json``: how the command ended, written by the supervisor after it has killed
    every process of the worker. Believed only once that supervisor has exited."""

    exit_code: int
    signal: str | None = None
    """The name of the signal that ended the command (``SIGKILL``), if one did."""
    terminated: bool = False
    """It was asked to stop (SIGTERM from the executor)."""
    escalated: bool = False
    """It did not exit within its graceful period and was SIGKILLed."""
    started_at: float
    finished_at: float
    message: str = ""
    """Why it could not start; empty when it started."""
    oom_kills: Count = 0
    """Processes the kernel's OOM killer ended in the worker's cgroup."""
    memory_limit: Count = 0
    pids_limit_hits: Count = 0
    """Forks refused because the worker had reached ``pids_limit`` processes."""
    pids_limit: Count = 0
    leftovers: Count = 0
    """Processes still running when the command exited, killed by the supervisor."""


class TerminateRequest(_Record):
    """``terminate.json``: the graceful period for this stop, written by the executor just
    before it sends SIGTERM to the supervisor (the spec's ``grace`` otherwise)."""

    grace: Annotated[float, Field(ge=0)]


class Poke(_Record):
    """A datagram from a supervisor on the executor's notification socket."""

    event: Literal["started", "exited"]
    job: int
    attempt: Count
    rank: Count
