"""What the Slurm-compatible commands show, in Slurm's own terms.

The commands (``gpuyard.slurm.commands``) turn gpuyard's job and node views into these records;
the renderers (``gpuyard.slurm.render``) print them exactly as Slurm 22.05 does. Keeping the two
apart lets the renderers be tested byte for byte against outputs recorded from a real Slurm
(``tests/data/slurm``) without a pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuyard.models.slurm import SlurmState

__all__ = ["JobRecord", "NodeRecord", "PartitionRecord", "StepRecord"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A job step: ``batch`` (the batch shell), ``extern``, or a number (an ``srun``)."""

    name: str
    state: SlurmState
    """RUNNING, COMPLETED, FAILED, CANCELLED, ..."""
    nodes: tuple[str, ...]
    exit_code: int = 0
    """-1: none recorded (sacct prints an empty ExitCode, e.g. an extern step cut short)."""
    signal: int = 0
    start: float | None = None
    end: float | None = None
    tasks: int = 1
    cpus: int = 1
    job_name: str = ""
    """What sacct's JobName shows for the step: ``batch``, ``extern``, or the program ``srun``
    ran (``hostname``); empty means the step's own name."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One row of ``squeue``/``sacct`` (an array's pending remainder is one record too)."""

    job_id: int
    """JobIDRaw: the job's own id (for an array task, the task's own id)."""
    name: str
    user: str
    uid: int
    state: SlurmState
    """Slurm's word: PENDING, RUNNING, SUSPENDED, COMPLETING, COMPLETED, FAILED, CANCELLED,
    TIMEOUT, REQUEUED, PREEMPTED, NODE_FAIL, OUT_OF_MEMORY."""
    partition: str = "gpu"
    account: str = ""
    group: str = ""
    gid: int = 0
    array_job_id: int | None = None
    array_task: str | None = None
    """The task index ("3"), or the pending remainder as Slurm prints it ("[2-9%2]")."""
    cancelled_by: int | None = None
    """The uid that cancelled it: sacct shows ``CANCELLED by <uid>``."""
    reason: str = "None"
    """Why it is pending (Priority, Resources, Dependency, JobArrayTaskLimit, BeginTime, ...)."""
    exit_code: int = 0
    signal: int = 0
    nodes: tuple[str, ...] = ()
    num_nodes: int = 1
    num_cpus: int = 1
    num_tasks: int = 1
    cpus_per_task: int = 1
    gpus_per_node: int = 0
    gpus_per_task: int = 0
    """``--gpus-per-task`` (scontrol's TresPerTask), when the job asked that way."""
    memory_mb: int = 0
    """Per node."""
    submit: float = 0.0
    eligible: float | None = None
    start: float | None = None
    end: float | None = None
    time_limit: float | None = None
    """Seconds; None is UNLIMITED."""
    priority: int = 0
    qos: str = "normal"
    restarts: int = 0
    work_dir: str = ""
    command: str = ""
    stdout: str = ""
    stderr: str = ""
    stdin: str = "/dev/null"
    comment: str = ""
    requeue: bool = True
    batch: bool = True
    """False for an allocation made by ``salloc`` (no batch script, no ``.batch`` step)."""
    steps: tuple[StepRecord, ...] = field(default_factory=tuple)
    # What squeue's rarer columns and ``scontrol show job`` print (defaults: what a plain
    # ``sbatch`` job shows).
    nice: int = 0
    dependency: str = ""
    exclusive: bool = False
    """``--exclusive``: squeue %h and scontrol OverSubscribe show NO instead of OK."""
    ntasks_per_node: int = 0
    min_cpus_per_node: int = 1
    max_nodes: int = 0
    """``-N 3`` sets it: a pending job shows ``NumNodes=3-3`` in scontrol (0: not set)."""
    array_throttle: int = 0
    """``%2`` of ``--array=0-9%2``: scontrol's ArrayTaskThrottle."""
    accrue: float | None = None
    last_sched_eval: float | None = None
    scheduler: str = ""
    """Main or Backfill: which scheduler started (or last looked at) the job."""
    alloc_node: str = ""
    alloc_sid: int = 0
    batch_host: str = ""
    tres: str = ""
    """scontrol's TRES: ``cpu=4,node=2,billing=4`` (empty: worked out from cpus and nodes)."""
    het_job_id: int | None = None
    """A component of a heterogeneous job: the job's (its first component's) id."""
    het_job_offset: int = 0
    het_job_id_set: str = ""
    """All the job's component ids, as scontrol's HetJobIdSet prints them (``516-517``)."""

    @property
    def display_id(self) -> str:
        """``17158``, ``17159_0``, ``17166_[2-9%2]``, ``516+1``."""
        if self.het_job_id is not None:
            return f"{self.het_job_id}+{self.het_job_offset}"
        if self.array_job_id is None or self.array_task is None:
            return str(self.job_id)
        return f"{self.array_job_id}_{self.array_task}"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    partitions: tuple[str, ...]
    state: str
    """Slurm's word: idle, mixed, allocated, drained, draining, down, ..."""
    cpus: int
    cpus_alloc: int = 0
    memory_mb: int = 0
    memory_alloc_mb: int = 0
    gpus: int = 0
    gpus_alloc: int = 0
    address: str = ""
    features: tuple[str, ...] = ()
    reason: str = ""
    boot_time: float | None = None
    reason_user: str = ""
    reason_time: float | None = None


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    name: str
    default: bool
    state: str = "up"
    max_time: float | None = None
    """Seconds; None is infinite."""
    nodes: tuple[str, ...] = ()
