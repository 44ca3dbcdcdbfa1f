"""Benchmark: replay the Helios Venus trace (and optionally Alibaba openb) under each policy,
beside the published results of the Helios/Lucid artifact.

What it prints
--------------
1. **Reference check** (when fifo / sjf run): per Venus VC, our average JCT and queueing
   delay beside the artifact's published ones, the relative difference, and how many jobs
   differ at all (0 means a job-by-job reproduction).
2. **Summary**: average JCT, average / median (p50) / p99 / p99.9 queueing delay, GPU
   allocation while jobs wait, makespan and preemptions of each policy over the whole trace,
   and the five published policies (FIFO, SJF, SRTF, Tiresias, QSSF; marked ``*``) as the
   baseline. For gpuyard's policy, its ratio to Tiresias' published averages (the figures to
   beat).
3. **Wall time** of each policy's replay, the number of policy decisions and decisions per
   second, with ``--workers`` processes (the VCs are independent partitions).
4. **Variants** (unless ``--no-variants``): gpuyard's policy beside SRTF (an oracle), SJF (an
   oracle) and Tiresias, all run here on the same engine, on Venus as given, with arrivals
   x0.8 and x1.25, on each Venus VC alone, and on openb shrunk to a contended cluster
   (``simulator/variants.py``): avg JCT, avg / p50 / p99 / p99.9 queueing delay, preemptions
   per job (p50 / p99), and the goals of issue 30 checked per variant (``ok`` or the ratio
   that misses). Beside gpuyard: ``gpuyard-blind``, the same pool without predicted run
   times (what it did before), and ``gpuyard-never``, a pool without preemption (the
   default pool), where the predictions are the whole order.
5. **Predicted run times** (with the variants): for each variant (and each Venus VC), how the
   run time gpuyard's predictor told each job at its submission compared with what the job
   ran: jobs told, the median absolute log ratio (0.69 is a factor of two) and the share
   inside the interval (the predictor aims at 80 %). Then the queue predictions: on Venus,
   every 20th job is predicted a start when it is submitted, as ``GET .../prediction`` would
   answer; for those that waited at least a minute, the share whose real start fell inside
   the range they were told (issue 30's goal: 80 %) and the median error of the predicted
   start, gpuyard beside gpuyard-blind (the prediction before run times were learnt).

Files (jobs.csv, summary.csv, queue_cdf.png) go to ``--out`` (default
``bench/results/simulate``; ignored by git). Traces are read from ``--traces`` (default
``../shared/traces`` beside the repository); nothing is copied into the repository.
No timing is asserted. Run it as ``.venv/bin/python bench/simulate.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuyard.simulator.engine import PartitionResult
from gpuyard.simulator.metrics import (
    OVERALL,
    JobResult,
    Summary,
    job_results,
    percentile,
    prediction_error,
    start_prediction_error,
)
from gpuyard.simulator.published import label, load_published
from gpuyard.simulator.report import summary_table
from gpuyard.simulator.runner import POLICIES, default_workers, replay
from gpuyard.simulator.study import Loaded, Outcome, load, summaries_of, write_outputs
from gpuyard.simulator.variants import scale_arrivals, shrink

REPO = Path(__file__).resolve().parents[1]
VENUS = "helios-venus-sept2020"
OPENB = "alibaba-openb-2023"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "simulate")
    parser.add_argument("--openb", action="store_true", help="Also replay Alibaba openb.")
    parser.add_argument("--json", type=Path, help="Write the figures as JSON here.")
    parser.add_argument(
        "--no-variants", action="store_true", help="Skip the workload variants (section 4)."
    )
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    console = Console(width=max(Console().width, 120))
    console.print(
        f"python {platform.python_version()}, {args.workers} worker process(es), "
        f"policies: {', '.join(policies)}"
    )
    figures: dict[str, Any] = {"venus": run_venus(args, policies, console)}
    if args.openb:
        figures["openb"] = run_openb(args, policies, console)
    if not args.no_variants:
        figures["variants"] = run_variants(args, console)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def timed_replay(
    loaded: Loaded, policies: list[str], workers: int, console: Console
) -> tuple[list[PartitionResult], dict[str, dict[str, float]]]:
    results: list[PartitionResult] = []
    timing: dict[str, dict[str, float]] = {}
    for policy in policies:
        started = time.perf_counter()
        runs = replay(loaded.partitions, loaded.jobs, [policy], workers=workers)
        wall = time.perf_counter() - started
        decisions = sum(r.decisions for r in runs)
        slowest = max(runs, key=lambda r: r.wall_seconds)
        timing[policy] = {
            "wall_s": wall,
            "decisions": decisions,
            "decisions_per_s": decisions / max(sum(r.wall_seconds for r in runs), 1e-9),
            "slowest_cluster_s": slowest.wall_seconds,
        }
        console.print(
            f"  {policy}: {wall:.1f} s wall, {decisions:,} decisions "
            f"(slowest cluster {slowest.partition}: {slowest.wall_seconds:.1f} s)"
        )
        results += runs
    return results, timing


def run_venus(args: argparse.Namespace, policies: list[str], console: Console) -> dict[str, Any]:
    root = args.traces / VENUS
    trace = root / "venus_sept2020_jobs.csv.gz"
    if not trace.is_file():
        sys.exit(f"no Venus trace at {trace}; pass --traces DIR")
    loaded = load(trace, root / "venus_vc_config.csv")
    published = load_published(root / "venus_sept2020_reference_results.csv.gz", loaded.jobs)
    console.print(
        f"\n[bold]Helios Venus[/]: {len(loaded.jobs):,} jobs, "
        f"{len(loaded.partitions)} VCs, {sum(p.gpus for p in loaded.partitions):,} GPUs"
    )
    for line in loaded.report.lines():
        console.print("  " + line, highlight=False, markup=False)
    results, timing = timed_replay(loaded, policies, args.workers, console)
    summaries = summaries_of(results, published)
    checks = reference_check(results, published, console)
    console.print(summary_table([s for s in summaries if s.cluster == OVERALL], title="Venus"))
    versus_tiresias(summaries, console)
    jobs = [row for r in results for row in job_results(r)]
    written = write_outputs(
        Outcome(results, jobs, summaries, published), args.out / "venus", title="Helios Venus"
    )
    console.print("wrote " + ", ".join(str(p) for p in written))
    return {"timing": timing, "reference_check": checks, "summary": as_dicts(summaries)}


def reference_check(
    results: list[PartitionResult],
    published: dict[str, list[JobResult]],
    console: Console,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in ("fifo", "sjf"):
        runs = [r for r in results if r.policy == policy]
        if not runs:
            continue
        theirs: dict[str, list[JobResult]] = {}
        for row in published[label(policy)]:
            theirs.setdefault(row.cluster, []).append(row)
        table = Table(title=f"reference check: {policy} vs published, per VC", title_justify="left")
        for name in (
            "VC",
            "jobs",
            "JCT ours",
            "JCT published",
            "diff",
            "queue ours",
            "queue published",
            "diff",
            "jobs differing",
        ):
            table.add_column(name, justify="left" if name == "VC" else "right")
        out[policy] = {}
        for run in runs:
            mine = job_results(run)
            ref = {r.job_id: r for r in theirs[run.partition]}
            jct, ref_jct = _mean(r.jct for r in mine), _mean(r.jct for r in ref.values())
            queue, ref_queue = _mean(r.queue for r in mine), _mean(r.queue for r in ref.values())
            differing = sum(
                1 for r in mine if (r.queue, r.jct) != (ref[r.job_id].queue, ref[r.job_id].jct)
            )
            table.add_row(
                run.partition,
                f"{len(mine):,}",
                f"{jct:,.1f}",
                f"{ref_jct:,.1f}",
                _diff(jct, ref_jct),
                f"{queue:,.1f}",
                f"{ref_queue:,.1f}",
                _diff(queue, ref_queue),
                f"{differing:,}",
            )
            out[policy][run.partition] = {
                "jct": jct,
                "published_jct": ref_jct,
                "queue": queue,
                "published_queue": ref_queue,
                "jobs_differing": differing,
            }
        console.print(table)
    return out


def versus_tiresias(summaries: list[Summary], console: Console) -> None:
    overall = {s.policy: s for s in summaries if s.cluster == OVERALL}
    target = overall.get(label("tiresias"))
    ours = overall.get("gpuyard")
    if target is None or ours is None:
        return
    console.print(
        f"gpuyard vs Tiresias (published): avg JCT {ours.avg_jct:,.0f} / {target.avg_jct:,.0f} "
        f"= {ours.avg_jct / target.avg_jct:.2f}x, avg queue {ours.avg_queue:,.0f} / "
        f"{target.avg_queue:,.0f} = {ours.avg_queue / target.avg_queue:.2f}x "
        "(below 1.00x on both is the goal of issue 5)"
    )


def run_openb(args: argparse.Namespace, policies: list[str], console: Console) -> dict[str, Any]:
    root = args.traces / OPENB
    loaded = load(root / "openb_pod_list_default.csv.gz", root / "openb_node_list_gpu_node.csv")
    console.print(
        f"\n[bold]Alibaba openb[/]: {len(loaded.jobs):,} jobs, "
        f"{sum(p.gpus for p in loaded.partitions):,} GPUs"
    )
    for line in loaded.report.lines():
        console.print("  " + line, highlight=False, markup=False)
    results, timing = timed_replay(loaded, policies, args.workers, console)
    summaries = summaries_of(results)
    console.print(summary_table([s for s in summaries if s.cluster == OVERALL], title="openb"))
    jobs = [row for r in results for row in job_results(r)]
    write_outputs(Outcome(results, jobs, summaries), args.out / "openb", title="Alibaba openb")
    return {"timing": timing, "summary": as_dicts(summaries)}


VARIANT_POLICIES = ["gpuyard", "gpuyard-blind", "gpuyard-never", "srtf", "sjf", "tiresias"]
OPENB_DIVISOR = 100
"""openb's node classes at a 100th (50 GPUs: 5 G2 nodes of 8, 4 T4 of 2, 1 P100 of 2). Its
jobs hold 42 GPUs at the median, 53 at p90, 70 at most of its 6,212: as given, nothing ever
waits."""
GOALS = (
    ("avg JCT <= 1.02x SRTF", "avg_jct", "srtf", 1.02),
    ("avg queue <= 1.1x SRTF", "avg_queue", "srtf", 1.1),
    ("p99 queue <= 1.5x SRTF", "p99_queue", "srtf", 1.5),
    ("p99.9 queue <= Tiresias", "p999_queue", "tiresias", 1.0),
)
"""Issue 30's goals for gpuyard's policy."""


def run_variants(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Section 4: the policy on workloads of other shapes, beside baselines run alike."""
    root = args.traces / VENUS
    venus = load(root / "venus_sept2020_jobs.csv.gz", root / "venus_vc_config.csv")
    variants: list[tuple[str, Loaded]] = [("venus", venus)]
    for rate in (0.8, 1.25):
        jobs = scale_arrivals(venus.jobs, rate)
        variants.append((f"venus arrivals x{rate:g}", Loaded(venus.partitions, jobs, venus.report)))
    openb_root = args.traces / OPENB
    if (openb_root / "openb_pod_list_default.csv.gz").is_file():
        openb = load(
            openb_root / "openb_pod_list_default.csv.gz",
            openb_root / "openb_node_list_gpu_node.csv",
        )
        (part,) = openb.partitions
        small = shrink(part, OPENB_DIVISOR)
        fits = max(n.gpus for n in small.nodes)
        jobs = [j for j in openb.jobs if j.gpus <= fits]
        variants.append((f"openb /{OPENB_DIVISOR}", Loaded([small], jobs, openb.report)))
    console.print(
        "\n[bold]Variants[/]: gpuyard's policy beside SRTF (oracle), SJF (oracle) and "
        "Tiresias, each run here on the same engine"
    )
    out: dict[str, Any] = {}
    per_vc: list[Summary] = []
    venus_runs: list[PartitionResult] = []
    accuracy: dict[str, list[PartitionResult]] = {}
    for name, loaded in variants:
        gpus = sum(p.gpus for p in loaded.partitions)
        results = replay(loaded.partitions, loaded.jobs, VARIANT_POLICIES, workers=args.workers)
        summaries = summaries_of(results)
        accuracy[name] = [r for r in results if r.policy == "gpuyard"]
        if name == "venus":
            per_vc = summaries
            venus_runs = accuracy[name]
        overall = {s.policy: s for s in summaries if s.cluster == OVERALL}
        preempts = {
            policy: [j.preemptions for r in results if r.policy == policy for j in r.jobs]
            for policy in VARIANT_POLICIES
        }
        table = Table(
            title=f"{name}: {len(loaded.jobs):,} jobs, {gpus:,} GPUs",
            title_justify="left",
        )
        for column in (
            "policy",
            "avg JCT",
            "avg queue",
            "p50 queue",
            "p99 queue",
            "p99.9 queue",
            "preempt/job p50",
            "p99",
            "max",
        ):
            table.add_column(column, justify="left" if column == "policy" else "right")
        for policy in VARIANT_POLICIES:
            s, counts = overall[policy], preempts[policy]
            table.add_row(
                policy,
                f"{s.avg_jct:,.0f}",
                f"{s.avg_queue:,.0f}",
                f"{s.p50_queue:,.0f}",
                f"{s.p99_queue:,.0f}",
                f"{s.p999_queue:,.0f}",
                f"{percentile(counts, 50):g}",
                f"{percentile(counts, 99):g}",
                f"{max(counts, default=0)}",
            )
        console.print(table)
        goals = goal_check(overall, preempts["gpuyard"])
        console.print("  goals: " + "; ".join(f"{k}: {v}" for k, v in goals.items()))
        out[name] = {
            "summary": {p: asdict(overall[p]) for p in VARIANT_POLICIES},
            "preemptions_p99": {p: percentile(c, 99) for p, c in preempts.items()},
            "goals": goals,
        }
    out["venus per VC"] = per_vc_goals(per_vc, console)
    for run in sorted(venus_runs, key=lambda r: -len(r.jobs)):
        accuracy[f"  venus {run.partition}"] = [run]
    out["predictions"] = predictions_table(accuracy, console)
    out["queue predictions"] = queue_predictions(venus, args.workers, console)
    return out


FORECAST_EVERY = 20
"""Every how many Venus jobs a start is predicted at submission in the replay."""


def queue_predictions(venus: Loaded, workers: int, console: Console) -> dict[str, Any]:
    table = Table(
        title=f"queue predictions on Venus (every {FORECAST_EVERY}th job, told at submission), "
        "jobs that waited 1 min or more",
        title_justify="left",
    )
    for column in ("policy", "jobs", "told a time", "started within the range", "median error"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    out: dict[str, Any] = {}
    for policy in ("gpuyard", "gpuyard-blind"):
        results = replay(
            venus.partitions, venus.jobs, [policy], workers=workers, forecast_every=FORECAST_EVERY
        )
        found = start_prediction_error(results)
        error = "-" if found.median_error is None else f"{found.median_error:,.0f} s"
        table.add_row(
            policy,
            f"{found.jobs:,}",
            f"{found.given:,}",
            f"{found.inside:,} ({found.coverage:.0%}; goal 80%)",
            error,
        )
        out[policy] = {**asdict(found), "coverage": found.coverage}
    console.print(table)
    return out


def predictions_table(
    runs: dict[str, list[PartitionResult]], console: Console
) -> dict[str, dict[str, float]]:
    """Section 5: the run times gpuyard's predictor told jobs at submission, against what
    they ran, per variant and per Venus VC."""
    table = Table(
        title="predicted run times (gpuyard, told at submission) against what jobs ran",
        title_justify="left",
    )
    for column in ("workload", "jobs told", "median |ln(ran/predicted)|", "inside interval"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    out: dict[str, dict[str, float]] = {}
    for name, results in runs.items():
        error = prediction_error(results)
        if error is None:
            table.add_row(name, "0", "-", "-")
            continue
        table.add_row(
            name,
            f"{error.jobs:,}",
            f"{error.median_log_ratio:.2f} (x{math.exp(error.median_log_ratio):.1f})",
            f"{error.coverage:.0%}",
        )
        out[name.strip()] = asdict(error)
    console.print(table)
    console.print(
        "  the interval aims at 80 % of jobs; the first jobs of a cluster are told nothing "
        "(no history yet)"
    )
    return out


def goal_check(overall: dict[str, Summary], preemptions: list[int]) -> dict[str, str]:
    """``ok``, or the ratio that misses, for each goal of issue 12."""
    ours = overall["gpuyard"]
    verdict: dict[str, str] = {}
    for title, field, baseline, bound in GOALS:
        theirs = getattr(overall[baseline], field)
        mine = getattr(ours, field)
        ratio = mine / theirs if theirs else (1.0 if mine == 0 else math.inf)
        missed = f"{ratio:.2f}x" if theirs else f"{mine:,.0f} s against 0"
        verdict[title] = "ok" if ratio <= bound else missed
    p99 = percentile(preemptions, 99)
    verdict["preemptions/job p99 <= 3"] = "ok" if p99 <= 3 else f"{p99:g}"
    return verdict


def per_vc_goals(summaries: list[Summary], console: Console) -> dict[str, dict[str, str]]:
    """Each Venus VC alone (VCs are independent partitions: the rows of the Venus run)."""
    by_vc: dict[str, dict[str, Summary]] = {}
    for s in summaries:
        if s.cluster != OVERALL:
            by_vc.setdefault(s.cluster, {})[s.policy] = s
    table = Table(title="venus, each VC alone: gpuyard / baseline", title_justify="left")
    for column in ("VC", "jobs", *(title for title, *_ in GOALS)):
        table.add_column(column, justify="left" if column == "VC" else "right")
    out: dict[str, dict[str, str]] = {}
    for vc, overall in sorted(by_vc.items(), key=lambda kv: -kv[1]["gpuyard"].jobs):
        ours = overall["gpuyard"]
        cells: dict[str, str] = {}
        for title, field, baseline, bound in GOALS:
            theirs, mine = getattr(overall[baseline], field), getattr(ours, field)
            ratio = mine / theirs if theirs else (1.0 if mine == 0 else math.inf)
            shown = f"{ratio:.2f}x" if theirs else f"{mine:,.0f} s / 0"
            cells[title] = shown + ("" if ratio <= bound else " !")
        table.add_row(vc, f"{ours.jobs:,}", *cells.values())
        out[vc] = cells
    console.print(table)
    console.print("  ratio of gpuyard's figure to the baseline's; ! marks a goal missed")
    return out


def _mean(values: Any) -> float:
    numbers = [v for v in values if v is not None]
    return sum(numbers) / len(numbers)


def _diff(ours: float, theirs: float) -> str:
    return "0" if ours == theirs else f"{(ours - theirs) / theirs:+.3%}"


def as_dicts(summaries: list[Summary]) -> list[dict[str, Any]]:
    return [asdict(s) for s in summaries if s.cluster == OVERALL]


if __name__ == "__main__":
    sys.exit(main())
