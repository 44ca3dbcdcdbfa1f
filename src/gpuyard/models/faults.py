"""A job's fault-tolerance settings, and the entries of its fault-tolerance log.

docs/references.md gives two ways back from a fault, and they exclude each other: **fault restart**
(故障重启: the job starts again from scratch) and **checkpoint resume** (断点续训: it starts again
from the latest checkpoint its runtime reported). ``recovery`` picks one. docs/fault-tolerance.md
describes the loop: detect, re-check the nodes, cordon those that fail, restart within budget.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuyard.models.units import Seconds

__all__ = ["FaultEntry", "FaultTolerance", "Performance", "Recovery", "SlowAction"]

MAX_RESTARTS = 100
MAX_HANG_TIMEOUT = 7 * 86400.0
MIN_HANG_TIMEOUT = 10.0
MAX_HOLD = 86400.0
"""The longest a job may be held for debugging (``keep_failed``, ``gpuyard exec stop``)."""
MIN_HOLD = 1.0


_WITHOUT_RESTARTS = frozenset({"enabled", "keep_failed"})
"""Fields that mean something with fault tolerance off (a failure is held, not restarted)."""


class Recovery(StrEnum):
    RESUME = "resume"
    """Checkpoint resume: the next attempt loads the latest checkpoint (``GPUYARD_RESUME=1``)."""
    RESTART = "restart"
    """Fault restart: the next attempt starts from scratch (``GPUYARD_RESUME=0``; its
    checkpoints are kept, but the runtime's ``load_checkpoint`` returns None)."""


class SlowAction(StrEnum):
    ALERT = "alert"
    """A ``performance`` entry in the job's fault-tolerance log, an event, and the pool's alert
    webhook when one is set."""
    RESCHEDULE = "reschedule"
    """As a fault: the job is restarted after a check of its nodes (counts as a restart)."""


class Performance(BaseModel):
    """Performance detection (002 性能检测): the job's step rate against its own history."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    threshold: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Slow: the step rate over the last window is below this fraction of the "
        "job's usual rate (the median of its earlier windows); also the hardware ratio, when "
        "the runtime reports one.",
    )
    window: Seconds = Field(
        300.0, ge=10, le=86400, description="Seconds the rate is measured over (sustained)."
    )
    action: SlowAction = Field(SlowAction.ALERT, description="alert, or reschedule.")


class FaultTolerance(BaseModel):
    """What the platform does when the job fails for a reason that is not its own."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(
        True, description="Restart the job after a fault (false: a failure ends the job)."
    )
    recovery: Recovery = Field(
        Recovery.RESUME,
        description="resume (from the latest checkpoint) or restart (from scratch); exclusive.",
    )
    max_restarts: int = Field(
        3, ge=0, le=MAX_RESTARTS, description="Restarts after faults before the job fails."
    )
    preflight: bool = Field(
        False,
        description="Check every node (compute burn, collective across the job's nodes) "
        "before the command starts; a node that fails is cordoned and the job placed again.",
    )
    preflight_tries: int = Field(
        3,
        ge=1,
        le=10,
        description="Placements whose pre-flight check may fail before the job "
        "fails with the check's evidence.",
    )
    detect_exceptions: bool = Field(
        True,
        description="Read the failed workers' logs for the root cause; an error in the job's "
        "own code is then not restarted (false: every failure is restarted).",
    )
    retry_job_errors: bool = Field(
        False,
        description="Restart also after an error in the job's own code or data (an exception, "
        "a NaN loss, GPU out of memory).",
    )
    hang_timeout: Seconds | None = Field(
        None,
        ge=MIN_HANG_TIMEOUT,
        le=MAX_HANG_TIMEOUT,
        description="A job whose workers report no progress (runtime heartbeat) and write no "
        "log for this long is hung: it is stopped and restarted (leave out: no hang detection). "
        "Before an attempt's first progress report (its start) at least 60 s.",
    )
    keep_failed: Seconds | None = Field(
        None,
        ge=MIN_HOLD,
        le=MAX_HOLD,
        description="When the job fails for good (no restart left, or not one to restart), "
        "hold it this long instead of ending it: its failed workers' processes are stopped, its "
        "nodes stay its own, and `gpuyard exec` can run commands on them or start it again; "
        "then it fails (at most 24h; leave out: a failure ends the job at once).",
    )

    performance: Performance | None = Field(
        None,
        description="Watch the job's step rate (reported with gpuyard.runtime.report_progress) "
        "and act when it falls well below its own usual rate (leave out: no watch).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> FaultTolerance:
        # By value, not by what was given: a stored spec comes back with every field.
        defaults = FaultTolerance.model_construct()
        changed = [
            name
            for name in type(self).model_fields
            if name not in _WITHOUT_RESTARTS and getattr(self, name) != getattr(defaults, name)
        ]
        if not self.enabled and changed:
            raise ValueError(
                f"fault_tolerance: {', '.join(changed)} only apply with fault tolerance on; "
                "set enabled: true or remove them"
            )
        if self.preflight_tries != defaults.preflight_tries and not self.preflight:
            raise ValueError(
                "fault_tolerance.preflight_tries counts pre-flight checks; set preflight: true "
                "or remove it"
            )
        if self.retry_job_errors and not self.detect_exceptions:
            raise ValueError(
                "fault_tolerance.retry_job_errors needs detect_exceptions (without it every "
                "failure is restarted anyway); remove one"
            )
        return self

    @property
    def restarts(self) -> int:
        """The restart budget in force (0 when fault tolerance is off)."""
        return self.max_restarts if self.enabled else 0


class FaultEntry(BaseModel):
    """One line of a job's fault-tolerance log (``gpuyard ft-log JOB``)."""

    id: int
    attempt: int = Field(description="The attempt the fault ended.")
    time: datetime
    kind: str = Field(
        description="failure, hang, check (a pre-flight or re-check), or usercall (an action "
        "through `gpuyard exec`: its actor, the command, what came of it)."
    )
    cause: str = Field(description="What was found, e.g. 'CUDA fatal error'.")
    suspect: str = Field(
        description="node, job or unknown: what the cause points at (none for a usercall)."
    )
    rank: int | None = None
    node: str | None = None
    evidence: str = Field(description="The log line or measurement it rests on.")
    action: str = Field(description="What the platform did about it.")
    outcome: str | None = Field(None, description="How that ended; null while it is under way.")
    outcome_time: datetime | None = None
    actor: str | None = Field(
        None, description="Who asked, for a usercall (user:NAME); null: the platform."
    )
