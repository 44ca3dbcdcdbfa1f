"""Reference mode reproduces the published FIFO and SJF results of every Venus VC.

Reads the Helios Venus trace from ``../shared/traces`` (beside the repository), or from
``$GPUYARD_TRACES``; skips, saying so, where it is absent. The whole replay takes about a
second per policy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuyard.simulator.metrics import OVERALL, JobResult, job_results, summarize_by_cluster
from gpuyard.simulator.published import label, load_published
from gpuyard.simulator.runner import replay
from gpuyard.simulator.study import Loaded, load

REPO = Path(__file__).resolve().parents[3]
VENUS = "helios-venus-sept2020"


def traces_dir() -> Path:
    # _isolated_env clears GPUYARD_* for each test; this runs at import, before it.
    return Path(os.environ.get("GPUYARD_TRACES", REPO.parent / "shared" / "traces"))


TRACES = traces_dir()
pytestmark = pytest.mark.skipif(
    not (TRACES / VENUS / "venus_sept2020_jobs.csv.gz").is_file(),
    reason=f"the Venus trace is not at {TRACES / VENUS} (set GPUYARD_TRACES to its parent)",
)


@pytest.fixture(scope="module")
def venus() -> Loaded:
    root = TRACES / VENUS
    return load(root / "venus_sept2020_jobs.csv.gz", root / "venus_vc_config.csv")


@pytest.fixture(scope="module")
def published(venus: Loaded) -> dict[str, list[JobResult]]:
    path = TRACES / VENUS / "venus_sept2020_reference_results.csv.gz"
    return load_published(path, venus.jobs)


@pytest.fixture(scope="module")
def ours(venus: Loaded) -> dict[str, list[JobResult]]:
    results = replay(venus.partitions, venus.jobs, ["fifo", "sjf"])
    out: dict[str, list[JobResult]] = {}
    for r in results:
        out.setdefault(r.policy, []).extend(job_results(r))
    return out


def test_the_whole_trace_and_every_vc_is_replayed(venus: Loaded) -> None:
    assert len(venus.jobs) == 23_859
    assert len(venus.partitions) == 15
    assert sum(p.gpus for p in venus.partitions) == 1_080
    assert not venus.report.skipped


@pytest.mark.parametrize("policy", ["fifo", "sjf"])
def test_average_jct_and_queue_of_every_vc_within_half_a_percent(
    policy: str,
    venus: Loaded,
    ours: dict[str, list[JobResult]],
    published: dict[str, list[JobResult]],
) -> None:
    mine = {s.cluster: s for s in summarize_by_cluster(policy, ours[policy])}
    theirs = {s.cluster: s for s in summarize_by_cluster(policy, published[label(policy)])}
    assert set(mine) == {p.name for p in venus.partitions} | {OVERALL}
    for vc, expected in theirs.items():
        got = mine[vc]
        assert got.unfinished == 0
        assert got.avg_jct == pytest.approx(expected.avg_jct, rel=0.005), vc
        # A queue average of 0 has no relative tolerance; every Venus VC has some queueing.
        assert got.avg_queue == pytest.approx(expected.avg_queue, rel=0.005), vc


@pytest.mark.parametrize("policy", ["fifo", "sjf"])
def test_every_job_starts_when_the_artifact_started_it(
    policy: str, ours: dict[str, list[JobResult]], published: dict[str, list[JobResult]]
) -> None:
    # Stronger than the averages: the rules are followed exactly, job by job.
    expected = {r.job_id: (r.queue, r.jct) for r in published[label(policy)]}
    got = {r.job_id: (r.queue, r.jct) for r in ours[policy]}
    differ = [job_id for job_id, figures in expected.items() if got[job_id] != figures]
    assert differ == []


@pytest.fixture(scope="module")
def baselines(venus: Loaded) -> dict[str, list[JobResult]]:
    results = replay(venus.partitions, venus.jobs, ["srtf", "tiresias"], workers=2)
    out: dict[str, list[JobResult]] = {}
    for r in results:
        out.setdefault(r.policy, []).extend(job_results(r))
    return out


@pytest.mark.parametrize("policy", ["srtf", "tiresias"])
def test_the_preemptive_baselines_come_within_two_percent_of_the_published_averages(
    policy: str,
    baselines: dict[str, list[JobResult]],
    published: dict[str, list[JobResult]],
) -> None:
    """Not job by job (the artifact's 1-second clock ends a preemptive job 1 s late, which
    moves later decisions), but the averages the variants compare against."""
    mine = {s.cluster: s for s in summarize_by_cluster(policy, baselines[policy])}
    theirs = {s.cluster: s for s in summarize_by_cluster(policy, published[label(policy)])}
    overall, expected = mine[OVERALL], theirs[OVERALL]
    assert overall.unfinished == 0
    assert overall.avg_jct == pytest.approx(expected.avg_jct, rel=0.01)
    assert overall.avg_queue == pytest.approx(expected.avg_queue, rel=0.02)
    assert overall.p999_queue == pytest.approx(expected.p999_queue, rel=0.05)
    for vc, want in theirs.items():
        assert mine[vc].avg_jct == pytest.approx(want.avg_jct, rel=0.03), vc
