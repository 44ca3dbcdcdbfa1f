"""The library a training script imports to take part in time-sharing (docs/runtime.md).

It implements the script's side of docs/preemption.md: learn of a preemption notice, acknowledge
it, save a checkpoint, suspend (exit 75), and resume on the next attempt from the checkpoint::

    import gpuyard.runtime as gr

    state = gr.load_checkpoint()               # None on a first attempt
    for step in range(start, steps):
        if gr.preemption_requested():          # every step: microseconds
            gr.acknowledge()
            gr.save_checkpoint(state, step=step)
            gr.suspend()                       # exits with 75; `finally` blocks run
        ...
        gr.report_progress(step, loss=loss)    # written at most about once a second

A ``torch.distributed`` job polls `gpuyard.runtime.torch.preemption_agreed` instead, so that
every rank stops after the same step.

Importing this package is cheap and has no effects: it imports neither torch nor any part of
the platform, and reads the environment only when first used (`attempt`, `checkpoint_dir` and
`control_dir` read like attributes but are looked up on access).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, SupportsFloat

from gpuyard.runtime.contract import (
    EXIT_NO_RESTART,
    EXIT_SUSPENDED,
    ContractError,
)
from gpuyard.runtime.process import PreemptionNotice, current

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "EXIT_NO_RESTART",
    "EXIT_SUSPENDED",
    "ContractError",
    "PreemptionNotice",
    "acknowledge",
    "attempt",
    "checkpoint_dir",
    "control_dir",
    "flush",
    "load",
    "load_checkpoint",
    "preemption_deadline",
    "preemption_notice",
    "preemption_reason",
    "preemption_requested",
    "record_checkpoint",
    "report_progress",
    "save",
    "save_checkpoint",
    "suspend",
]

if TYPE_CHECKING:
    # Looked up by `__getattr__` below on each access; declared here for type checkers.
    attempt: int
    """0 on a first run, then one more for each resume or restart (``GPUYARD_ATTEMPT``)."""
    resume: bool
    """False when this attempt starts from scratch after a fault (``GPUYARD_RESUME=0``): a
    script that loads its checkpoints its own way should then not load them."""
    checkpoint_dir: Path
    """The job's checkpoint directory (``GPUYARD_CHECKPOINT_DIR``; ``./checkpoints`` outside)."""
    control_dir: Path | None
    """This worker's control directory (``GPUYARD_CONTROL_DIR``); None outside gpuyard."""


def __getattr__(name: str) -> Any:
    if name in {"attempt", "resume", "checkpoint_dir", "control_dir"}:
        return getattr(current().env, name)
    if name == "torch":  # `gpuyard.runtime.torch.preemption_agreed()` after a bare import
        module: ModuleType = importlib.import_module("gpuyard.runtime.torch")
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def preemption_requested() -> bool:
    """Whether the platform asked this job to leave (or the simulate switch fired).

    Call it every step: it costs about a microsecond. It first installs a handler for the
    notice signal and registers this process to receive it (main thread only), then answers
    True from the moment the signal arrives or the flag file appears (looked at at most every
    half second), and stays True.
    """
    return current().preemption_requested()


def preemption_notice() -> PreemptionNotice | None:
    """The notice (source, time, deadline, reason, who), or None while there is none."""
    return current().preemption_notice()


def preemption_deadline() -> float | None:
    """Unix time by which the job must have exited, or None (no notice, or none given).

    Past it the platform sends SIGTERM, then SIGKILL after the graceful-shutdown period; a
    script with a slow save can use it to decide between a full and a quick checkpoint.
    """
    notice = current().preemption_notice()
    return None if notice is None else notice.deadline


def preemption_reason() -> str | None:
    """Why the job is asked to leave (for its log), or None."""
    notice = current().preemption_notice()
    return None if notice is None else notice.reason


def acknowledge(*, rank: int | None = None) -> None:
    """Tell the platform the notice is being handled (``ack.json``, once per process).

    `rank` defaults to the launcher's global rank (``RANK`` with ``LOCAL_RANK``,
    ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``) when there is one.
    """
    current().acknowledge(rank=rank)


def suspend() -> NoReturn:
    """Leave to be requeued: write ``suspended.json``, flush, exit with `EXIT_SUSPENDED` (75).

    Raises `SystemExit`, so ``finally`` blocks and ``atexit`` handlers run. Call it after the
    checkpoint is saved; it acknowledges first if `acknowledge` was not called. Every rank of a
    distributed job calls it (a launcher such as torchrun may report its own exit code instead
    of 75; ``suspended.json`` still tells the platform). Steps saved through `save` are on
    storage before it exits (the job may resume on other nodes).
    """
    flush()
    current().suspend()


def report_progress(step: int, **metrics: SupportsFloat | str | None) -> bool:
    """Publish the current step and metrics (``progress.json``) for the platform's views.

    Written at most about once a second (the first call always writes; the others in between
    are dropped), so it can be called every step. Numbers, NumPy scalars and 0-d tensors are
    accepted. Returns whether this call wrote.
    """
    return current().report_progress(step, **metrics)


def save_checkpoint(state: Any, *, step: int | None = None, name: str = "checkpoint.pt") -> Path:
    """``torch.save(state)`` to ``checkpoint_dir/name`` atomically, and record it.

    See `gpuyard.runtime.checkpoint.save_checkpoint`.
    """
    from gpuyard.runtime.checkpoint import save_checkpoint as save

    return save(state, step=step, name=name)


def load_checkpoint(
    name: str = "checkpoint.pt", *, map_location: Any = None, weights_only: bool = True
) -> Any:
    """``torch.load`` of ``checkpoint_dir/name``, or None when there is none yet.

    See `gpuyard.runtime.checkpoint.load_checkpoint`.
    """
    from gpuyard.runtime.checkpoint import load_checkpoint as load

    return load(name, map_location=map_location, weights_only=weights_only)


def save(step: int, state: Any) -> str:
    """Save this rank's `state` as `step` through the checkpoint service: copied into node
    memory, then persisted to the job's storage by a process beside the trainer. Returns
    ``memory``, or ``storage`` where it had to write there itself (docs/checkpoints.md).

    See `gpuyard.runtime.flash`.
    """
    from gpuyard.runtime.flash import save as flash_save

    return flash_save(step, state)


def load(*, step: int | None = None, map_location: Any = None, into: Any = None) -> Any:
    """The newest step every rank holds whole (or `step`): a `gpuyard.runtime.flash.Restored`
    with ``step``, ``state`` and ``source`` (``memory`` or ``storage``), or None when there is
    none. With several ranks, call it after ``torch.distributed.init_process_group``. `into`:
    a state of the same shape whose tensors (and DTensors' local shards) are filled in place.
    """
    from gpuyard.runtime.flash import load as flash_load

    return flash_load(step=step, map_location=map_location, into=into)


def flush(timeout: float = 600.0) -> bool:
    """Wait until the newest step saved through `save` is on storage (at exit this is done by
    itself; a script that leaves with ``os._exit`` calls it first)."""
    flash = sys.modules.get("gpuyard.runtime.flash")
    return True if flash is None else bool(flash.flush(timeout))


def record_checkpoint(path: str | Path, *, step: int | None = None) -> None:
    """Tell the platform a checkpoint saved by other means is complete (``checkpoint.json``).

    For scripts that save with their framework (Lightning, DeepSpeed) rather than
    `save_checkpoint`; the platform uses it to know how much work a preemption would lose.
    """
    current().record_checkpoint(Path(path), step=step)
