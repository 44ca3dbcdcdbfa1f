"""``gpuyard exec``: what a person asks of a job's processes while debugging it, and the answers.

docs/jobs.md's ``jmt``-style tool (status, stop, start, run CMD, run -t task|checker, kill N),
over the API: ``/api/v1/jobs/{id}/exec/...``. Each request is untrusted input: a command is an
argv (no shell), bounded in size, and checked here before anything is stored.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuyard.models.faults import MAX_HOLD, MIN_HOLD
from gpuyard.models.states import JobState, JobStatus
from gpuyard.models.units import Seconds
from gpuyard.models.worker import WorkerRole, WorkerState

__all__ = [
    "MAX_EXEC_ARGS",
    "MAX_EXEC_BYTES",
    "MAX_KILL_RANKS",
    "ExecKill",
    "ExecOutcome",
    "ExecRun",
    "ExecStatus",
    "ExecStop",
    "ExecTarget",
    "ExecWorker",
]

MAX_EXEC_ARGS = 1024
MAX_EXEC_BYTES = 64 * 1024
"""The most bytes a command's arguments may hold together."""
MAX_KILL_RANKS = 1024


class ExecTarget(StrEnum):
    """What ``gpuyard exec JOB run`` runs (docs/jobs.md, "Debugging a job: gpuyard exec")."""

    COMMAND = "command"
    """The given command, once on each node of the job's placement."""
    TASK = "task"
    """The job's own command again (``start``)."""
    CHECKER = "checker"
    """The node check of the pre-flight (compute burn, collective across the job's nodes)."""


class ExecStop(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    hold: Seconds | None = Field(
        None,
        ge=MIN_HOLD,
        le=MAX_HOLD,
        description="How long the job may stay held before it ends (at most 24h; default: "
        "its fault_tolerance.keep_failed, else an hour).",
    )


class ExecRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(
        default_factory=list,
        description="The command as an argv (no shell: wrap it in `bash -c` for one); only "
        "with target command.",
    )
    target: ExecTarget = ExecTarget.COMMAND

    @field_validator("command")
    @classmethod
    def _bounded(cls, argv: list[str]) -> list[str]:
        if len(argv) > MAX_EXEC_ARGS:
            raise ValueError(f"{len(argv)} arguments; give at most {MAX_EXEC_ARGS}")
        size = sum(len(a.encode("utf-8", errors="surrogatepass")) + 1 for a in argv)
        if size > MAX_EXEC_BYTES:
            raise ValueError(f"the command is {size} bytes; at most {MAX_EXEC_BYTES} are taken")
        if any("\0" in a for a in argv):
            raise ValueError("an argument holds a NUL byte, which no command can receive")
        return argv

    @model_validator(mode="after")
    def _command_for_its_target(self) -> ExecRun:
        if self.target is ExecTarget.COMMAND:
            if not self.command or not self.command[0].strip():
                raise ValueError(
                    "command is empty: give the command to run on each node, e.g. "
                    "`gpuyard exec JOB run -- hostname`"
                )
            first = self.command[0]
            name, assigns, _ = first.partition("=")
            if assigns and name.isidentifier() and "/" not in name:
                raise ValueError(
                    f"the command must start with an executable, but {name}=… sets an "
                    f"environment variable (a shell feature); run `env {first} …` or "
                    "`bash -c '…'`"
                )
        elif self.command:
            what = "the job's own command" if self.target is ExecTarget.TASK else "the node check"
            raise ValueError(f"target {self.target.value} runs {what}; it takes no command")
        return self


class ExecKill(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ranks: list[int] = Field(
        min_length=1,
        max_length=MAX_KILL_RANKS,
        description="The workers to kill (SIGKILL), by rank (`gpuyard exec JOB status`).",
    )

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, ranks: list[int]) -> list[int]:
        bad = [r for r in ranks if not 0 <= r < 1 << 20]
        if bad:
            raise ValueError(f"no worker has rank {bad[0]}; ranks are 0 to {(1 << 20) - 1}")
        return list(dict.fromkeys(ranks))


class ExecWorker(BaseModel):
    """One worker of the job's current attempt, with what is known of its processes."""

    rank: int
    role: WorkerRole = Field(
        description="worker, launcher, …; check (node check), exec (a command)."
    )
    attempt: int
    node: str
    state: WorkerState
    exit_code: int | None = None
    detail: str | None = Field(None, description="How it ended, or why it could not start.")
    pid: int | None = Field(None, description="Its supervisor's process id on its node.")
    command: list[str] | None = Field(None, description="An exec worker's command.")
    started_at: datetime | None = None
    finished_at: datetime | None = None


class ExecStatus(BaseModel):
    """``gpuyard exec JOB status``: the job's state and each worker of its current attempt."""

    job_id: int
    state: JobState
    status: JobStatus
    attempt: int
    held_until: datetime | None = Field(None, description="When a held job's hold ends.")
    reason: str | None = None
    workers: list[ExecWorker] = Field(default_factory=list)


class ExecOutcome(BaseModel):
    """What an exec action did (it is also the outcome of its usercall in the ft-log)."""

    job_id: int
    action: str
    outcome: str
    state: JobState
    ranks: list[int] = Field(
        default_factory=list, description="The workers it started or signalled."
    )
