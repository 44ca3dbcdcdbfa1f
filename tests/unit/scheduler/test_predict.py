"""Queue prediction: decide() run forward with max runtimes as run times."""

from __future__ import annotations

from gpuyard.models import Priority
from gpuyard.scheduler import PoolPolicy, Preemption
from gpuyard.scheduler.predict import in_words, predict
from gpuyard.testing.builders import alloc, job, node, running, snapshot, whole


def test_a_job_that_fits_starts_now() -> None:
    forecast = predict(snapshot([node("a")], [job(1, gpus=2)]), 1)
    assert (forecast.now, forecast.start_at) == (True, 0.0)
    assert in_words(forecast, 0.0) == "starts now"


def test_it_starts_when_the_running_job_reaches_its_max_runtime() -> None:
    s = snapshot(
        [node("a", gpus=4)], [job(1, gpus=4)], [running(9, alloc("a", 2), max_runtime=300)]
    )
    forecast = predict(s, 1)
    assert (forecast.now, forecast.start_at, forecast.waits_for) == (False, 300.0, (9,))
    assert in_words(forecast, 0.0) == "starts in about 5m00s"


def test_behind_queued_jobs_that_go_first() -> None:
    s = snapshot(
        [node("a", gpus=4)],
        [job(1, gpus=4, max_runtime=600), job(2, gpus=4, max_runtime=60), job(3, gpus=4)],
        [running(9, alloc("a", 4), max_runtime=100)],
        now=50,
    )
    forecast = predict(s, 3)
    # 9 ends at 100; job 1 runs 100..700; job 2 runs 700..760; then job 3.
    assert forecast.start_at == 760.0
    assert forecast.ahead == (1, 2)
    assert in_words(forecast, 50.0) == "starts in about 11m50s, behind jobs 1, 2"


def test_backfill_is_part_of_the_prediction() -> None:
    s = snapshot(
        [node("a", gpus=4)],
        [job(1, gpus=4), job(2, gpus=2, max_runtime=50)],
        [running(9, alloc("a", 2), max_runtime=100)],
    )
    assert predict(s, 2).now
    assert predict(s, 1).start_at == 100.0


def test_no_time_when_it_waits_for_a_job_without_a_max_runtime() -> None:
    s = snapshot([node("a", gpus=4)], [job(1, gpus=4)], [running(9, alloc("a", 2))])
    forecast = predict(s, 1)
    assert (forecast.start_at, forecast.unknown, forecast.waits_for) == (None, True, (9,))
    assert in_words(forecast, 0.0) == (
        "no start time can be given: it waits for job 9, with no max runtime"
    )


def test_a_job_that_can_never_run_says_why() -> None:
    forecast = predict(snapshot([node("a", gpus=4)], [job(1, gpus=8)]), 1)
    assert forecast.never is not None and "no node has 8 GPUs" in forecast.never


def test_a_higher_tier_in_a_suspend_pool_starts_once_its_victims_have_left() -> None:
    s = snapshot(
        [node("a")],
        [job(1, gpus=8, priority=Priority.HIGH, max_runtime=100)],
        [running(9, whole("a"), priority=Priority.LOW)],
        now=10,
        pools=[PoolPolicy(preemption=Preemption.SUSPEND)],
    )
    forecast = predict(s, 1)
    # The victim is told to suspend now; once it has left (at the next step) job 1 starts.
    assert forecast.start_at == 10.0 and not forecast.now
