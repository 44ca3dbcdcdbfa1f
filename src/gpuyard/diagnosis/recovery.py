"""Whether a failed job is restarted, and whether its nodes are re-checked first: pure rules.

The controller gathers the facts (the job's fault-tolerance settings, its restarts so far, the
diagnosis of its logs, how its workers ended) and applies the answer (docs/fault-tolerance.md):

- fault tolerance off, a worker that exited with :data:`EXIT_NO_RESTART`, or the budget spent:
  the job fails;
- an error of the job's own (its code, its data, a NaN, GPU memory it asked too much of): the
  job fails unless ``retry_job_errors``; restarting elsewhere would not help;
- anything that points at a node, or at nothing known (a cascade seen alone, a worker killed
  by a signal nobody sent, a worker lost): restart, after a re-check of the job's nodes;
- with ``detect_exceptions`` off, every failure is restarted after a re-check.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.diagnosis.signatures import Diagnosis, Suspect
from gpuyard.models.faults import FaultTolerance

__all__ = ["EXIT_NO_RESTART", "Decision", "FailureFacts", "decide_recovery"]

EXIT_NO_RESTART = 76
"""A worker's "do not restart" exit status (``gpuyard.runtime.EXIT_NO_RESTART``)."""


@dataclass(frozen=True, slots=True)
class FailureFacts:
    diagnosis: Diagnosis | None
    """The root cause from the logs; None when they could not be read."""
    no_restart: tuple[int, ...] = ()
    """Ranks that exited with :data:`EXIT_NO_RESTART`."""
    first: str = ""
    """How the first worker to fail ended, in words (the evidence when the logs show nothing)."""
    first_rank: int | None = None
    first_node: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    restart: bool
    recheck: bool
    """Check the job's nodes before its command runs again."""
    why: str
    cause: str
    """What was found ("CUDA fatal error", "worker exited")."""
    suspect: Suspect
    evidence: str
    rank: int | None = None
    node: str | None = None


def decide_recovery(ft: FaultTolerance | None, restarts: int, facts: FailureFacts) -> Decision:
    diagnosis = facts.diagnosis
    cause = diagnosis.cause if diagnosis is not None else None
    suspect = diagnosis.suspect if diagnosis is not None else Suspect.UNKNOWN
    found = Decision(
        restart=False,
        recheck=False,
        why="",
        cause=cause.title if cause is not None else "worker failed",
        suspect=suspect,
        evidence=cause.line if cause is not None else facts.first,
        rank=cause.rank if cause is not None else facts.first_rank,
        node=(cause.node or None) if cause is not None else facts.first_node,
    )

    refused = _refusal(ft, restarts, facts)
    if refused or ft is None:
        return _with(found, restart=False, recheck=False, why=refused)
    left = f"restart {restarts + 1} of {ft.max_restarts}"
    if not ft.detect_exceptions:
        return _with(found, restart=True, recheck=True, why=f"{left}, after a re-check")
    if suspect is Suspect.JOB:
        if not ft.retry_job_errors:
            why = (
                "an error of the job's own is not restarted (submit with --retry-job-errors, "
                "or set fault_tolerance.retry_job_errors, to restart it anyway)"
            )
            return _with(found, restart=False, recheck=False, why=why)
        return _with(found, restart=True, recheck=False, why=left)
    what = "points at a node" if suspect is Suspect.NODE else "has no known cause"
    return _with(found, restart=True, recheck=True, why=f"{left}: the fault {what}; re-checking")


def _refusal(ft: FaultTolerance | None, restarts: int, facts: FailureFacts) -> str:
    """Why the job may not be restarted whatever the cause ("": it may)."""
    if ft is None or not ft.enabled:
        return "fault tolerance is off"
    if facts.no_restart:
        ranks = ", ".join(map(str, facts.no_restart))
        return f"worker {ranks} exited with {EXIT_NO_RESTART} (do not restart)"
    if restarts >= ft.max_restarts:
        return f"its restart budget is spent ({restarts} of {ft.max_restarts})"
    return ""


def _with(d: Decision, *, restart: bool, recheck: bool, why: str) -> Decision:
    return Decision(restart, recheck, why, d.cause, d.suspect, d.evidence, d.rank, d.node)
