"""What a worker's runtime wrote to its control directory, read as untrusted input.

The job writes ``control/`` (docs/runtime.md, "The worker directory"); each file is parsed
with its schema from :mod:`gpuyard.models.workerdir`, at most ``FILE_CAP`` bytes, without
following links or blocking on a FIFO. A file that is not what it should be is ignored and
named in :attr:`ControlState.invalid` ("progress.json: larger than 64 KiB"); nothing a job
writes there makes the executor raise or hang.
"""

from __future__ import annotations

import contextlib
import os

from pydantic import ValidationError

from gpuyard.executors.local import untrusted
from gpuyard.models.worker import ControlState, SlurmStep
from gpuyard.models.workerdir import (
    CONTROL_FILES,
    FILE_CAP,
    HARDWARE_RATIO,
    MAX_LISTENERS,
    MAX_SLURM_STEPS,
    SLURM_STEPS,
    STEP_FILE_CAP,
    AckFile,
    CheckpointFile,
    ControlFile,
    ProgressFile,
    SavingFile,
    SlurmStepFile,
    SuspendedFile,
)

__all__ = ["LISTENERS", "listener_pids", "read_control", "read_slurm_steps"]

LISTENERS = "listeners"
_PID_MAX = 1 << 22


def read_control(home: str, control_dir: str) -> ControlState:
    """The control state of the worker whose control directory is ``control_dir`` (below
    ``home``); empty when the directory is absent."""
    try:
        fd = untrusted.open_dir(home, control_dir)
    except FileNotFoundError:
        return ControlState()
    except (untrusted.Unreadable, OSError) as exc:
        return ControlState(invalid=(f"control: {exc}",))
    try:
        invalid: list[str] = []
        files = {name: _parse(fd, name, schema, invalid) for name, schema in CONTROL_FILES.items()}
        pids = listener_pids(fd, invalid)
    finally:
        os.close(fd)
    ack, checkpoint = files["ack.json"], files["checkpoint.json"]
    progress, suspended = files["progress.json"], files["suspended.json"]
    saving = files["saving.json"]
    return ControlState(
        acknowledged_at=ack.time if isinstance(ack, AckFile) else None,
        checkpoint_at=checkpoint.time if isinstance(checkpoint, CheckpointFile) else None,
        checkpoint_step=checkpoint.step if isinstance(checkpoint, CheckpointFile) else None,
        progress_at=progress.time if isinstance(progress, ProgressFile) else None,
        step=progress.step if isinstance(progress, ProgressFile) else None,
        hardware_ratio=(
            hardware_ratio(progress.metrics) if isinstance(progress, ProgressFile) else None
        ),
        suspended_at=suspended.time if isinstance(suspended, SuspendedFile) else None,
        saving_at=saving.time if isinstance(saving, SavingFile) else None,
        requeue_at=(
            suspended.time if isinstance(suspended, SuspendedFile) and suspended.requeue else None
        ),
        listening=bool(pids),
        invalid=tuple(invalid),
    )


def read_slurm_steps(home: str, control_dir: str) -> list[SlurmStep]:
    """The steps a Slurm batch job's ``srun`` recorded in ``control/slurm-steps``, by id.
    Reserved (still empty) and unreadable files are skipped: sacct shows what it can."""
    try:
        control = untrusted.open_dir(home, control_dir)
    except (FileNotFoundError, untrusted.Unreadable, OSError):
        return []
    try:
        fd = os.open(SLURM_STEPS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=control)
    except OSError:
        return []
    finally:
        os.close(control)
    ids: list[int] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.name.isascii() and entry.name.isdigit() and len(entry.name) < 7:
                    ids.append(int(entry.name))
        steps: list[SlurmStep] = []
        for step_id in sorted(ids)[:MAX_SLURM_STEPS]:
            try:
                raw = untrusted.read_file(fd, str(step_id), STEP_FILE_CAP)
            except untrusted.Unreadable:
                continue
            if not raw:
                continue
            try:
                found = SlurmStepFile.model_validate_json(raw)
            except ValidationError:
                continue
            steps.append(
                SlurmStep(
                    id=step_id,
                    name=found.name,
                    nodes=tuple(found.nodes),
                    tasks=found.tasks,
                    start=found.start,
                    end=found.end,
                    exit_code=found.exit_code,
                )
            )
        return steps
    except OSError:
        return []
    finally:
        os.close(fd)


def hardware_ratio(metrics: dict[str, float | int | str | None]) -> float | None:
    """The ``hardware_ratio`` metric of progress.json (time in kernels or collectives over the
    step's wall time) when it is a number in [0, 1]; anything else is ignored."""
    value = metrics.get(HARDWARE_RATIO)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return None


def _parse(
    dir_fd: int, name: str, schema: type[ControlFile], invalid: list[str]
) -> ControlFile | None:
    try:
        raw = untrusted.read_file(dir_fd, name, FILE_CAP)
    except untrusted.Unreadable as exc:
        invalid.append(f"{name}: {exc}")
        return None
    if raw is None:
        return None
    try:
        return schema.model_validate_json(raw)
    except ValidationError as exc:
        invalid.append(f"{name}: {_why(exc)}")
        return None


def _why(exc: ValidationError) -> str:
    """The first problem, in a form that stays the same from one read to the next."""
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def listener_pids(control_fd: int, invalid: list[str], directory: str = LISTENERS) -> list[int]:
    """The pids named in ``listeners/`` (or ``directory``; at most ``MAX_LISTENERS`` entries
    are looked at)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=control_fd)
    except FileNotFoundError:
        return []
    except OSError:
        invalid.append(f"{directory}: not a directory")
        return []
    pids: list[int] = []
    try:
        with os.scandir(fd) as entries:
            for count, entry in enumerate(entries):
                if count == MAX_LISTENERS:
                    invalid.append(f"{directory}: more than {MAX_LISTENERS} entries")
                    break
                name = entry.name
                if name.startswith("."):
                    continue  # a temporary name
                if not (name.isascii() and name.isdigit()) or not 0 < int(name) <= _PID_MAX:
                    invalid.append(f"{directory}/{name[:40]!r}: not a pid")
                    continue
                pids.append(int(name))
    except OSError:
        invalid.append(f"{directory}: cannot be listed")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return pids
