"""``salloc [options] command [args]``: an allocation that lives as long as its command.

Slurm's salloc grants the allocation and runs the command on the submit host, where ``srun``
reaches the nodes through slurmctld and slurmd. gpuyard's ``srun`` reaches the other nodes
through the job's own workers: it needs the job's secret token and the workers' addresses,
which only the job's own processes have (``slurm/step/main.py``); a process outside the
pool has neither, and handing the token out would let anyone who can read it run commands as
the job. So gpuyard's salloc runs the command *inside* the allocation, as its batch step (as
``sbatch --wrap`` would), where ``srun``, ``scontrol show hostnames`` and every ``SLURM_*``
variable are the allocation's, and relays its output here:

- stderr gets Slurm's own lines (``Pending job allocation N``, ``job N queued and waiting for
  resources``, ``job N has been allocated resources``, ``Granted job allocation N``, ``Nodes X
  are ready for job``, ``Relinquishing job allocation N``);
- the command's stdout and stderr arrive on stdout, merged (there is no terminal: no stdin,
  no job control, so no interactive shell; a command is required);
- salloc exits with the command's exit status; Ctrl-C, SIGTERM or SIGHUP release the
  allocation (the job is stopped) and salloc exits 128 + the signal; an allocation cancelled
  while it waits is ``revoked`` (exit 1).
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from gpuyard.models import JobStatus
from gpuyard.slurm.options import OptionError
from gpuyard.slurm.render import nodelist

if TYPE_CHECKING:
    from gpuyard.client import Client

__all__ = ["granted_lines", "pending_lines", "relinquish_line", "revoked_line", "salloc"]

PENDING_AFTER = 1.0
"""Seconds to wait for the allocation before saying it is pending, as Slurm does at once."""


# The batch step's task variables, which Slurm's salloc command does not have (it is no task of
# any step; recorded in tests/data/slurm/cases/salloc_env.json): srun sets them for each task.
# The batch step's node variables (SLURMD_NODENAME, SLURM_CPUS_ON_NODE, ...) stay: srun hands
# them to the tasks it starts on this node.
_BATCH_STEP_ONLY = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS")


class _Released(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _say(text: str) -> None:
    print(f"salloc: {text}", file=sys.stderr, flush=True)


def _options(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """sbatch's options and ``--wrap`` of the command, from salloc's command line."""
    from gpuyard.slurm.options import parse_sbatch

    parsed = parse_sbatch(args, None)
    command = [parsed.script_path, *parsed.script_args] if parsed.script_path else []
    if not command:
        raise OptionError(
            "salloc needs a command: gpuyard runs it inside the allocation without a "
            "terminal, so it cannot start your shell (give e.g. `salloc -N2 bash -c '...'`)"
        )
    options = list(args[: len(args) - len(command)])
    for refused in ("--output", "-o", "--error", "-e", "--wrap", "--array", "-a"):
        if any(a == refused or a.startswith(refused + "=") for a in options):
            raise OptionError(f"{refused} is not an salloc option")
    if not any(a.startswith(("-J", "--job-name")) for a in options):
        options.append("--job-name=interactive")  # what Slurm names an allocation
    return options, command


def salloc(args: Sequence[str], out: TextIO) -> int:
    """Grant, run the command inside, relinquish; the command's exit status."""
    from gpuyard.slurm import sbatch as build
    from gpuyard.slurm.commands.base import open_client

    options, command = _options(args)
    sbatch_args = [
        *options,
        "--output=/dev/stdout",
        "--open-mode=append",
        f"--wrap=unset {' '.join(_BATCH_STEP_ONLY)}\nexec {shlex.join(command)}",
    ]
    parsed, script, name = build.parse(sbatch_args, lambda: None)
    released: list[int] = []
    submitting = [True]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if released:
            return
        released.append(signum)
        # Not in the middle of the submission: its answer says which job to release.
        if not submitting[0]:
            raise _Released(signum)

    previous = {
        s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    job_id: int | None = None
    with open_client() as client:
        try:
            pools = [p.name for p in client.pools()]
            spec = build.specs_from_here(parsed, script, script_name=name, pools=pools)[0]
            job_id = client.submit(spec).id
            submitting[0] = False
            if released:
                raise _Released(released[0])
            _wait_granted(client, job_id)
            code = _relay(client, job_id, out)
        except _Released as exc:
            code = 128 + exc.signum
        except _Revoked as exc:
            _say(revoked_line(exc.job_id))
            job_id, code = None, 1  # nothing to relinquish
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if job_id is not None:
                _say(relinquish_line(job_id))
                if not client.job(job_id).status.is_terminal():
                    client.stop(job_id)
    return code


def granted_lines(job_id: int, nodes: Sequence[str], *, pending: bool) -> list[str]:
    """What Slurm's salloc says on stderr from submission until the command starts."""
    lines = []
    if pending:
        lines.append(f"job {job_id} has been allocated resources")
    lines.append(f"Granted job allocation {job_id}")
    if nodes:
        lines.append("Waiting for resource configuration")
        lines.append(f"Nodes {nodelist(nodes)} are ready for job")
    return lines


def pending_lines(job_id: int) -> list[str]:
    return [f"Pending job allocation {job_id}", f"job {job_id} queued and waiting for resources"]


def relinquish_line(job_id: int) -> str:
    return f"Relinquishing job allocation {job_id}"


def revoked_line(job_id: int) -> str:
    """An allocation cancelled (``scancel``) before it was granted: salloc exits 1."""
    return f"Job allocation {job_id} has been revoked."


class _Revoked(Exception):
    """The allocation ended before it was granted (``scancel`` of the pending job)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(job_id)
        self.job_id = job_id


def _wait_granted(client: Client, job_id: int) -> None:
    started = time.monotonic()
    pending = False
    while True:
        job = client.job(job_id)
        if job.started_at is not None:
            break
        if job.status.is_terminal():
            raise _Revoked(job_id)
        if not pending and time.monotonic() - started >= PENDING_AFTER:
            pending = True
            for line in pending_lines(job_id):
                _say(line)
        time.sleep(0.1)
    nodes = list(dict.fromkeys(slot.node for slot in job.placement))
    for line in granted_lines(job_id, nodes, pending=pending):
        _say(line)


def _relay(client: Client, job_id: int, out: TextIO) -> int:
    """Copy the batch step's output here until it ends; its exit status."""
    done = threading.Event()

    def pump() -> None:
        try:
            for chunk in client.follow_logs(job_id, worker=0):
                out.write(chunk.decode(errors="replace"))
                out.flush()
        finally:
            done.set()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    job = client.job(job_id)
    while not job.status.is_terminal():
        time.sleep(0.2)
        job = client.job(job_id)
    done.wait(timeout=10)
    if job.exit_code is not None:
        return job.exit_code
    return 0 if job.status is JobStatus.SUCCEEDED else 1
