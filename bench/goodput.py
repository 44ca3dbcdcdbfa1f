"""Benchmark: goodput under faults. A real DDP job (gloo) is hit by faults at a set rate; the
script prints its effective training time ratio (ETTR) and how soon each fault had it running
again, beside the same job without faults, measured in the same run.

What is measured, and how
-------------------------
A real pool (``python -m gpuyard up``) of three virtual nodes, one CPU and one (virtual) GPU
each, in a fresh temporary home. The job is ``examples/preemptible_train.py`` in ``pytorch``
mode on two of the nodes (torchrun, gloo), ``--steps`` steps of ``--step-time`` seconds, a
checkpoint every ``--checkpoint-every`` steps, with fault tolerance on (resume from the latest
checkpoint, ``retry_job_errors``, ``hang_timeout``); the third node is the spare.

1. **Baseline**: the job once without faults. Its step time ``dt`` comes from its progress
   reports (``progress.json``: step and time); its *useful training time* is ``steps x dt``;
   its wall time is the server's ``finished_at - created_at``.
2. **Faults**: the same job again. Each time it has trained ``--fault-every`` seconds since it
   last (re)started, the next fault of the plan hits it:

   - ``nan``: the job's own error. Passed as ``--nan-at STEP`` (the step ``--fault-every``
     seconds in), the first attempt's loss is NaN there; the job prints ``loss is nan`` and
     exits 1; it is restarted without a node check (``retry_job_errors``). First in the plan,
     as the example makes it happen on attempt 0 only.
   - ``check``: a node that fails its re-check. The pool runs with
     ``GPUYARD_INJECT_FAULTS={"node1": "burn"}`` and the job starts on node0 and node1 (the
     spare is cordoned until it runs), without a pre-flight check; this fault SIGKILLs the
     rank on node1, the re-check of the job's nodes finds the burn fault, node1 is cordoned
     and the job is placed again on node0 and the spare. Once per run (there is one spare),
     and before any other fault that re-checks the nodes (``nan`` does not).
   - ``kill``: SIGKILL of one rank's training process (ranks 1, 0, 1, ... in turn); the nodes
     are re-checked and pass, the job restarts on them.
   - ``hang``: SIGSTOP of rank 1's training process; the controller finds the job silent for
     its ``hang_timeout`` and restarts it.

   ``nan`` and ``check`` happen once each, first; ``kill`` and ``hang`` then take turns. A
   fault is injected only while a whole period of training is left. A restart the bench did
   not cause (a false hang, say) is listed as ``unplanned``.

Per fault, from the injection time (the bench's clock; for ``nan`` the time the job reached
the step, from its progress reports), the ft-log's ``time`` and ``outcome_time`` (the job's
workers launched again) and the job's events (same clock, same machine):

- *detect*: injection -> the fault in the ft-log (for ``hang``, its ``hang_timeout``);
- *drain*: -> every worker of the attempt has exited (the job leaves ``recovering``);
- *check*: the node check (torch import, burn, gloo collective) where one ran, including a
  cordon and the placement on the spare;
- *launch*: -> the workers are launched again (the ft-log's ``outcome_time``);
- *load*: -> the first step of the new attempt (torchrun, torch import, rendezvous, loading the
  checkpoint: the model's own start, from the first progress report and its step);
- *replay*: the steps run again since the last checkpoint, ``x dt``;
- *lost*: the sum: the wall time the fault cost. The sum over all faults is printed beside
  the fault run's wall time minus the baseline's, which says the same with the noise of the
  machine in it.

*fault -> running again* is detect + drain + check + launch (goal: at most 60 s; the job's own
load time is not counted); drain + check + launch is the ft-log's ``outcome_time - time``.
**ETTR** = useful training time / wall time, measured for both runs; the fault run's is at the
compressed fault rate of this run. The ETTR at one fault per 10 minutes of training is a
**projection** from the measured mean loss per fault over this run's mix of faults:
``1 - lost / 600 s`` (goal: at least 97 %), also from the wall-time difference; the goal is
judged on the lower. The final weights of both runs are compared: they must be identical.

No figure is asserted. Every process started is ended on the way out, Ctrl-C included. Run it
as ``.venv/bin/python bench/goodput.py`` (about 4-5 minutes on 2 cores; ``--quick``, about
a minute: a shorter job, a NaN and a failed re-check).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import re
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from gpuyard.client import Client
from gpuyard.launch.check import CHECK_RANK_BASE
from gpuyard.models import FaultEntry, JobState, JobView
from gpuyard.testing.process import training_process
from launch import Pool, machine_info, running_pool

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "preemptible_train.py"
NODES = 3
BAD_NODE = "node1"
"""The node whose node check finds an injected burn fault (``check`` faults)."""
SPARE = "node2"
KINDS = ("nan", "check", "kill", "hang")
ONCE = ("nan", "check")
"""Kinds that happen once per run, first, in this order."""
MTBF_GOAL = 600.0
"""Seconds of training per fault the ETTR goal is stated for."""
ETTR_GOAL = 0.97
RUNNING_AGAIN_GOAL = 60.0
POLL = 0.2
"""Seconds between two looks at the job's progress."""
ENDED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.EXPIRED})
RESUMED = re.compile(r"attempt (\d+): resuming at step (\d+)")


# -- the job ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """One progress report of rank 0: after ``step``, at ``time``."""

    attempt: int
    step: int
    time: float


def job_spec(
    args: argparse.Namespace, name: str, *, faults: int, nan_at: int | None
) -> dict[str, Any]:
    command = [sys.executable, str(TRAIN), "--steps", str(args.steps)]
    command += [
        "--step-time",
        f"{args.step_time:g}",
        "--checkpoint-every",
        str(args.checkpoint_every),
    ]
    if nan_at is not None:
        command += ["--nan-at", str(nan_at)]
    if args.service:
        command += ["--service"]
    spec = {
        "name": name,
        "command": shlex.join(command),
        "mode": "pytorch",
        "nodes": 2,
        "resources": {"gpus": 1, "cpus": 1},
        "workdir": str(ROOT),
        "fault_tolerance": {
            "max_restarts": faults + 2,
            "recovery": "resume",
            "retry_job_errors": True,
            "hang_timeout": args.hang_timeout,
        },
    }
    if args.graceful_shutdown is not None:
        spec["graceful_shutdown"] = args.graceful_shutdown
    return spec


class Watched:
    """A running job seen from the bench: its view, its progress reports, its processes."""

    def __init__(self, pool: Pool, client: Client, job_id: int) -> None:
        self.pool, self.client, self.id = pool, client, job_id
        self.view = client.job(job_id)
        self.reports: list[Progress] = []

    @property
    def dir(self) -> Path:
        return self.pool.home / "jobs" / str(self.id)

    def refresh(self) -> JobView:
        self.view = self.client.job(self.id)
        return self.view

    def look(self) -> Progress | None:
        """Rank 0's latest report of the current attempt, recorded when new."""
        attempt = self.view.attempt
        path = self.dir / "attempts" / str(attempt) / "worker-0" / "control" / "progress.json"
        try:
            data = json.loads(path.read_text())
            report = Progress(attempt, int(data["step"]), float(data["time"]))
        except (OSError, ValueError, KeyError, TypeError):
            return self.reports[-1] if self.reports else None
        if not self.reports or self.reports[-1] != report:
            self.reports.append(report)
        return report

    def resumed_at(self, attempt: int) -> int | None:
        """The step an attempt resumed at (0: from scratch), from rank 0's log."""
        log = self.dir / "attempts" / str(attempt) / "worker-0" / "log"
        with contextlib.suppress(OSError):
            found = RESUMED.search(log.read_text(errors="replace"))
            return int(found.group(2)) if found else 0
        return None

    def wait(self, states: frozenset[JobState], timeout: float) -> JobView:
        deadline = time.monotonic() + timeout
        while self.refresh().state not in states:
            if self.view.state in ENDED or time.monotonic() > deadline:
                raise SystemExit(
                    f"job {self.id} is {self.view.state.value}, waited for "
                    f"{', '.join(sorted(s.value for s in states))}: {self.view.reason}"
                )
            self.look()
            time.sleep(POLL)
        return self.view

    def digest(self) -> str:
        out = self.dir / "outputs"
        found = {json.loads((out / f"rank-{r}.json").read_text())["digest"] for r in (0, 1)}
        return found.pop() if len(found) == 1 else "ranks differ"

    def wall(self) -> float:
        assert self.view.finished_at is not None
        return (self.view.finished_at - self.view.created_at).total_seconds()

    def training_process(self, rank: int) -> psutil.Process:
        """The training script's process of one rank (under its worker's torchrun)."""
        try:
            return training_process(self.dir, rank, TRAIN.name, attempt=self.view.attempt)
        except LookupError:
            raise SystemExit(f"no training process of job {self.id} rank {rank}") from None

    def rank_on(self, node: str) -> int:
        for w in self.view.workers:
            if w.node == node and w.rank < CHECK_RANK_BASE:
                return w.rank
        raise SystemExit(f"job {self.id} has no rank on {node}: {self.view.placement}")


def step_time(reports: Sequence[Progress]) -> float:
    """Seconds per step from the first to the last report of one uninterrupted attempt."""
    first, last = reports[0], reports[-1]
    if last.step <= first.step:
        raise SystemExit("the baseline reported too few steps to time them; raise --steps")
    return (last.time - first.time) / (last.step - first.step)


# -- faults -----------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    attempt: int
    """The attempt it hit."""
    before: Progress
    """The last report before it."""
    at_step: int | None = None
    """Where the job hits itself (``nan``); None: the bench hits it."""
    injected: float = math.nan
    what: str = ""
    stopped: psutil.Process | None = None
    """A rank the bench stopped (``hang``): killed once the job runs again, at the latest."""
    resumed_step: int = 0
    replayed_steps: float = 0.0
    entries: list[FaultEntry] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def lost(self) -> float:
        return sum(self.phases.values())

    @property
    def running_again(self) -> float:
        return sum(self.phases[p] for p in ("detect", "drain", "check", "launch"))


def plan(kinds: Sequence[str]) -> Iterator[str]:
    """The order of the faults: the once-only kinds first, then the others in turn."""
    yield from (k for k in ONCE if k in kinds)
    again = [k for k in kinds if k not in ONCE]
    if again:
        yield from itertools.cycle(again)


class Injector:
    """Hits the watched job with the planned faults, one at a time, each ``every`` seconds of
    training after it last (re)started, and works out what each one cost."""

    def __init__(
        self, job: Watched, kinds: Sequence[str], every: float, dt: float, nan_at: int | None
    ) -> None:
        self.job, self.every, self.dt, self.nan_at = job, every, dt, nan_at
        self.kinds = plan(kinds)
        self.next: str | None = next(self.kinds, None)
        self.faults: list[Fault] = []
        self.pending: Fault | None = None
        self.training_since: float | None = None
        self.placements: list[str] = []
        self._seen: set[int] = set()
        self._kills = 0
        self._last: Progress | None = None

    def step(self, report: Progress | None, steps: int) -> None:
        """One look at the job: inject the next fault when it is due, settle the pending one
        when the job trains again."""
        if report is None:
            return
        last, self._last = self._last, report
        if self.training_since is None:
            self.training_since = report.time - (report.step + 1) * self.dt
            self.placements.append(self._placement())
        fault = self.pending
        if fault is not None and report.attempt == fault.attempt and fault.at_step is not None:
            fault.before = report  # the job hits itself later: the last report before it
        elif fault is not None and report.attempt > fault.attempt:
            self._settle(fault, report)
        elif fault is None and last is not None and report.attempt > last.attempt:
            # Not injected by us: a fault of the platform's own seeing (say a false hang).
            self._settle(Fault("unplanned", last.attempt, last), report)
        elif fault is None and self.next is not None:
            due = self.next == "nan" or report.time >= self.training_since + self.every
            if due and report.step + self.every / self.dt < steps:  # a whole period left
                self.pending = Fault(self.next, self.job.view.attempt, report)
                self.pending.at_step = self.nan_at if self.next == "nan" else None
                self._inject(self.pending)
                self.next = next(self.kinds, None)

    def _inject(self, fault: Fault) -> None:
        """Hit the job now (``nan`` needs nothing: the job hits itself at its step)."""
        if fault.kind == "nan":
            return
        if fault.kind == "hang":
            rank, sig = 1, signal.SIGSTOP
        elif fault.kind == "check":
            rank, sig = self.job.rank_on(BAD_NODE), signal.SIGKILL
        else:
            rank, sig = (1, 0)[self._kills % 2], signal.SIGKILL
            self._kills += 1
        proc = self.job.training_process(rank)
        node = next(w.node for w in self.job.view.workers if w.rank == rank)
        fault.injected = time.time()
        proc.send_signal(sig)
        fault.stopped = proc if sig is signal.SIGSTOP else None
        fault.what = f"{sig.name} rank {rank} on {node}"

    def _settle(self, fault: Fault, after: Progress) -> None:
        """The job trains again after ``fault``: its ft-log entries, phases and loss."""
        self.pending = None
        self.release(fault)
        job, dt = self.job, self.dt
        fault.entries = [e for e in job.client.faults(job.id) if e.id not in self._seen]
        self._seen.update(e.id for e in fault.entries)
        detected = min((ts(e.time) for e in fault.entries), default=after.time)
        again = max((ts(e.outcome_time) for e in fault.entries), default=detected)
        if fault.at_step is not None:  # when the job reached the step, from its reports' pace
            reached = fault.before.time + (fault.at_step - fault.before.step) * dt
            fault.injected = min(detected, reached)
            fault.what = f"NaN loss at step {fault.at_step} (every rank)"
        elif math.isnan(fault.injected):
            fault.injected = detected
            fault.what = "; ".join(f"{e.kind}: {e.cause}" for e in fault.entries)
        drained, check = self._drain_and_check(detected, again)
        fault.resumed_step = job.resumed_at(after.attempt) or 0
        training = after.time - (after.step - fault.resumed_step + 1) * dt
        at_fault = fault.before.step + (fault.injected - fault.before.time) / dt
        fault.replayed_steps = max(0.0, at_fault - fault.resumed_step)
        fault.phases = {
            "detect": detected - fault.injected,
            "drain": drained - detected,
            "check": check,
            "launch": again - drained - check,
            "load": training - again,
            "replay": fault.replayed_steps * dt,
        }
        self.faults.append(fault)
        self.training_since = training
        if (placement := self._placement()) != self.placements[-1]:
            self.placements.append(placement)

    def _drain_and_check(self, detected: float, again: float) -> tuple[float, float]:
        """When the fault's attempt had drained, and the seconds its node checks took: from
        the check's start to its end (the last check worker's exit), or, for a check that
        failed, to the job's move back to the queue."""
        events = [e for e in self.job.client.events(self.job.id) if ts(e.time) >= detected - 0.01]
        events = [e for e in events if ts(e.time) <= again + 0.01]
        drained = next((ts(e.time) for e in events if e.from_state is JobState.RECOVERING), again)
        check, started = 0.0, None
        for e in events:
            if e.kind == "check":
                started = ts(e.time)
            elif started is not None and e.to_state is JobState.SUSPENDED:
                check += ts(e.time) - started
                started = None
        if started is not None:  # the check that passed: its workers are in the job's view
            ended = [
                ts(w.finished_at)
                for w in self.job.view.workers
                if w.rank >= CHECK_RANK_BASE and w.finished_at is not None
            ]
            check += max(ended, default=started) - started
        return drained, check

    def release(self, fault: Fault | None) -> None:
        """A rank stopped by the bench must not outlive it (the platform kills it too)."""
        if fault is not None and fault.stopped is not None:
            with contextlib.suppress(psutil.Error):
                fault.stopped.kill()
            fault.stopped = None

    def _placement(self) -> str:
        return ", ".join(sorted({s.node for s in self.job.view.placement}))


def ts(when: datetime | None) -> float:
    return when.timestamp() if when is not None else math.nan


# -- the two runs -----------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    job_id: int
    wall: float
    digest: str
    reports: list[Progress]
    faults: list[Fault] = field(default_factory=list)
    placements: list[str] = field(default_factory=list)


def run_baseline(pool: Pool, client: Client, args: argparse.Namespace, timeout: float) -> Run:
    spec = job_spec(args, "baseline", faults=0, nan_at=None)
    job = Watched(pool, client, client.submit(spec).id)
    job.wait(ENDED, timeout)
    if job.view.state is not JobState.SUCCEEDED:
        raise SystemExit(f"the baseline job {job.id} {job.view.state.value}: {job.view.reason}")
    return Run("baseline", job.id, job.wall(), job.digest(), job.reports)


def run_faults(
    pool: Pool, client: Client, args: argparse.Namespace, dt: float, timeout: float
) -> Run:
    budget = math.ceil(args.steps * dt / args.fault_every) + 2
    nan_at = round(args.fault_every / dt) if "nan" in args.kinds else None
    if "check" in args.kinds:  # the job must start on the node that fails its check
        client.cordon(SPARE, "goodput bench: kept free as the spare until the job runs")
    spec = job_spec(args, "faults", faults=budget, nan_at=nan_at)
    job = Watched(pool, client, client.submit(spec).id)
    try:
        job.wait(frozenset({JobState.RUNNING}), timeout)
    finally:
        if "check" in args.kinds:
            client.uncordon(SPARE)
    injector = Injector(job, args.kinds, args.fault_every, dt, nan_at)
    deadline = time.monotonic() + timeout
    try:
        while job.refresh().state not in ENDED:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job.id} did not end within {timeout:.0f} s")
            injector.step(job.look(), args.steps)
            time.sleep(POLL)
    finally:
        injector.release(injector.pending)
    if job.view.state is not JobState.SUCCEEDED:
        raise SystemExit(
            f"the job with faults ({job.id}) {job.view.state.value}: {job.view.reason}; "
            f"ft-log: {[e.model_dump(mode='json') for e in client.faults(job.id)]}"
        )
    digest = job.digest()
    return Run(
        "faults", job.id, job.wall(), digest, job.reports, injector.faults, injector.placements
    )


# -- report -----------------------------------------------------------------------------------


PHASES = ("detect", "drain", "check", "launch", "load", "replay")


def fault_table(faults: Sequence[Fault]) -> Table:
    table = Table(title="Each fault: where the seconds went (s)")
    for column in ("#", "kind", "injected", *PHASES, "running again", "lost", "ft-log"):
        table.add_column(
            column, justify="left" if column in {"kind", "injected", "ft-log"} else "right"
        )
    for i, f in enumerate(faults, 1):
        note = "; ".join(
            f"{e.kind}: {e.cause}" + (f" ({e.node})" if e.node else "") for e in f.entries
        )
        table.add_row(
            str(i),
            f.kind,
            f.what,
            *(f"{f.phases[p]:.1f}" for p in PHASES[:-1]),
            f"{f.phases['replay']:.1f} ({f.replayed_steps:.0f} st)",
            f"{f.running_again:.1f}",
            f"{f.lost:.1f}",
            note,
        )
    return table


def kind_table(faults: Sequence[Fault]) -> Table:
    table = Table(title="By kind (s): mean, and the ETTR at one such fault per 10 min (projection)")
    for column in ("kind", "n", "running again", "max", "load", "replay", "lost", "ETTR @ 10 min"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for kind in (*KINDS, "unplanned"):
        mine = [f for f in faults if f.kind == kind]
        if not mine:
            continue
        lost = statistics.fmean(f.lost for f in mine)
        table.add_row(
            kind,
            str(len(mine)),
            f"{statistics.fmean(f.running_again for f in mine):.1f}",
            f"{max(f.running_again for f in mine):.1f}",
            f"{statistics.fmean(f.phases['load'] for f in mine):.1f}",
            f"{statistics.fmean(f.phases['replay'] for f in mine):.1f}",
            f"{lost:.1f}",
            f"{100 * projected(lost):.2f} %",
        )
    return table


def projected(lost_per_fault: float) -> float:
    return 1 - lost_per_fault / MTBF_GOAL


def pace(reports: Sequence[Progress]) -> float:
    """Seconds per step over every attempt's reports (between faults)."""
    seconds = steps = 0.0
    for _, group in itertools.groupby(reports, key=lambda r: r.attempt):
        mine = list(group)
        seconds += mine[-1].time - mine[0].time
        steps += mine[-1].step - mine[0].step
    return seconds / steps if steps else math.nan


def summary(args: argparse.Namespace, base: Run, hit: Run, dt: float) -> dict[str, Any]:
    useful = args.steps * dt
    n = len(hit.faults)
    lost = [f.lost for f in hit.faults]
    mean_lost = statistics.fmean(lost) if lost else 0.0
    worst = max((f.running_again for f in hit.faults), default=0.0)
    return {
        "step_time_s": dt,
        "step_time_faults_run_s": pace(hit.reports),
        "useful_s": useful,
        "baseline_wall_s": base.wall,
        "baseline_ettr": useful / base.wall,
        "faults": n,
        "fault_every_s": args.fault_every,
        "faults_wall_s": hit.wall,
        "faults_ettr_measured": useful / hit.wall,
        "lost_wall_s": hit.wall - base.wall,
        "lost_per_fault_wall_s": (hit.wall - base.wall) / n if n else 0.0,
        "lost_per_fault_s": mean_lost,
        "ettr_projected_10min": projected(mean_lost),
        "ettr_projected_10min_from_wall": projected((hit.wall - base.wall) / n) if n else 1.0,
        "running_again_max_s": worst,
        "running_again_mean_s": statistics.fmean(f.running_again for f in hit.faults) if n else 0.0,
        "same_weights": base.digest == hit.digest,
        "placements": hit.placements,
    }


def print_summary(console: Console, s: dict[str, Any]) -> None:
    ok = {True: "met", False: "NOT met"}
    lines = [
        f"step time dt = {s['step_time_s'] * 1000:.1f} ms (baseline's progress reports; "
        f"{s['step_time_faults_run_s'] * 1000:.1f} ms between the faults of the other run); "
        f"useful training time = steps x dt = {s['useful_s']:.1f} s",
        f"baseline, no faults:   wall {s['baseline_wall_s']:.1f} s, "
        f"ETTR {100 * s['baseline_ettr']:.1f} % (measured; the rest is the job's start and end)",
        f"with {s['faults']} faults, one per {s['fault_every_s']:g} s of training: wall "
        f"{s['faults_wall_s']:.1f} s, ETTR {100 * s['faults_ettr_measured']:.1f} % (measured, "
        f"at this compressed rate)",
        f"lost to faults: {s['lost_wall_s']:.1f} s of wall time beside the baseline = "
        f"{s['lost_per_fault_wall_s']:.1f} s per fault (measured); sum of the per-fault "
        f"losses: {s['lost_per_fault_s']:.1f} s per fault",
        f"PROJECTION, one fault per 10 min of training (this run's mix of faults): ETTR ~ "
        f"1 - lost per fault / 600 s = 1 - {s['lost_per_fault_s']:.1f} / 600 = "
        f"{100 * s['ettr_projected_10min']:.2f} % (from the wall-time difference: "
        f"{100 * s['ettr_projected_10min_from_wall']:.2f} %); goal >= {100 * ETTR_GOAL:.0f} %: "
        f"{ok[min(s['ettr_projected_10min'], s['ettr_projected_10min_from_wall']) >= ETTR_GOAL]}"
        " (on the lower of the two)",
        f"fault -> running again (excluding the job's own load): mean "
        f"{s['running_again_mean_s']:.1f} s, max {s['running_again_max_s']:.1f} s (measured; "
        f"goal <= {RUNNING_AGAIN_GOAL:.0f} s each: "
        f"{ok[s['running_again_max_s'] <= RUNNING_AGAIN_GOAL]})",
        f"placements: {' -> '.join(s['placements'])}; final weights identical to the "
        f"baseline's: {'yes' if s['same_weights'] else 'NO'}",
    ]
    for line in lines:
        console.print(line, markup=False, highlight=False)


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, help="training steps (default 750; quick 200)")
    parser.add_argument("--step-time", type=float, help="s slept per step (0.1; quick 0.05)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps (default 10)")
    parser.add_argument(
        "--fault-every", type=float, help="s of training between faults (default 15; quick 3)"
    )
    parser.add_argument(
        "--kinds",
        default=None,
        help=f"faults, comma-separated, of {','.join(KINDS)} (default all; quick: nan,check)",
    )
    parser.add_argument(
        "--hang-timeout", type=float, default=10.0, help="s (default 10, the least)"
    )
    parser.add_argument(
        "--graceful-shutdown", type=float, help="the job's graceful period (default: the job's)"
    )
    parser.add_argument("--quick", action="store_true", help="a short run (CI smoke test)")
    parser.add_argument(
        "--service",
        action="store_true",
        help="the job saves every step through the checkpoint service (docs/checkpoints.md)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the pool's home (its jobs' logs) afterwards"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write figures as JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    args.steps = args.steps or (200 if quick else 750)
    args.step_time = args.step_time if args.step_time is not None else (0.05 if quick else 0.1)
    args.fault_every = args.fault_every or (3.0 if quick else 15.0)
    kinds = args.kinds or ("nan,check" if quick else ",".join(KINDS))
    args.kinds = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    if args.steps < 20 or args.step_time < 0 or args.checkpoint_every < 1:
        parser.error("--steps must be at least 20, --step-time >= 0, --checkpoint-every >= 1")
    if args.fault_every <= 0:
        parser.error("--fault-every must be above 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on `kill` too
    console = Console()
    if not console.is_terminal:
        console.width = 160
    info = machine_info()
    console.print(
        f"machine: {info['cpus']} CPUs, Python {info['python']}, {info['platform']}; "
        f"job: 2 ranks, gloo, {args.steps} steps x {args.step_time:g} s, checkpoint every "
        f"{'step through the checkpoint service' if args.service else args.checkpoint_every}; "
        f"faults: {','.join(args.kinds)}, one per {args.fault_every:g} s "
        "of training",
        markup=False,
    )
    options = ["--virtual-nodes", str(NODES), "--gpus-per-node", "1"]
    # The job runs this checkout's interpreter and example, which only this user may reach.
    env = {"GPUYARD_RUN_AS": "pool"}
    if "check" in args.kinds:
        env["GPUYARD_INJECT_FAULTS"] = json.dumps({BAD_NODE: "burn"})
    timeout = 3 * args.steps * max(args.step_time, 0.05) + 300
    with (
        running_pool(1, options=options, env=env, keep=args.keep) as pool,
        Client(pool.url) as client,
    ):
        try:
            with console.status("baseline: the job without faults"):
                base = run_baseline(pool, client, args, timeout)
            dt = step_time(base.reports)
            with console.status("the job with faults"):
                hit = run_faults(pool, client, args, dt, timeout)
        except BaseException:
            console.print(
                "pool.log, last lines:",
                pool.log_path.read_text(errors="replace")[-3000:],
                markup=False,
            )
            raise
    if args.keep:
        console.print(f"the pool's home is kept: {pool.home}", markup=False)
    if pool.log_problems:
        console.print("pool.log problems:", *pool.log_problems, sep="\n  ", markup=False)
    console.print(fault_table(hit.faults))
    console.print(kind_table(hit.faults))
    figures = summary(args, base, hit, dt)
    print_summary(console, figures)
    if args.json:
        report = {
            "machine": info,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "summary": figures,
            "faults": [
                {
                    "kind": f.kind,
                    "injected": f.what,
                    "phases_s": f.phases,
                    "replayed_steps": f.replayed_steps,
                    "running_again_s": f.running_again,
                    "lost_s": f.lost,
                    "ft_log": [e.model_dump(mode="json") for e in f.entries],
                }
                for f in hit.faults
            ],
            "jobs": {"baseline": base.job_id, "faults": hit.job_id},
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
