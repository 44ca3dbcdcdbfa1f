"""A job's pace against its own history."""

from __future__ import annotations

from gpuyard.diagnosis.performance import Sample, judge


def steady(rate: float, seconds: int, start: int = 0, t0: float = 0.0) -> list[Sample]:
    return [Sample(t0 + t, int(start + rate * t)) for t in range(seconds + 1)]


def test_no_judgement_before_three_windows() -> None:
    samples = steady(10, 25)
    assert judge(samples, window=10, threshold=0.5) is None


def test_a_steady_job_is_never_slow_and_a_slowed_one_is() -> None:
    samples = steady(10, 60)
    assert judge(samples, window=10, threshold=0.5) is None
    slower = samples + [Sample(60 + t, samples[-1].step + 3 * t) for t in range(1, 11)]
    slow = judge(slower, window=10, threshold=0.5)
    assert slow is not None
    assert (slow.measure, slow.now, slow.usual) == ("step rate", 3.0, 10.0)
    assert slow.describe(10) == (
        "step rate over the last 10 s is 3 steps/s, 30% of its usual 10 steps/s"
    )
    assert judge(slower, window=10, threshold=0.25) is None


def test_one_earlier_stall_does_not_move_the_usual_pace() -> None:
    samples = steady(10, 30)
    stalled = samples + [Sample(30 + t, 300) for t in range(1, 11)]  # 10 s without a step
    resumed = stalled + [Sample(40 + t, 300 + 10 * t) for t in range(1, 31)]
    assert judge(resumed, window=10, threshold=0.5) is None


def test_the_hardware_ratio_is_watched_where_reported() -> None:
    samples = [Sample(t, 10 * t, 0.9 if t <= 40 else 0.3) for t in range(51)]
    slow = judge(samples, window=10, threshold=0.5)
    assert slow is not None
    assert slow.measure == "hardware ratio"
    assert round(slow.usual, 2) == 0.9
