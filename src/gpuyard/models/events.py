"""What an entry of a job's event log records (``JobEvent.kind``): the one list of the kinds
every writer of the log chooses from, stored and shown as these strings."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EVENT_KINDS", "EventKind"]


class EventKind(StrEnum):
    SUBMITTED = "submitted"
    """The job was accepted into the queue."""
    TRANSITION = "transition"
    """Its state changed (``from_state`` → ``to_state``)."""
    HOLD = "hold"
    """A person held it in the queue."""
    RELEASE = "release"
    """A person released its hold."""
    PRIORITY = "priority"
    """Its priority tier was changed."""
    RUNTIME = "runtime"
    """Its time limit was changed."""
    SIGNAL = "signal"
    """A signal was sent to its tasks."""
    EXEC = "exec"
    """Workers were launched in a held job for a command (``gpuyard exec``), or could not
    be, or what came of it."""
    USERCALL = "usercall"
    """A person acted on it through its fault-tolerance log (a shell, an exec stop)."""
    NOTICE = "notice"
    """Its workers were told to checkpoint and exit before a preemption."""
    ACKNOWLEDGED = "acknowledged"
    """A worker acknowledged the preemption notice."""
    CHECKPOINT = "checkpoint"
    """A worker reported a checkpoint written."""
    TASK = "task"
    """Some of its workers were told to exit while the job goes on (a failed sub-task, idle
    helpers)."""
    WORKER_EXITED = "worker_exited"
    """One of its workers exited."""
    WORKER_LOST = "worker_lost"
    """One of its workers was lost (its node or its supervisor went away)."""
    CONTROL_FILE = "control_file"
    """A control file one of its workers wrote was ignored (and why)."""
    CONTROLLER_ERROR = "controller_error"
    """The controller failed while handling it."""
    CHECK = "check"
    """A node check started for it."""
    FAULT = "fault"
    """An entry was added to its fault-tolerance log."""
    DIAGNOSIS = "diagnosis"
    """A diagnosis of why it failed."""
    IMAGE = "image"
    """Its image is being pulled on a node, was pulled (size and time), or waits for its
    registry (docs/images.md#pulling)."""
    DATA = "data"
    """Its datasets are being copied to its nodes, or were (size and rate, or a copy reused),
    before its workers start (docs/datasets.md, "Data preparation")."""
    GPU_XID = "gpu_xid"
    """A GPU it runs on reported an Xid error."""
    IDLE = "idle"
    """An interactive job was found idle: a warning before it is reclaimed, or its reclaim
    (docs/interactive.md#idle)."""


EVENT_KINDS = ", ".join(kind.value for kind in EventKind)
"""Every kind, for a field's description."""
