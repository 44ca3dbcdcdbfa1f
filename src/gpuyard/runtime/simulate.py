"""A laptop stand-in for the platform's suspend/resume loop: ``python -m gpuyard.runtime simulate``.

It runs a command with ``GPUYARD_SIMULATE_PREEMPTION_AFTER`` set, so the runtime in it acts as
if a notice arrived that many seconds after it first polled. When the command leaves suspended
it runs it again as the next attempt (``GPUYARD_ATTEMPT`` + 1, the same checkpoint dir, a fresh
control dir), as the platform would after requeueing it; the switch does nothing after attempt
0, so the second run goes to the end. It prints what happened at each step.

"Suspended" means what it means to the platform (docs/preemption.md): exit code 75, or any
failing exit code once a process of the attempt wrote ``suspended.json`` — torchrun turns a
rank's 75 into its own 1. Every rank of a ``torchrun`` command inherits the environment, so
the switch reaches them all and `gpuyard.runtime.torch.preemption_agreed` makes them agree.

What it writes goes to one run directory, a new temp dir unless ``out`` names one: the
``checkpoints/`` and the ``outputs/`` it gives the command (``GPUYARD_CHECKPOINT_DIR``,
``GPUYARD_OUTPUT_DIR``, unless the environment or ``checkpoint_dir`` sets them), never the
current directory.

What it does not do: enforce the notice's deadline (the platform's SIGTERM, then SIGKILL) or
send the notice signal; the switch is polled, exactly like the flag file.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from gpuyard.runtime.contract import DEFAULT_CHECKPOINT_DIRNAME, EXIT_SUSPENDED
from gpuyard.runtime.control import ACK, CHECKPOINT, PROGRESS, SUSPENDED, read_json

__all__ = ["AttemptResult", "run_attempt", "simulate"]

_PREFIX = "gpuyard simulate:"


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """How one run of the command ended, read from its exit code and its control dir."""

    attempt: int
    returncode: int
    seconds: float
    suspended: bool
    acknowledged_after: float | None
    """Seconds from the start of the attempt to ``ack.json``, if one was written."""
    checkpoint_step: int | None
    last_step: int | None
    """The last step in ``progress.json``, if the script reported progress."""


def run_dirs(environ: Mapping[str, str], run: Path) -> tuple[Path, Path]:
    """The checkpoint and output dirs of a simulated run: the environment's, else
    ``checkpoints/`` and ``outputs/`` in the run's directory (absolute)."""
    checkpoints = environ.get("GPUYARD_CHECKPOINT_DIR") or run / DEFAULT_CHECKPOINT_DIRNAME
    outputs = environ.get("GPUYARD_OUTPUT_DIR") or run / "outputs"
    return Path(checkpoints).absolute(), Path(outputs).absolute()


def simulate(
    command: Sequence[str],
    *,
    after: float,
    checkpoint_dir: Path | None = None,
    control_root: Path | None = None,
    run_dir: Path | None = None,
    max_attempts: int = 10,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Run `command` until it ends other than suspended; return its last exit status.

    A status from a signal is returned as 128 + the signal's number, as a shell does. After
    `max_attempts` suspensions it stops and returns `EXIT_SUSPENDED`. ``run_dir``: where
    its checkpoints and outputs go (default: the new temp dir that holds the control dirs).
    """
    stream = out or sys.stderr
    base = dict(os.environ if environ is None else environ)
    root = Path(tempfile.mkdtemp(prefix="gpuyard-simulate-", dir=control_root))
    checkpoints, outputs = run_dirs(base, run_dir or root)
    checkpoints = (checkpoint_dir or checkpoints).absolute()

    def say(line: str) -> None:
        print(f"{_PREFIX} {line}", file=stream, flush=True)

    say(f"checkpoints in {checkpoints}, outputs in {outputs}, control dirs under {root}")
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        say("note: the checkpoint dir is not empty; attempt 0 may resume from what is there")
    for attempt in range(max_attempts):
        control_dir = root / f"attempt-{attempt}"
        env = {
            **base,
            "GPUYARD_ATTEMPT": str(attempt),
            "GPUYARD_CHECKPOINT_DIR": str(checkpoints),
            "GPUYARD_OUTPUT_DIR": str(outputs),
            "GPUYARD_CONTROL_DIR": str(control_dir),
            "GPUYARD_SIMULATE_PREEMPTION_AFTER": f"{after:g}",
        }
        when = f", notice {after:g} s after its first poll" if attempt == 0 else ""
        say(f"attempt {attempt}: {shlex.join(command)}{when}")
        result = run_attempt(command, attempt=attempt, env=env, control_dir=control_dir)
        say(describe(result))
        if result.suspended:
            continue
        if result.returncode == 0 and attempt == 0:
            say(
                f"warning: attempt 0 ended without being suspended: it finished within {after:g} s "
                "of its first poll, or it never polled preemption_requested() / "
                "preemption_agreed(), or it ignored the notice"
            )
        return result.returncode
    say(f"gave up: still suspended after {max_attempts} attempts (--max-attempts)")
    return EXIT_SUSPENDED


def run_attempt(
    command: Sequence[str], *, attempt: int, env: Mapping[str, str], control_dir: Path
) -> AttemptResult:
    """Run the command once, passing SIGTERM on to it, and read its control dir."""
    control_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        process = subprocess.Popen(list(command), env=dict(env))
    except OSError as exc:
        print(f"{_PREFIX} cannot start {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        returncode = 127
    else:
        with _forwarding_signals(process):
            returncode = _status(process.wait())
    seconds = time.time() - started
    suspended_file = read_json(control_dir / SUSPENDED) is not None
    ack = read_json(control_dir / ACK)
    checkpoint = read_json(control_dir / CHECKPOINT)
    progress = read_json(control_dir / PROGRESS)
    ack_time = ack.get("time") if ack else None
    return AttemptResult(
        attempt=attempt,
        returncode=returncode,
        seconds=seconds,
        suspended=returncode == EXIT_SUSPENDED or (returncode != 0 and suspended_file),
        acknowledged_after=(ack_time - started if isinstance(ack_time, int | float) else None),
        checkpoint_step=_int(checkpoint.get("step")) if checkpoint else None,
        last_step=_int(progress.get("step")) if progress else None,
    )


def describe(result: AttemptResult) -> str:
    """One line saying how an attempt ended, for the person running the simulation."""
    facts = []
    if result.acknowledged_after is not None:
        facts.append(f"acknowledged at {result.acknowledged_after:.1f} s")
    if result.checkpoint_step is not None:
        facts.append(f"checkpoint at step {result.checkpoint_step}")
    if result.last_step is not None:
        facts.append(f"last reported step {result.last_step}")
    detail = f" ({', '.join(facts)})" if facts else ""
    took = f"after {result.seconds:.1f} s"
    if result.suspended:
        code = "" if result.returncode == EXIT_SUSPENDED else f", exit {result.returncode}"
        return (
            f"attempt {result.attempt}: suspended {took}{code}{detail}; "
            f"resuming as attempt {result.attempt + 1}"
        )
    if result.returncode == 0:
        return f"attempt {result.attempt}: succeeded {took}{detail}"
    return f"attempt {result.attempt}: failed with exit {result.returncode} {took}{detail}"


@contextlib.contextmanager
def _forwarding_signals(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the command runs: pass SIGTERM on to it, and outlive a Ctrl-C.

    Ctrl-C reaches the command from the terminal (same process group); this process waits for
    it to end rather than leave it behind. Handlers can be set from the main thread only;
    elsewhere the defaults stay.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    def outlive(signum: int, frame: FrameType | None) -> None:
        pass

    previous = [
        (signal.SIGTERM, signal.signal(signal.SIGTERM, forward)),
        (signal.SIGINT, signal.signal(signal.SIGINT, outlive)),
    ]
    try:
        yield
    finally:
        for sig, handler in previous:
            signal.signal(sig, handler)


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
