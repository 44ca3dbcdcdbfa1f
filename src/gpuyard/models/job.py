"""The job spec (what a user asks for) and the job as the API shows it."""

from __future__ import annotations

import posixpath
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Generic, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from gpuyard.models.access import Access, Action
from gpuyard.models.actor import ACTOR_FORMS
from gpuyard.models.command import CommandError, parse_command
from gpuyard.models.dataset import DatasetRef
from gpuyard.models.events import EVENT_KINDS, EventKind
from gpuyard.models.faults import FaultTolerance
from gpuyard.models.ids import Id
from gpuyard.models.image import MAX_REF_LENGTH, ImageRef
from gpuyard.models.service import Service, ServiceKind, default_command
from gpuyard.models.slurm import SlurmBatch
from gpuyard.models.states import JobState, JobStatus
from gpuyard.models.units import Bytes, Seconds
from gpuyard.models.waiting import WAIT_CODES, WaitCode
from gpuyard.models.worker import WorkerRole, WorkerState
from gpuyard.spec_limits import MAX_ENV, MAX_ENV_BYTES

__all__ = [
    "After",
    "Dependency",
    "JobEvent",
    "JobMode",
    "JobSpec",
    "JobType",
    "JobView",
    "LogChunk",
    "Mount",
    "Mounts",
    "MpiImplementation",
    "NodeResources",
    "Page",
    "Priority",
    "Slot",
    "SubTask",
    "WorkerView",
]

T = TypeVar("T")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_NAME = re.compile(r"^[\w][\w.-]{0,127}$")
_MOUNT_NAME = re.compile(r"^(?!\.{1,2}$)[\w.-]{1,128}$")


class JobMode(StrEnum):
    """How the job's processes are launched and find each other (docs/distributed.md)."""

    SINGLE = "single"
    """The command as given, once per node."""
    PYTORCH = "pytorch"
    """MASTER_ADDR/PORT, WORLD_SIZE, RANK, SLOTS; a plain `python x.py` is wrapped in the torch
    launcher."""
    PYTORCH_DEEPSPEED = "pytorch-deepspeed"
    """As pytorch, plus a DeepSpeed hostfile."""
    MPI = "mpi"
    """Worker 0 runs mpirun (added when the command lacks it); the others host its daemons."""
    HOROVOD = "horovod"
    """As mpi."""
    TENSORFLOW = "tensorflow"
    """TF_CONFIG for parameter-server (parameter_servers > 0) or AllReduce jobs."""
    SLURM = "slurm"
    """A Slurm batch script (``sbatch``, docs/slurm.md): it runs on worker 0, and its ``srun``
    starts tasks on every worker through their remote-exec agents."""

    @property
    def uses_mpi(self) -> bool:
        return self in (JobMode.MPI, JobMode.HOROVOD)

    @property
    def uses_remote_exec(self) -> bool:
        """Worker 0 launches; the other workers host what it starts on their nodes."""
        return self.uses_mpi or self is JobMode.SLURM

    @property
    def uses_torch(self) -> bool:
        return self in (JobMode.PYTORCH, JobMode.PYTORCH_DEEPSPEED)


class MpiImplementation(StrEnum):
    OPENMPI = "openmpi"
    MPICH = "mpich"


class JobType(StrEnum):
    REGULAR = "regular"
    """One command (常规任务)."""
    BATCH = "batch"
    """Several sub-tasks, each with its own command, side by side (批量任务)."""


class Priority(StrEnum):
    """Priority tiers, lowest first. Who may use which tier is a pool rule."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    HIGHEST = "highest"

    @property
    def rank(self) -> int:
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {p: i for i, p in enumerate(Priority)}


MAX_COMMAND = 32 * 1024
"""Characters in one command (a longer one belongs in a script the command runs)."""
MAX_COMMANDS_TOTAL = 64 * 1024
MAX_TASKS = 256
MAX_PATH = 4096
MAX_MOUNTS = 64
MAX_RUNTIME = 366 * 86400.0


def _absolute(value: str, what: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{what} must be an absolute path (got {value!r})")
    return value


def _check_command(value: str) -> str:
    try:
        parse_command(value)
    except CommandError as exc:
        raise ValueError(str(exc)) from None
    return value.strip()


class Mount(BaseModel):
    """A directory given to the job under a name in its workspace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        max_length=128, description="Name under the workspace folder (letters, digits, _ . -)."
    )
    path: str = Field(
        "",
        max_length=MAX_PATH,
        description="Absolute path of the directory to mount (not with `dataset`: the pool "
        "fills it in).",
    )
    readonly: bool = Field(True, description="Mount read-only.")
    dataset: str | None = Field(
        None,
        max_length=300,
        description="A dataset of the catalogue instead of a path, as [OWNER/]NAME[@VERSION|"
        "@latest] (datasets only; always read-only). At submission the pool pins it to "
        "OWNER/NAME@N (docs/datasets.md).",
    )
    dataset_version: int | None = Field(
        None, description="Set by the pool at submission: the id of the version pinned."
    )
    prepare: bool = Field(
        False,
        description="Copy the dataset to each node's fast storage before the command starts, "
        "verified against its manifest, and mount the copy (a dataset of the catalogue, "
        'read-only, only; docs/datasets.md, "Data preparation").',
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _MOUNT_NAME.match(value):
            raise ValueError(
                f"a mount name is letters, digits, '_', '.' or '-', and not '.' or '..' "
                f"(got {value!r})"
            )
        return value

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        return value if value == "" else _absolute(value, "a mount path")

    @field_validator("dataset")
    @classmethod
    def _dataset_ref(cls, value: str | None) -> str | None:
        return None if value is None else str(DatasetRef.parse(value))

    @model_validator(mode="after")
    def _path_or_dataset(self) -> Mount:
        if self.dataset is None and not self.path:
            raise ValueError(f"mount {self.name!r}: give its path (or, for a dataset, `dataset`)")
        if self.dataset is None and self.dataset_version is not None:
            raise ValueError(
                f"mount {self.name!r}: dataset_version is the pool's, set with `dataset`"
            )
        if self.prepare and self.dataset is None:
            raise ValueError(
                f"mount {self.name!r}: prepare copies a dataset of the catalogue, whose "
                "version cannot change; make the path a dataset (gpuyard datasets create) and "
                "mount it with `dataset: NAME@VERSION`, or drop prepare"
            )
        if self.prepare and not self.readonly:
            raise ValueError(
                f"mount {self.name!r}: prepare needs a read-only mount (the copy is shared by "
                "the node's jobs); set readonly: true or drop prepare"
            )
        return self


class ContainerMount(BaseModel):
    """A host path bind-mounted at a path of the job's image (Slurm's pyxis
    ``--container-mounts``; docs/images.md, "Mounts in the image")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(max_length=MAX_PATH, description="Absolute host path to mount.")
    target: str = Field(max_length=MAX_PATH, description="Absolute path inside the image.")
    readonly: bool = Field(False, description="Mount read-only.")

    @field_validator("source", "target")
    @classmethod
    def _absolute_paths(cls, value: str) -> str:
        return _absolute(value, "a container mount path")

    @field_validator("target")
    @classmethod
    def _not_the_root(cls, value: str) -> str:
        if posixpath.normpath(value) == "/" or ".." in value.split("/"):
            raise ValueError(
                f"a container mount goes below the image's root, without '..' (got {value!r})"
            )
        return value


class Mounts(BaseModel):
    """The job-style workspace (docs/distributed.md, "The workspace")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: str | None = Field(
        None, max_length=MAX_PATH, description="Code directory, at workspace/algorithm."
    )
    algorithm_readonly: bool = Field(True, description="Mount the algorithm read-only.")
    datasets: list[Mount] = Field(
        default_factory=list,
        max_length=MAX_MOUNTS,
        description="At workspace/dataset/<name>; read-only by default.",
    )
    models: list[Mount] = Field(
        default_factory=list,
        max_length=MAX_MOUNTS,
        description="At workspace/model/<name>; always read-only.",
    )
    outputs: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="Where workspace/outputs points (default: the job's outputs dir).",
    )
    volumes: list[Mount] = Field(
        default_factory=list,
        max_length=MAX_MOUNTS,
        description="At workspace/volume/<name>; writable.",
    )

    @field_validator("algorithm", "outputs")
    @classmethod
    def _absolute_paths(cls, value: str | None) -> str | None:
        return None if value is None else _absolute(value, "a mount path")

    @field_validator("datasets")
    @classmethod
    def _catalogued_read_only(cls, value: list[Mount]) -> list[Mount]:
        # A dataset of the catalogue is immutable: never mounted writable.
        return [m.model_copy(update={"readonly": True}) if m.dataset else m for m in value]

    @field_validator("models")
    @classmethod
    def _models_read_only(cls, value: list[Mount]) -> list[Mount]:
        return [m.model_copy(update={"readonly": True}) for m in _paths_only(value, "models")]

    @field_validator("volumes")
    @classmethod
    def _volumes_writable(cls, value: list[Mount]) -> list[Mount]:
        return [m.model_copy(update={"readonly": False}) for m in _paths_only(value, "volumes")]


def _paths_only(mounts: list[Mount], kind: str) -> list[Mount]:
    for mount in mounts:
        if mount.dataset is not None:
            raise ValueError(f"{kind}: {mount.name!r} names a dataset; mount it under datasets")
    return mounts


class SubTask(BaseModel):
    """One sub-task of a batch job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(
        min_length=1, max_length=MAX_COMMAND, description="This sub-task's command."
    )
    algorithm: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="This sub-task's code directory (default: the job's).",
    )

    @field_validator("command")
    @classmethod
    def _command_rules(cls, value: str) -> str:
        return _check_command(value)

    @field_validator("algorithm")
    @classmethod
    def _absolute_algorithm(cls, value: str | None) -> str | None:
        return None if value is None else _absolute(value, "an algorithm path")


class NodeResources(BaseModel):
    """What one node of the job gets."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    gpus: int = Field(0, ge=0, le=1024, description="GPUs per node.")
    cpus: float = Field(
        1.0, gt=0, le=100_000, description="CPU cores per node (fractions allowed)."
    )
    memory: Bytes = Field(
        0,
        ge=0,
        le=1 << 60,
        description="Memory per node in bytes, or e.g. '16G'. 0 reserves none.",
    )


class TorchLauncher(StrEnum):
    """How ``pytorch`` modes wrap a ``python script.py`` command (docs/distributed.md)."""

    TORCHRUN = "torchrun"
    """``python -m torch.distributed.run``: ``LOCAL_RANK`` in the environment, no argument."""
    LEGACY = "legacy"
    """``python -m torch.distributed.launch`` (docs/distributed.md): the script also gets
    ``--local-rank=N``."""


class After(StrEnum):
    """When a job waiting on another may start (Slurm's --dependency kinds)."""

    STARTED = "started"
    """The other job has started (Slurm ``after``)."""
    ENDED = "ended"
    """The other job has ended, however (``afterany``)."""
    SUCCEEDED = "succeeded"
    """The other job has succeeded (``afterok``)."""
    FAILED = "failed"
    """The other job has ended without succeeding: failed, stopped or expired
    (``afternotok``)."""


class Dependency(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job: Id = Field(description="The job to wait for.")
    when: After = Field(After.SUCCEEDED, description="started, ended, succeeded or failed.")


MAX_DEPENDENCIES = 64


class JobSpec(BaseModel):
    """A training job as submitted. New fields must have defaults (clients send old specs).

    Every field has a bound (lengths, counts, ranges): a spec is stored, shown and planned for
    every worker, and one that is too large to handle must be refused with the limit named,
    not break a listing later."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str | None = Field(None, description="Job name; derived from the command when omitted.")
    type: JobType = Field(JobType.REGULAR, description="regular, or batch (see tasks).")
    command: str | None = Field(
        None,
        max_length=MAX_COMMAND,
        description="One executable with its arguments (see the command rules). Required for a "
        "regular job; a batch job's sub-tasks have their own.",
    )
    tasks: list[SubTask] = Field(
        default_factory=list,
        max_length=MAX_TASKS,
        description="A batch job's sub-tasks, run side by side.",
    )
    mode: JobMode = Field(JobMode.SINGLE, description="Distributed mode.")
    nodes: int = Field(1, ge=1, le=4096, description="Nodes per (sub-)task; one worker each.")
    resources: NodeResources = Field(default_factory=NodeResources)
    exclusive: bool | None = Field(
        None,
        description="true: each worker takes its node whole (nothing else is placed there); "
        "false: it takes only what it asks for, and other jobs may use the rest. Default "
        "(null): whole nodes for a multi-node job, a share for a one-node job "
        '(docs/scheduling.md, "Whole nodes").',
    )
    parameter_servers: int = Field(
        0,
        ge=0,
        le=1024,
        description="tensorflow only: parameter servers (1 CPU, 1 GiB each); 0 is AllReduce.",
    )
    mpi: MpiImplementation = Field(
        MpiImplementation.OPENMPI, description="mpi/horovod: openmpi or mpich."
    )
    launcher: TorchLauncher = Field(
        TorchLauncher.TORCHRUN,
        description="pytorch modes: how `python script.py` is wrapped: torchrun (python -m "
        "torch.distributed.run; LOCAL_RANK in the environment) or legacy (python -m "
        "torch.distributed.launch, see docs/distributed.md: the script also gets --local-rank).",
    )
    mounts: Mounts = Field(default_factory=Mounts, description="The job's workspace.")
    priority: Priority = Field(Priority.NORMAL, description="Priority tier.")
    access: Access = Field(
        Access.NONE,
        description="What the other members of your group may do with it: read-write (also "
        "change its runtime and priority, stop, delete), read-only (view, clone) or none. "
        "Owners and admins may do everything; while an admin has sharing off, only none.",
    )
    pool: str | None = Field(
        None,
        max_length=64,
        description="A dedicated pool to run in (nodes labelled pool=<name>); default: the "
        "default pool. Excludes node_names and driver_version.",
    )
    node_names: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=4096,
        description="Run only on these nodes. Excludes pool and driver_version.",
    )
    driver_version: str | None = Field(
        None,
        max_length=64,
        description="Run only on nodes with this GPU driver version (label driver). Excludes "
        "pool and node_names.",
    )
    exclude_nodes: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=4096,
        description="Never run on these nodes (Slurm's --exclude). Excludes node_names.",
    )
    alternatives: list[NodeResources] = Field(
        default_factory=list,
        max_length=16,
        description="Further per-node specs, tried in order when `resources` does not fit; "
        "the first that fits starts and the others are dropped (docs/jobs.md, 'The spec').",
    )
    min_nodes: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Elastic: start with as few as this many nodes (at most `nodes`); the job "
        "grows toward `nodes` when nodes free up, by suspending and resuming at the new size.",
    )
    max_runtime: Seconds | None = Field(
        None,
        gt=0,
        le=MAX_RUNTIME,
        description="Seconds (or '2h') after which a running job expires; at most 366 days "
        "(leave it out for no limit).",
    )
    graceful_shutdown: Seconds = Field(
        30.0, ge=0, le=86400, description="Seconds between SIGTERM and SIGKILL when stopping."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description=f"Extra environment: at most {MAX_ENV} variables, "
        f"{MAX_ENV_BYTES // 1024} KiB in all.",
    )
    workdir: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="Absolute working directory; the job's own directory when omitted.",
    )
    image: str | None = Field(
        None,
        max_length=MAX_REF_LENGTH,
        description="The image the job runs in (docs/images.md): a name in the pool's "
        "registry (official/pytorch:2.13), a registry reference (host/repo:tag), either "
        "pinned (@sha256:...). Resolved to its digest at submission, so every node and every "
        "restart runs the same bytes. Omitted: the pool's own environment.",
    )
    shm_size: Bytes = Field(
        0,
        ge=0,
        le=1 << 50,
        description="Bytes of /dev/shm in the job's image, or e.g. '8G' (DataLoader workers "
        "and NCCL need more than a container's usual 64M); 0: half of the worker's memory "
        "limit, 1G without one. Only with an image.",
    )
    container_mounts: list[ContainerMount] = Field(
        default_factory=list,
        max_length=MAX_MOUNTS,
        description="Only with an image: host paths bind-mounted at paths of the image.",
    )
    env_over_image: list[str] | None = Field(
        None,
        max_length=MAX_ENV,
        description="Only with an image: which of `env` override the image's own ENV. "
        "Omitted: all of them; a list (sbatch --container-env): only these, the image's "
        "values win for the others (Slurm's pyxis).",
    )
    slurm: SlurmBatch | None = Field(
        None, description="mode slurm only: the batch script and what sbatch was told."
    )
    after: list[Dependency] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="Jobs this one waits for, each with when it may start: after the other "
        "started, ended, succeeded (the default) or failed. All must hold.",
    )
    hold: bool = Field(
        False, description="Submit it held: it waits until released (`gpuyard release`)."
    )
    fault_tolerance: FaultTolerance | None = Field(
        None,
        description="Restart after faults, pre-flight checks, hang detection "
        "(docs/fault-tolerance.md); leave out for none: a failure ends the job.",
    )
    service: Service | None = Field(
        None,
        description="An interactive job (docs/interactive.md): what it serves through the "
        "pool's proxy at /proxy/<id>/ (notebook or tensorboard); its command defaults to the "
        "kind's.",
    )

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str | None) -> str | None:
        return None if value is None else str(ImageRef.parse(value))

    @field_validator("command")
    @classmethod
    def _command_rules(cls, value: str | None) -> str | None:
        return None if value is None else _check_command(value)

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.service is not None and not self.command and not self.tasks:
            self.command = default_command(self.service)
        total = sum(len(c) for c in self.commands())
        if total > MAX_COMMANDS_TOTAL:
            raise ValueError(
                f"tasks: the commands add up to {total} characters; the limit is "
                f"{MAX_COMMANDS_TOTAL}"
            )
        if self.type is JobType.REGULAR:
            if not self.command:
                raise ValueError("command: a regular job needs a command")
            if self.tasks:
                raise ValueError("tasks: only a batch job has sub-tasks; set type: batch")
        elif not self.tasks:
            raise ValueError("tasks: a batch job needs at least one sub-task, each with a command")
        if self.parameter_servers and self.mode is not JobMode.TENSORFLOW:
            raise ValueError(
                f"parameter_servers: only the tensorflow mode has parameter servers (mode is "
                f"{self.mode.value}); remove it or set mode: tensorflow"
            )
        chosen = [
            name
            for name, value in (
                ("pool", self.pool),
                ("node_names", self.node_names),
                ("driver_version", self.driver_version),
            )
            if value
        ]
        if len(chosen) > 1:
            raise ValueError(
                f"{' and '.join(chosen)}: a job names a dedicated pool, node names or a driver "
                "version, not several; keep one"
            )
        if self.node_names and self.exclude_nodes:
            raise ValueError(
                "exclude_nodes: a job that names its nodes (node_names) has nothing to "
                "exclude; name only the nodes to use"
            )
        self._check_elastic()
        self._check_slurm()
        self._check_image()
        self._check_service()
        return self

    def _check_service(self) -> None:
        if self.service is None:
            return
        if self.type is JobType.BATCH or self.mode is not JobMode.SINGLE or self.nodes != 1:
            raise ValueError(
                "service: an interactive job is one worker: a regular job of mode single on "
                f"one node (it is {self.type.value}, mode {self.mode.value}, {self.nodes} "
                "nodes); remove those settings"
            )
        if self.service.jobs and self.service.kind is not ServiceKind.TENSORBOARD:
            raise ValueError(
                "service.jobs: only a tensorboard shows other jobs' outputs; remove jobs"
            )

    def _check_image(self) -> None:
        if self.image is not None:
            return
        for name, given in (
            ("container_mounts", self.container_mounts),
            ("env_over_image", self.env_over_image is not None),
            ("shm_size", self.shm_size),
        ):
            if given:
                raise ValueError(
                    f"{name}: only a job in an image has it; give the job an image or remove it"
                )

    def _check_slurm(self) -> None:
        if (self.mode is JobMode.SLURM) != (self.slurm is not None):
            raise ValueError(
                "slurm: a job of mode slurm carries its batch script in `slurm` (submit it "
                "with sbatch), and only such a job does"
            )
        if self.slurm is not None and (self.type is JobType.BATCH or self.elastic):
            raise ValueError("slurm: a Slurm batch job is a regular job of fixed size")
        het = self.slurm.het if self.slurm is not None else []
        if het:
            if sum(c.nodes for c in het) != self.nodes:
                raise ValueError(
                    f"slurm.het: the components have {sum(c.nodes for c in het)} nodes in all, "
                    f"the job {self.nodes}; nodes is their sum"
                )
            first = het[0]
            if (first.gpus, first.cpus, first.memory) != (
                self.resources.gpus,
                self.resources.cpus,
                self.resources.memory,
            ):
                raise ValueError(
                    "slurm.het: resources are the first component's (each component's nodes "
                    "get what it asks)"
                )
            if self.alternatives:
                raise ValueError("alternatives: a heterogeneous job has no alternative specs")

    def _check_elastic(self) -> None:
        if self.min_nodes is None:
            return
        if self.min_nodes > self.nodes:
            raise ValueError(
                f"min_nodes: an elastic job runs on min_nodes..nodes nodes; min_nodes "
                f"({self.min_nodes}) is more than nodes ({self.nodes})"
            )
        if self.type is JobType.BATCH or self.parameter_servers or self.alternatives:
            raise ValueError(
                "min_nodes: an elastic job is a regular job without parameter servers or "
                "alternative specs; remove min_nodes or those"
            )
        if self.exclusive is False:
            raise ValueError(
                "exclusive: an elastic job takes whole nodes (it grows onto idle ones); remove "
                "exclusive: false or min_nodes"
            )

    @property
    def elastic(self) -> bool:
        return self.min_nodes is not None and self.min_nodes < self.nodes

    def commands(self) -> list[str]:
        """The command of each (sub-)task, in order."""
        if self.type is JobType.BATCH:
            return [t.command for t in self.tasks]
        return [self.command or ""]

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str | None) -> str | None:
        if value is not None and not _JOB_NAME.match(value):
            raise ValueError(
                "a job name is 1-128 letters, digits, '_', '.' or '-', starting with a letter "
                f"or digit (got {value!r})"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV:
            raise ValueError(f"{len(value)} variables; give at most {MAX_ENV}")
        size = sum(len(k) + len(v) for k, v in value.items())
        if size > MAX_ENV_BYTES:
            raise ValueError(
                f"{size} characters in all; the limit is {MAX_ENV_BYTES} (put large settings "
                "in a file the job reads)"
            )
        for key in value:
            if not _ENV_NAME.match(key):
                raise ValueError(
                    f"{key!r} is not an environment variable name; use letters, digits and '_', "
                    "not starting with a digit"
                )
        return value

    @field_validator("env_over_image")
    @classmethod
    def _over_names(cls, value: list[str] | None) -> list[str] | None:
        for key in value or []:
            if not _ENV_NAME.match(key):
                raise ValueError(
                    f"{key!r} is not an environment variable name; use letters, digits and '_', "
                    "not starting with a digit"
                )
        return value

    @field_validator("pool")
    @classmethod
    def _pool_name(cls, value: str | None) -> str | None:
        if value is not None and not _MOUNT_NAME.match(value):
            raise ValueError(f"a pool name is letters, digits, '_', '.' or '-' (got {value!r})")
        return value

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"workdir must be an absolute path (got {value!r})")
        return value

    def effective_name(self) -> str:
        """The given name, or one derived from the command's executable or script."""
        if self.name:
            return self.name
        if self.service is not None:
            return self.service.kind.value
        words = parse_command(self.commands()[0]).display_words()
        pick = words[0]
        for word in words[1:]:
            if not word.startswith("-"):
                if word.endswith((".py", ".sh")):
                    pick = word
                break
        stem = pick.rsplit("/", 1)[-1].split(".", 1)[0]
        clean = re.sub(r"[^\w.-]", "-", stem).strip("-.") or "job"
        return clean[:128]


class Slot(BaseModel):
    """The share of one node given to one worker of a job."""

    model_config = ConfigDict(frozen=True)

    node: str
    address: str
    gpus: tuple[int, ...] = ()
    cpus: float = 0.0
    memory: int = 0
    exclusive: bool = False
    """It holds its whole node, whatever it uses of it (docs/scheduling.md, "Whole nodes")."""
    held_gpus: int | None = None
    """The GPUs it holds on its node: every GPU of the node when exclusive, written when the
    job starts (None in slots stored before it was; see :mod:`gpuyard.models.holding`)."""
    port: int = 0
    """A port reserved for this worker on its node (the master port, a TF task's port)."""


class WorkerView(BaseModel):
    rank: int
    attempt: int
    node: str
    state: WorkerState
    role: WorkerRole = Field(
        WorkerRole.WORKER,
        description="check: a node check; exec: a command of gpuyard exec run; shell: a shell.",
    )
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class JobView(BaseModel):
    """A job as the API returns it."""

    id: int
    name: str
    owner: str
    status: JobStatus
    state: JobState
    spec: JobSpec | None = Field(
        description="What was submitted; null only when the stored spec no longer passes "
        "today's rules (see spec_error)."
    )
    spec_error: str | None = Field(
        None, description="Why the stored spec could not be read, when it could not."
    )
    attempt: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = Field(None, description="Why it waits, or why it ended the way it did.")
    wait_code: WaitCode | None = Field(
        None, description=f"Why a queued job waits, as a code: {WAIT_CODES}."
    )
    start_at: datetime | None = Field(
        None, description="When a queued job is expected to start, where a reservation says."
    )
    group: str = ""
    access: Access = Field(Access.NONE, description="What its group's other members may do.")
    allowed: list[Action] = Field(
        default_factory=list,
        description="What the caller may do with it (for interfaces to hide the rest).",
    )
    suspensions: int = Field(0, description="How many times it was suspended and requeued.")
    on_hold: bool = Field(
        False,
        description="Queued and held: it does not start until released (not the state "
        "`held`, which is a placed job kept for debugging).",
    )
    restarts: int = Field(0, description="How many times it was restarted after a fault.")
    held_until: datetime | None = Field(
        None,
        description="While it is held for debugging (state halting or held): when the hold "
        "ends, and the job with it.",
    )
    placement: list[Slot] = Field(default_factory=list)
    held_gpus: int | None = Field(
        None,
        description="GPUs its placement holds in all, null while it holds none: more than it "
        "asked for where a multi-node job takes whole nodes.",
    )
    workers: list[WorkerView] = Field(default_factory=list)


MAX_BATCH = 5000
"""Most jobs one request may submit, stop or delete."""


class JobBatch(BaseModel):
    """Several jobs submitted in one request, all or none (a job array)."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSpec] = Field(min_length=1, max_length=MAX_BATCH)


class SubmittedJobs(BaseModel):
    """The ids of the jobs a batch queued, in the batch's order."""

    ids: list[int]


class JobIds(BaseModel):
    """Jobs to act on in one request."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Id] = Field(min_length=1, max_length=MAX_BATCH)


class JobFailure(BaseModel):
    id: int
    detail: str
    code: str


class BulkResult(BaseModel):
    """What one request did to each of several jobs: those it acted on, and why the others
    were left as they are."""

    done: list[int] = Field(default_factory=list)
    states: dict[int, JobState] = Field(
        default_factory=dict,
        description="The state each job it acted on is in now (a deleted job has none).",
    )
    failed: list[JobFailure] = Field(default_factory=list)


class JobEvent(BaseModel):
    """One entry of a job's event log: a transition or a notable step."""

    id: int
    job_id: int
    time: datetime
    kind: EventKind = Field(description=f"What the entry records: {EVENT_KINDS}.")
    actor: str = Field(description=ACTOR_FORMS)
    from_state: JobState | None = None
    to_state: JobState | None = None
    reason: str = ""
    node: str | None = None
    attempt: int = 0


class Page(BaseModel, Generic[T]):
    """One page of a listing."""

    items: list[T]
    total: int
    offset: int
    limit: int


class LogChunk(BaseModel):
    """A slice of one worker's log. Offsets are in bytes; ``data`` is whole UTF-8 characters."""

    job_id: int
    worker: int
    attempt: int
    offset: int
    next_offset: int
    size: int = Field(description="The log's size in bytes when it was read.")
    data: str
    eof: bool = Field(description="True when the worker has ended and everything was read.")
