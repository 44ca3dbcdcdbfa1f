"""Benchmark: gpuyard's Slurm-compatible commands beside a real Slurm 22.05, in one run.

Both sides are driven by the same harness through their command lines (``sbatch``, ``squeue``,
``scontrol``, ``scancel``), on the same machine and the same shape: ``--nodes`` nodes of 64
CPUs and 8 GPUs (gpuyard: virtual nodes of ``gpuyard up``; Slurm: one ``slurmd`` per emulated
node, from ``../shared/slurm-recipe``, run as root). Figures, per side:

throughput  ``sbatch --parsable --hold`` (the submit path only, as the recipe's held-job test),
            each its own process, from 1 and from 16 concurrent clients: jobs/s and the
            ``sbatch`` process's p50/p99. For gpuyard also the same submissions from Python
            threads through its HTTP API, without a process per submission.
latency     an idle pool: ``sbatch`` of a 1-node job whose first line writes the time; from
            just before ``sbatch`` runs to that line, p50/p99 (``--latency-samples`` jobs, one
            by one), as the recipe's ``bench_latency.py``.
fill        ``--fill-jobs`` exclusive 8-GPU gangs of 1, 2, 4 or 8 nodes submitted held, one by
            one in a seeded order (the same queue on both sides), then released in one
            ``scontrol release``: seconds from that command's start until the allocation reaches
            50 %, 90 % and its peak.
churn       ``--churn-jobs`` such gangs running ``sleep --churn-seconds``, released at once:
            mean share of nodes allocated while jobs wait, and the makespan against the ideal
            (node-seconds / nodes).

Real Slurm runs when ``slurmctld``, ``slurmd`` and the recipe are here and this runs as root
(``apt-get install -y --no-install-recommends slurm-wlm munge``, see the recipe's README); its
column says why it is missing otherwise. ``--no-slurm`` skips it. Slurm's daemons are started
with the recipe's ``gen-conf.sh``/``start.sh`` (which write ``/etc/slurm``) and stopped with its
``stop.sh``, by PID file. Goal (issue 11): sbatch throughput at least 2x Slurm's, latency at
most a tenth of its, fill and churn at least as good. Nothing is asserted; figures are
printed. Run: ``.venv/bin/python bench/slurm.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from control_plane import Database, pool_options, stop_everything
from gpuyard.client import Client
from gpuyard.slurm.shims import write_shims
from launch import percentile, running_pool

RECIPE = Path(__file__).resolve().parents[2] / "shared" / "slurm-recipe"
SIZES = ([1, 2, 4, 8], [40, 25, 20, 15])


@dataclass
class Side:
    """One scheduler under test, as its command lines and a way to read its allocation."""

    name: str
    env: dict[str, str]
    allocated: Callable[[], int]
    """Nodes with a job on them now."""
    nodes: int
    api_submit: Callable[[], None] | None = None
    """One held submission through the API without a process (gpuyard only)."""

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=False, timeout=120
        )

    def sbatch(self, *options: str) -> str:
        done = self.run("sbatch", "--parsable", "-o", "/dev/null", *options)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: sbatch {' '.join(options)}: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def cancel(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), 200):
            self.run("scancel", *ids[start : start + 200])


# -- the two sides -----------------------------------------------------------------------------


@contextlib.contextmanager
def gpuyard_side(nodes: int) -> Iterator[Side]:
    # Jobs run as the pool's own user: the harness's files and this interpreter are its.
    with running_pool(64, options=pool_options(nodes), env={"GPUYARD_RUN_AS": "pool"}) as pool:
        shims = Path(tempfile.mkdtemp(prefix="gpuyard-shims-"))
        write_shims(shims)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
        env.update({"GPUYARD_URL": pool.url, "GPUYARD_TOKEN": pool.token})
        env["PATH"] = f"{shims}:{env.get('PATH', '')}"
        db = Database(pool.home)
        client = Client(pool.url, token=pool.token)
        spec = {
            "mode": "slurm",
            "command": "sbatch api",
            "hold": True,
            "slurm": {
                "script": "#!/bin/sh\ntrue\n",
                "job_name": "api",
                "ntasks": 1,
                "submit_dir": "/tmp",
                "work_dir": "/tmp",
            },
        }
        try:
            yield Side(
                "gpuyard", env, db.allocated_nodes, nodes, api_submit=lambda: _submit(client, spec)
            )
        finally:
            client.close()
            stop_everything(pool)
            shutil.rmtree(shims, ignore_errors=True)


def _submit(client: Client, spec: dict[str, object]) -> None:
    client.submit(spec)


def slurm_missing() -> str | None:
    """Why real Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "the recipe starts Slurm's daemons as root; run this as root"
    for tool in ("slurmctld", "slurmd", "munge", "sbatch"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return (
                f"{tool} is not installed (apt-get install -y --no-install-recommends "
                "slurm-wlm munge)"
            )
    if not (RECIPE / "start.sh").exists():
        return f"the recipe is not at {RECIPE}"
    if Path("/run/slurm/slurmctld.pid").exists():
        return "a slurmctld already runs here (/run/slurm/slurmctld.pid); stop it first"
    return None


@contextlib.contextmanager
def slurm_side(nodes: int) -> Iterator[Side]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    env["PATH"] = "/usr/bin:/usr/sbin:/bin:" + env.get("PATH", "")
    subprocess.run([str(RECIPE / "gen-conf.sh"), str(nodes), "64", "8"], check=True, cwd=RECIPE)
    try:
        subprocess.run(
            [str(RECIPE / "start.sh"), str(nodes)],
            check=True,
            cwd=RECIPE,
            capture_output=True,
            timeout=300,
        )

        def allocated() -> int:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%A"], env=env, capture_output=True, text=True, check=False
            ).stdout.split()
            return int(out[0].split("/")[0]) if out else 0

        yield Side("slurm", env, allocated, nodes)
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, check=False, capture_output=True)
        time.sleep(2)
        subprocess.run(
            [str(RECIPE / "stop.sh")], cwd=RECIPE, check=False, capture_output=True, timeout=120
        )


# -- the measures ------------------------------------------------------------------------------


def throughput(side: Side, jobs: int, clients: int) -> tuple[float, float, float]:
    """jobs/s, p50 and p99 of one sbatch process (ms)."""
    latencies: list[float] = []
    ids: list[str] = []

    def one(i: int) -> None:
        t = time.perf_counter()
        ids.append(side.sbatch("--hold", "-N1", "-J", f"tp{i}", "--wrap", "true"))
        latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(jobs)))
    wall = time.perf_counter() - t0
    side.cancel(ids)
    ms = [x * 1000 for x in latencies]
    return jobs / wall, percentile(ms, 50), percentile(ms, 99)


def api_throughput(submit: Callable[[], None], jobs: int, clients: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: submit(), range(jobs)))
    return jobs / (time.perf_counter() - t0)


def latency(side: Side, samples: int) -> tuple[float, float]:
    """p50 and p99 (ms), from just before sbatch runs to the script's first line, on an idle
    pool (the sbatch process's own start included, as the recipe measures Slurm)."""
    folder = Path(tempfile.mkdtemp(prefix="slurm-latency-"))
    os.chmod(folder, 0o777)  # noqa: S103 - the job may run as another user
    found: list[float] = []
    for i in range(samples):
        mark = folder / f"s{i}"
        started = time.time()  # as the recipe's bench_latency.py: just before sbatch runs
        job = side.sbatch("-N1", "--wrap", f"date +%s.%N > {mark}; sleep 1")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (mark.exists() and mark.stat().st_size):
            time.sleep(0.005)
        if mark.exists() and mark.stat().st_size:
            found.append(float(mark.read_text()) - started)
        _wait_gone(side, [job], 30)
    shutil.rmtree(folder, ignore_errors=True)
    ms = [x * 1000 for x in found] or [float("nan")]
    return percentile(ms, 50), percentile(ms, 99)


def _wait_gone(side: Side, ids: Sequence[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and side.allocated():
        time.sleep(0.1)
    del ids


def gangs(side: Side, count: int, seconds: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    sizes = rng.choices(SIZES[0], weights=SIZES[1], k=count)
    # One by one: job ids follow the seeded order, so both sides see the same queue.
    return [
        side.sbatch(
            "--hold",
            "--exclusive",
            "--gpus-per-node=8",
            "-N",
            str(size),
            "-t",
            "60",
            "-J",
            f"gang{i}",
            "--wrap",
            f"sleep {seconds}",
        )
        for i, size in enumerate(sizes)
    ]


def timeline(
    side: Side, ids: Sequence[str], until: Callable[[list[tuple[float, int]]], bool]
) -> list[tuple[float, int]]:
    """Release every job in one command, then sample (seconds since the command started,
    nodes allocated)."""
    t0 = time.monotonic()
    done = side.run("scontrol", "release", ",".join(ids))
    if done.returncode != 0:
        raise RuntimeError(f"{side.name}: scontrol release: {done.stderr.strip()}")
    samples: list[tuple[float, int]] = []
    while not until(samples):
        samples.append((time.monotonic() - t0, side.allocated()))
        time.sleep(0.1)
    return samples


def fill(side: Side, count: int, seed: int) -> tuple[str, str, str, float]:
    ids = gangs(side, count, 3600, seed)

    def settled(samples: list[tuple[float, int]]) -> bool:
        if not samples:
            return False
        if samples[-1][1] >= side.nodes:
            return True
        peak_at = max(samples, key=lambda s: (s[1], -s[0]))[0]
        return samples[-1][0] - peak_at > 10 or samples[-1][0] > 120

    samples = timeline(side, ids, settled)
    peak = max(n for _, n in samples)

    def first(share: float) -> str:
        hit = [t for t, n in samples if n >= share * peak and n]
        return f"{hit[0]:.2f} s" if hit else "never"

    side.cancel(ids)
    _wait_gone(side, ids, 60)
    return first(0.5), first(0.9), first(1.0), peak / side.nodes


def churn(side: Side, count: int, seconds: int, seed: int) -> tuple[float, float, float]:
    """Mean allocation while jobs wait, makespan and ideal makespan (s)."""
    rng = random.Random(seed)
    demand = sum(rng.choices(SIZES[0], weights=SIZES[1], k=count)) * seconds
    ids = gangs(side, count, seconds, seed)
    quiet: list[float] = []

    def finished(samples: list[tuple[float, int]]) -> bool:
        if samples and samples[-1][1] == 0 and samples[-1][0] > seconds:
            quiet.append(samples[-1][0])
            return len(quiet) > 10  # a second with nothing allocated: all have run
        quiet.clear()
        return bool(samples) and samples[-1][0] > 20 * demand / side.nodes + 120

    samples = timeline(side, ids, finished)
    end = quiet[0] if quiet else samples[-1][0]
    busy = [n for t, n in samples if t <= end]
    side.cancel(ids)
    return sum(busy) / (len(busy) * side.nodes), end, demand / side.nodes


# -- the run -----------------------------------------------------------------------------------


def measure(side: Side, args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    print(f"[{side.name}] throughput", file=sys.stderr)
    for clients in (1, 16):
        rate, p50, p99 = throughput(side, args.submit_jobs, clients)
        out[f"sbatch --hold, {clients} client(s)"] = (
            f"{rate:.1f} jobs/s (p50 {p50:.0f} ms, p99 {p99:.0f} ms)"
        )
    if side.api_submit is not None:
        for clients in (1, 16):
            rate = api_throughput(side.api_submit, args.submit_jobs * 4, clients)
            out[f"same, HTTP API, {clients} client(s)"] = f"{rate:.1f} jobs/s"
        stop_held(side)
    print(f"[{side.name}] latency", file=sys.stderr)
    p50, p99 = latency(side, args.latency_samples)
    out["sbatch start -> script running"] = f"p50 {p50:.0f} ms, p99 {p99:.0f} ms"
    print(f"[{side.name}] fill", file=sys.stderr)
    half, most, full, share = fill(side, args.fill_jobs, args.seed)
    out["fill: 50% / 90% / peak of peak"] = f"{half} / {most} / {full} (peak {share:.0%})"
    print(f"[{side.name}] churn", file=sys.stderr)
    mean, makespan, ideal = churn(side, args.churn_jobs, args.churn_seconds, args.seed)
    out["churn: mean allocation"] = f"{mean:.0%}"
    out["churn: makespan / ideal"] = f"{makespan:.0f} s / {ideal:.0f} s"
    return out


def stop_held(side: Side) -> None:
    """The API's held jobs (gpuyard only): stopped, so that they leave the queue."""
    with Client(side.env["GPUYARD_URL"], token=side.env["GPUYARD_TOKEN"]) as client:
        while page := client.jobs(status=["queued"], limit=1000).items:
            client.stop_many([j.id for j in page])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--submit-jobs", type=int, default=32)
    parser.add_argument("--latency-samples", type=int, default=10)
    parser.add_argument("--fill-jobs", type=int, default=48)
    parser.add_argument("--churn-jobs", type=int, default=40)
    parser.add_argument("--churn-seconds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-slurm", action="store_true", help="gpuyard's column only")
    args = parser.parse_args(argv)

    columns: dict[str, dict[str, str]] = {}
    with gpuyard_side(args.nodes) as side:
        columns["gpuyard"] = measure(side, args)
    why = "--no-slurm" if args.no_slurm else slurm_missing()
    if why is None:
        try:
            with slurm_side(args.nodes) as side:
                columns["Slurm 22.05"] = measure(side, args)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            why = f"it failed: {exc}"
    rows = list(columns["gpuyard"])
    width = max(len(r) for r in rows) + 2
    print(
        f"\n{args.nodes} nodes x 64 CPUs x 8 GPUs, {os.cpu_count()} CPUs here, load "
        f"{os.getloadavg()[0]:.1f}; {args.submit_jobs} submissions per throughput figure"
    )
    print(f"{'':{width}}{'gpuyard':44}Slurm 22.05")
    for row in rows:
        theirs = columns.get("Slurm 22.05", {}).get(row, "-" if why is None else "")
        print(f"{row:{width}}{columns['gpuyard'][row]:44}{theirs}")
    if why is not None:
        print(f"\nSlurm's column is missing: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
