"""`gpuyard simulate` on a tiny trace writes its CSVs and plot; worker processes agree with
an in-process replay."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app
from gpuyard.errors import InvalidSpec
from gpuyard.simulator.runner import replay
from gpuyard.simulator.study import load

TRACE = """job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration
1,ua,vcA,8,1,COMPLETED,0,100
2,ub,vcA,4,1,COMPLETED,10,50
3,ua,vcA,16,1,FAILED,20,30
4,uc,vcB,1,1,COMPLETED,5,10
5,uc,vcB,2,1,COMPLETED,6,10
"""
CLUSTER = "vc,num_nodes,gpus_per_node\nvcA,2,8\nvcB,1,8\n"
PUBLISHED = """job_id,vc,fifo_queue,fifo_jct,srtf_queue,srtf_jct,srtf_preemptions
1,vcA,0,100,0,101,0
2,vcA,0,50,0,51,0
3,vcA,100,130,50,81,1
4,vcB,0,10,0,11,0
5,vcB,0,10,0,11,0
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "tiny_jobs.csv").write_text(TRACE)
    (traces / "tiny_reference_results.csv").write_text(PUBLISHED)
    (traces / "tiny_vc_config.csv").write_text(CLUSTER)
    return traces / "tiny_jobs.csv", traces / "tiny_vc_config.csv"


def test_without_out_it_writes_to_a_temp_dir_not_the_current_one(
    files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, cluster = files
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    args = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--no-plot"]
    result = CliRunner().invoke(app, [*args, "--workers", "1", "--policy", "fifo"])
    assert result.exit_code == 0, result.output
    assert list(here.iterdir()) == []
    written = re.search(r"wrote (\S+jobs\.csv)", " ".join(result.stderr.split()))
    assert written is not None, result.output
    jobs = Path(written.group(1))
    assert jobs.parent.name.startswith("gpuyard-simulation-") and jobs.is_file()
    shutil.rmtree(jobs.parent)


def test_simulate_writes_results_summary_and_plot(files: tuple[Path, Path], tmp_path: Path) -> None:
    trace, cluster = files
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "fifo" in result.stdout and "SRTF*" in result.stdout and "gpuyard" in result.stdout

    with (out / "jobs.csv").open() as f:
        jobs = list(csv.DictReader(f))
    # every job under fifo, sjf, srtf, tiresias, gpuyard, gpuyard-blind, gpuyard-never
    assert len(jobs) == 5 * 7
    fifo = {r["job_id"]: r for r in jobs if r["policy"] == "fifo"}
    # vcA: job 3 (16 GPUs) waits for both nodes: job 1 ends at 100, job 2 at 60.
    assert (fifo["3"]["start"], fifo["3"]["queue"], fifo["3"]["jct"]) == ("100", "80", "110")

    with (out / "summary.csv").open() as f:
        summary = {(r["policy"], r["cluster"]): r for r in csv.DictReader(f)}
    assert ("fifo", "(all)") in summary and ("sjf", "vcB") in summary
    assert summary[("SRTF (published)", "(all)")]["preemptions"] == "1"
    assert float(summary[("fifo", "vcA")]["avg_queue"]) == pytest.approx(80 / 3, abs=0.01)
    # vcA's queueing delays under fifo: 0, 0, 80: the median is 0, the average 26.67.
    assert summary[("fifo", "vcA")]["p50_queue"] == "0"
    assert summary[("FIFO (published)", "vcA")]["p50_queue"] == "0"
    assert "p50 queue" in result.stdout
    footnote = " ".join(result.stdout.split())  # as one line, however the table wraps it
    assert "p50 (the median), p99, p99.9: the queueing delay that 50 %" in footnote
    assert "policy*: published results of another simulator" in footnote
    assert (out / "queue_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unknown_policy_is_refused_before_anything_runs(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, cluster = files
    args = ["simulate", "--trace", str(trace), "--cluster", str(cluster)]
    result = CliRunner().invoke(app, [*args, "--policy", "lottery", "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, InvalidSpec)
    assert "unknown policy 'lottery'" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_worker_processes_give_the_in_process_results(files: tuple[Path, Path]) -> None:
    loaded = load(*files)
    seen: list[int] = []
    parallel = replay(
        loaded.partitions, loaded.jobs, ["fifo", "gpuyard"], workers=2, progress=seen.append
    )
    serial = replay(loaded.partitions, loaded.jobs, ["fifo", "gpuyard"], workers=1)

    def ends(results: list) -> list[tuple[str, str, list[float | None]]]:  # type: ignore[type-arg]
        return [(r.policy, r.partition, [j.end for j in r.jobs]) for r in results]

    assert ends(parallel) == ends(serial)
    assert sum(seen) == 2 * len(loaded.jobs)
