"""Job states, what each means, and the moves allowed between them.

The six *visible* statuses are those of docs/jobs.md, "States" (排队中 queued, 运行中 running,
错误 error, 停止 stopped, 过期 expired, 成功 succeeded). Internally a job also passes through
steps a user sees in its events: starting (placed, workers being launched) and the draining
steps stopping / expiring / failing (workers are being told to exit; the job ends in the
matching terminal state once every worker has exited). A job can also be *held* for debugging
(``gpuyard exec``, ``fault_tolerance.keep_failed``): halting (its workers are told to exit),
held (no process of its own runs, its placement is kept, for at most a time limit), restarting
(a person started it again: it runs as the next attempt on the same nodes). Each internal state
maps to exactly one visible status, so filters and displays never have to guess.

Every move goes through :func:`check_transition`; an illegal move raises
:class:`~gpuyard.errors.IllegalTransition`, never an assert.
"""

from __future__ import annotations

from enum import StrEnum

from gpuyard.errors import IllegalTransition

__all__ = [
    "DRAIN_TARGET",
    "HELD_STATES",
    "HOLDING",
    "HOLD_TARGET",
    "LIVE",
    "PENDING",
    "TRANSITIONS",
    "JobState",
    "JobStatus",
    "check_transition",
    "end_of_hold",
]


class JobStatus(StrEnum):
    """What a user sees."""

    QUEUED = "queued"
    """Waiting for resources, or requeued after a suspension."""
    RUNNING = "running"
    """Placed on nodes: being launched, running, or being told to exit."""
    FAILED = "failed"
    """Ended with an error (a worker failed, or it could not be launched). Shown as "error"."""
    STOPPED = "stopped"
    """Stopped by a person."""
    EXPIRED = "expired"
    """Ran past its max runtime and was stopped by the platform."""
    SUCCEEDED = "succeeded"
    """Every worker exited with status 0."""

    @property
    def label(self) -> str:
        """The word the reference documents use (错误 = error for failed)."""
        return "error" if self is JobStatus.FAILED else self.value

    def is_terminal(self) -> bool:
        return self in _TERMINAL_STATUSES

    @classmethod
    def parse(cls, text: str) -> JobStatus:
        """Accept the value or the label (``error``); the message lists the choices."""
        value = text.strip().lower()
        if value == "error":
            return cls.FAILED
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(s.label for s in cls)
            raise ValueError(f"unknown status {text!r}; choose one of {choices}") from None


_TERMINAL_STATUSES = frozenset(
    {JobStatus.FAILED, JobStatus.STOPPED, JobStatus.EXPIRED, JobStatus.SUCCEEDED}
)


class JobState(StrEnum):
    """The controller's view: the visible status plus the steps in between."""

    QUEUED = "queued"
    STARTING = "starting"
    """Placed; its workers are being launched."""
    RUNNING = "running"
    STOPPING = "stopping"
    """A person asked it to stop; workers got SIGTERM and have the graceful period."""
    EXPIRING = "expiring"
    """It passed its max runtime; workers got SIGTERM and have the graceful period."""
    FAILING = "failing"
    """A worker failed; the others are being told to exit."""
    COMPLETING = "completing"
    """The workers whose exit decides the job succeeded; its helpers (MPI targets, parameter
    servers) are being told to exit."""
    SUSPENDING = "suspending"
    """Told to checkpoint and exit (a higher tier needs its room, a person asked, or an
    elastic job grows); it goes back to the queue once its workers have exited."""
    RECOVERING = "recovering"
    """A worker failed and the job runs again (its fault tolerance): its workers are told to
    exit; then it restarts on the same nodes, re-checked first, or goes back to the queue."""
    SUSPENDED = "suspended"
    """Back in the queue at its original position; it resumes as the next attempt."""
    HALTING = "halting"
    """To be held (``gpuyard exec stop``, or it failed with ``keep_failed``): its workers are
    told to exit (SIGTERM, SIGKILL after the graceful period); then it is held."""
    HELD = "held"
    """No process of its own runs, its nodes stay its own, for debugging (``gpuyard exec``:
    run a command on its nodes, check them, start it again) until its hold's time limit, when
    it ends (failed if it was held after a failure, else stopped)."""
    RESTARTING = "restarting"
    """A person started a held job again: once nothing of it runs, it restarts as the next
    attempt on the same nodes, or goes back to the queue if one of them is gone or cordoned."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    EXPIRED = "expired"

    @property
    def status(self) -> JobStatus:
        return _STATUS_OF[self]

    def is_terminal(self) -> bool:
        return self.status.is_terminal()

    def holds_resources(self) -> bool:
        """True while the job's placement counts against its nodes."""
        return self in _HOLDING

    @classmethod
    def for_status(cls, status: JobStatus) -> frozenset[JobState]:
        return frozenset(s for s in cls if s.status is status)


_STATUS_OF: dict[JobState, JobStatus] = {
    JobState.QUEUED: JobStatus.QUEUED,
    JobState.STARTING: JobStatus.RUNNING,
    JobState.RUNNING: JobStatus.RUNNING,
    JobState.STOPPING: JobStatus.RUNNING,
    JobState.EXPIRING: JobStatus.RUNNING,
    JobState.FAILING: JobStatus.RUNNING,
    JobState.COMPLETING: JobStatus.RUNNING,
    JobState.SUSPENDING: JobStatus.RUNNING,
    JobState.RECOVERING: JobStatus.RUNNING,
    JobState.HALTING: JobStatus.RUNNING,
    JobState.HELD: JobStatus.RUNNING,
    JobState.RESTARTING: JobStatus.RUNNING,
    JobState.SUSPENDED: JobStatus.QUEUED,
    JobState.SUCCEEDED: JobStatus.SUCCEEDED,
    JobState.FAILED: JobStatus.FAILED,
    JobState.STOPPED: JobStatus.STOPPED,
    JobState.EXPIRED: JobStatus.EXPIRED,
}

_HOLDING = frozenset(
    {
        JobState.STARTING,
        JobState.RUNNING,
        JobState.STOPPING,
        JobState.EXPIRING,
        JobState.FAILING,
        JobState.COMPLETING,
        JobState.SUSPENDING,
        JobState.RECOVERING,
        JobState.HALTING,
        JobState.HELD,
        JobState.RESTARTING,
    }
)

PENDING = frozenset({JobState.QUEUED, JobState.SUSPENDED})
"""The states the scheduler places."""

HOLDING = tuple(sorted(_HOLDING))
"""The states whose placement counts against its nodes, in a fixed order (for SQL ``IN``)."""

LIVE = tuple(sorted(s for s in JobState if not s.is_terminal()))
"""Every state but the terminal ones."""

# The draining states and where each one ends once every worker has exited.
DRAIN_TARGET: dict[JobState, JobState] = {
    JobState.STOPPING: JobState.STOPPED,
    JobState.EXPIRING: JobState.EXPIRED,
    JobState.FAILING: JobState.FAILED,
    JobState.COMPLETING: JobState.SUCCEEDED,
}

HOLD_TARGET: dict[JobState, JobState] = {JobState.HALTING: JobState.HELD}
"""Draining states that end in a hold rather than an end once every worker has exited."""

HELD_STATES = frozenset({JobState.HALTING, JobState.HELD})
"""A hold is on: it ends at its time limit (``held_until``)."""

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # FAILED from the queue: the platform could not start it at all (its stored spec no longer
    # loads, say), after retrying.
    JobState.QUEUED: frozenset({JobState.STARTING, JobState.STOPPED, JobState.FAILED}),
    JobState.SUSPENDED: frozenset({JobState.STARTING, JobState.STOPPED, JobState.FAILED}),
    # SUSPENDED from starting: its node check failed; it is placed again without the node.
    # HALTING from starting or recovering: a person holds it (gpuyard exec stop) on its way.
    JobState.STARTING: frozenset(
        {
            JobState.RUNNING,
            JobState.STOPPING,
            JobState.FAILING,
            JobState.FAILED,
            JobState.SUSPENDED,
            JobState.HALTING,
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.STOPPING,
            JobState.EXPIRING,
            JobState.FAILING,
            JobState.COMPLETING,
            JobState.SUSPENDING,
            JobState.RECOVERING,
            # Held: by a person (gpuyard exec stop), or after a failure (keep_failed; straight
            # to HELD when every worker has already exited).
            JobState.HALTING,
            JobState.HELD,
        }
    ),
    # Restarted in place (STARTING, as the next attempt) or placed again (SUSPENDED).
    JobState.RECOVERING: frozenset(
        {
            JobState.STARTING,
            JobState.SUSPENDED,
            JobState.FAILED,
            JobState.STOPPING,
            JobState.HALTING,
        }
    ),
    # A hold ends in FAILING when the job was held after a failure, in STOPPING otherwise
    # (its time limit, or a person's stop); a person's start makes it RESTARTING.
    JobState.HALTING: frozenset({JobState.HELD, JobState.STOPPING, JobState.FAILING}),
    JobState.HELD: frozenset({JobState.RESTARTING, JobState.STOPPING, JobState.FAILING}),
    JobState.RESTARTING: frozenset(
        {JobState.STARTING, JobState.SUSPENDED, JobState.STOPPING, JobState.FAILING}
    ),
    JobState.SUSPENDING: frozenset(
        {
            JobState.SUSPENDED,
            JobState.STOPPING,
            JobState.EXPIRING,
            JobState.FAILING,
            JobState.SUCCEEDED,
            JobState.COMPLETING,
        }
    ),
    JobState.STOPPING: frozenset({JobState.STOPPED}),
    JobState.EXPIRING: frozenset({JobState.EXPIRED, JobState.STOPPING}),
    JobState.FAILING: frozenset({JobState.FAILED, JobState.STOPPING}),
    JobState.COMPLETING: frozenset({JobState.SUCCEEDED, JobState.STOPPING, JobState.EXPIRING}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.STOPPED: frozenset(),
    JobState.EXPIRED: frozenset(),
}
"""Allowed moves, as data. A person's stop wins over an expiry or a failure in progress."""


def check_transition(job_id: int, current: JobState, target: JobState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is allowed."""
    if target not in TRANSITIONS[current]:
        if current.is_terminal():
            why = f"it has already ended ({current.status.label})"
        else:
            why = f"it is {current.value}"
        raise IllegalTransition(
            f"job {job_id} cannot become {target.value}: {why}",
            extra={"state": current.value, "target": target.value},
        )


def end_of_hold(outcome: JobState | None) -> JobState:
    """Where a hold ends (its time limit, or a person's stop): draining to failed for a job
    held after it failed (``keep_failed``), else to stopped."""
    return JobState.FAILING if outcome is JobState.FAILED else JobState.STOPPING
