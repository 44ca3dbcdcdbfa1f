"""A job submitted through the Slurm-compatible ``sbatch`` (docs/slurm.md).

The batch script runs on the job's first node, as Slurm's batch step does; ``srun`` inside it
starts tasks on the job's nodes through the workers' remote-exec agents. What Slurm knows about
the job that gpuyard's own spec has no word for lives here: the script, the task layout, the
output patterns, the array it belongs to, the signal before the time limit.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from gpuyard.spec_limits import MAX_SCRIPT, signal_number

__all__ = [
    "MAX_SCRIPT",
    "SlurmArray",
    "SlurmBatch",
    "SlurmComponent",
    "SlurmSignal",
    "SlurmState",
    "SlurmStepView",
    "signal_number",
]


_PATTERN = re.compile(r"^[^\x00\n]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Word = Annotated[str, StringConstraints(max_length=4096)]
OptionName = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class SlurmSignal(BaseModel):
    """``--signal=[B:]SIG[@SECONDS]``: the signal sent that long before the time limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: int = Field(ge=1, le=64)
    seconds: int = Field(60, ge=0, le=65535)
    batch: bool = Field(False, description="Signal the batch shell only (B:), not the steps.")


class SlurmArray(BaseModel):
    """One task of a job array (``--array``): its own job, linked to the array's first."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: int | None = Field(
        None, ge=1, description="The array's id (its first task's job id); None: this is it."
    )
    task_id: int = Field(ge=0, le=4_000_000)
    count: int = Field(ge=1, le=100_000)
    min: int = Field(ge=0)
    max: int = Field(ge=0)
    step: int = Field(1, ge=1)
    throttle: int | None = Field(None, ge=1, description="At most this many tasks at once (%N).")
    spec: str = Field("", max_length=4096, description="The --array value as given.")


class SlurmComponent(BaseModel):
    """One component of a heterogeneous job (``#SBATCH hetjob``, ``sbatch ... : ...``): its
    nodes come after those of the components before it, in the job's node order."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    job_name: str = Field(min_length=1, max_length=1024, description="Its SLURM_JOB_NAME.")
    nodes: int = Field(ge=1, le=100_000)
    ntasks: int = Field(ge=1, le=1_000_000)
    ntasks_per_node: int = Field(1, ge=1, le=4096)
    cpus_per_task: int | None = Field(None, ge=1, le=4096)
    gpus: int = Field(0, ge=0, le=1024, description="GPUs per node.")
    cpus: float = Field(1.0, gt=0, le=100_000, description="CPU cores per node.")
    memory: int = Field(0, ge=0, le=1 << 60, description="Memory per node in bytes.")

    @field_validator("job_name")
    @classmethod
    def _printable(cls, value: str) -> str:
        if _CONTROL.search(value):
            raise ValueError("control characters (newlines, tabs, ...) are not allowed")
        return value

    @model_validator(mode="after")
    def _fits(self) -> SlurmComponent:
        if self.ntasks < self.nodes:
            raise ValueError(
                f"a component of {self.nodes} nodes runs at least one task on each "
                f"(ntasks is {self.ntasks})"
            )
        return self


class SlurmBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    script: str = Field(max_length=MAX_SCRIPT, description="The batch script, #! line first.")
    script_args: list[Word] = Field(
        default_factory=list,
        max_length=256,
        description="What follows the script on sbatch's line.",
    )
    job_name: str = Field(
        min_length=1, max_length=1024, description="Slurm's name (SLURM_JOB_NAME)."
    )
    ntasks: int = Field(ge=1, le=1_000_000, description="Tasks of the job (SLURM_NTASKS).")
    ntasks_per_node: int = Field(1, ge=1, le=4096)
    cpus_per_task: int | None = Field(None, ge=1, le=4096)
    submit_dir: str = Field(max_length=4096, description="Where sbatch ran (SLURM_SUBMIT_DIR).")
    work_dir: str = Field(max_length=4096, description="Where the script runs (--chdir).")
    output: str = Field("slurm-%j.out", max_length=4096)
    error: str | None = Field(None, max_length=4096, description="None: with the output.")
    open_mode: str = Field("truncate", pattern="^(append|truncate)$")
    requeue: bool = True
    signal: SlurmSignal | None = None
    array: SlurmArray | None = None
    begin: float | None = Field(
        None, ge=0, description="--begin: it does not start before this Unix time."
    )
    partition: str = Field("", max_length=256)
    account: str = Field("", max_length=256)
    qos: str = Field("", max_length=256)
    comment: str = Field("", max_length=4096)
    options: dict[OptionName, Word] = Field(
        default_factory=dict,
        max_length=256,
        description="Options accepted and kept without effect here (--wckey, --mail-type, ...).",
    )
    submit_host: str = Field("", max_length=256)
    uid: int = Field(0, ge=0)
    gid: int = Field(0, ge=0)
    het: list[SlurmComponent] = Field(
        default_factory=list,
        max_length=128,
        description="A heterogeneous job's components, the first included; empty otherwise.",
    )

    @field_validator("script")
    @classmethod
    def _interpreter(cls, value: str) -> str:
        if not value.startswith("#!"):
            raise ValueError(
                "This does not look like a batch script. The first line must start with #! "
                "followed by the path to an interpreter (for instance #!/bin/bash)"
            )
        if "\x00" in value:
            raise ValueError("the batch script contains a NUL byte")
        return value

    @field_validator("job_name", "partition", "account", "qos", "comment", "submit_host")
    @classmethod
    def _printable(cls, value: str) -> str:
        # They are printed in squeue's and sacct's columns: a newline would forge a row.
        if _CONTROL.search(value):
            raise ValueError("control characters (newlines, tabs, ...) are not allowed")
        return value

    @field_validator("script_args")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\x00" in word for word in value):
            raise ValueError("a script argument contains a NUL byte")
        return value

    @field_validator("output", "error", "submit_dir", "work_dir")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is not None and not _PATTERN.match(value):
            raise ValueError("a path is one line without NUL bytes")
        return value

    @field_validator("submit_dir", "work_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path (got {value!r})")
        return value

    @model_validator(mode="after")
    def _layout(self) -> SlurmBatch:
        if self.array is not None and not self.array.min <= self.array.task_id <= self.array.max:
            raise ValueError(
                f"array: task {self.array.task_id} is outside {self.array.min}-{self.array.max}"
            )
        if len(self.het) == 1:
            raise ValueError("het: a heterogeneous job has at least two components")
        if self.het and self.array is not None:
            raise ValueError("het: a heterogeneous job cannot be a job array")
        if self.het and sum(c.ntasks for c in self.het) != self.ntasks:
            raise ValueError("het: ntasks is the sum of the components' tasks")
        return self


class SlurmStepView(BaseModel):
    """An ``srun`` step of a Slurm batch job's current attempt (sacct's ``<job>.<id>`` row)."""

    model_config = ConfigDict(frozen=True)

    id: int = Field(ge=0, description="The step id (SLURM_STEP_ID).")
    name: str = Field(description="The program the step ran.")
    nodes: list[str] = Field(description="The nodes its tasks ran on.")
    tasks: int = Field(ge=0)
    start: float = Field(description="Unix time it started.")
    end: float | None = Field(None, description="Unix time it ended; None while it runs.")
    exit_code: int | None = Field(
        None, description="srun's exit status (128 + N: killed by signal N); None while it runs."
    )


class SlurmState(StrEnum):
    """A Slurm job's or step's state, in Slurm's own words (what ``squeue``, ``sacct`` and
    slurmrestd show). gpuyard's job states map onto the first eight; the rest appear only
    where a user names them (``--state``) or a renderer spells them."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    CONFIGURING = "CONFIGURING"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
