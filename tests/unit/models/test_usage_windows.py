"""Usage series as pure functions: rates from counters, downsampling, bounded retention."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyard.models.usage import (
    RESOLUTIONS,
    Point,
    Window,
    bucket,
    combine,
    cpu_cores,
    cutoff,
    downsample,
    resolution,
    retain,
)

DAY = 86400.0
T0 = 1_699_999_200.0  # the start of an hour (so of a minute, a quarter)


@pytest.mark.parametrize(
    ("before", "at", "seconds", "cores"),
    [
        (None, 10.0, 5.0, None),  # the first reading: nothing to compare with
        ((0.0, 5.0), 10.0, 25.0, 2.0),  # 20 CPU seconds in 10 s: two cores busy
        ((0.0, 5.0), 10.0, 5.0, 0.0),  # idle
        ((0.0, 50.0), 10.0, 5.0, None),  # the counter went back (processes ended)
        ((10.0, 5.0), 10.0, 9.0, None),  # no time between them
        ((0.0, 5.0), 10.0, None, None),  # not measured now
    ],
)
def test_cpu_cores_from_a_counter(
    before: tuple[float, float] | None, at: float, seconds: float | None, cores: float | None
) -> None:
    assert cpu_cores(before, at, seconds) == cores


def test_the_four_windows_keep_a_fixed_number_of_points() -> None:
    counts = {r.window: (r.step_for(10.0), r.points(10.0)) for r in RESOLUTIONS}
    assert counts == {
        Window.REALTIME: (10.0, 60),
        Window.HOUR: (60.0, 60),
        Window.DAY: (900.0, 96),
        Window.WEEK: (3600.0, 168),
    }
    assert resolution(Window.REALTIME).points(5.0) == 120  # a faster sampler: more points
    assert [r.level for r in RESOLUTIONS] == [0, 1, 2, 3]
    # Each level keeps at least one bucket of the next: the roll-up always finds its input.
    for finer, coarser in itertools.pairwise(RESOLUTIONS):
        assert finer.span >= coarser.step


def samples(hours: float, every: float = 10.0) -> list[Point]:
    """A sample every 10 s: CPU rises by 1 core per minute, memory is the minute's number in
    MiB, the GPU is measured only in even minutes."""
    points = []
    for i in range(int(hours * 3600 / every)):
        t = T0 + i * every
        minute = int((t - T0) // 60)
        points.append(
            Point(
                t,
                cpu=float(minute) + (i % 6) / 10,  # within the minute: +0.0 … +0.5
                memory=float(minute << 20),
                gpu_util=50.0 if minute % 2 == 0 else None,
            )
        )
    return points


def test_an_hour_of_samples_averages_into_sixty_minutes() -> None:
    raw = samples(1)
    assert len(raw) == 360
    minutes = downsample(raw, 60)
    assert len(minutes) == 60
    assert [p.t for p in minutes] == [T0 + 60 * i for i in range(60)]
    for i, p in enumerate(minutes):
        assert p.samples == 6
        assert p.cpu == pytest.approx(i + 0.25)  # the mean of +0.0 … +0.5
        assert p.memory == i << 20
        assert p.gpu_util == (50.0 if i % 2 == 0 else None)  # never measured: not 0
        assert p.gpu_memory is None


def test_a_mean_of_means_is_the_mean_of_the_samples() -> None:
    raw = samples(2)
    direct = downsample(raw, 900)
    cascaded = downsample(downsample(raw, 60), 900)
    assert len(direct) == len(cascaded) == 8
    for a, b in zip(direct, cascaded, strict=True):
        assert (a.t, a.samples) == (b.t, b.samples)
        assert a.cpu == pytest.approx(b.cpu)
        assert a.memory == pytest.approx(b.memory)
        assert a.gpu_util == pytest.approx(b.gpu_util)


def test_points_are_weighted_by_their_samples_and_figures_by_who_has_them() -> None:
    points = [
        Point(0.0, samples=3, cpu=1.0, gpu_util=None),
        Point(30.0, samples=1, cpu=5.0, gpu_util=80.0),
    ]
    [p] = downsample(points, 60)
    assert (p.samples, p.cpu, p.gpu_util) == (4, 2.0, 80.0)  # (3*1 + 5) / 4; only one GPU


def test_a_week_of_samples_kept_at_every_resolution_is_bounded() -> None:
    """Ten days of 1-minute points (6 samples each), downsampled level by level as the
    sampler does, keep at most the points each resolution holds: the newest ones, with the
    right averages."""
    now = T0 + 10 * DAY - 1
    minutes = [Point(T0 + i * 60.0, samples=6, cpu=(i // 60) % 24) for i in range(10 * 1440)]
    kept = {}
    level = minutes
    for res in RESOLUTIONS[1:]:
        level = downsample(level, res.step)
        kept[res.window] = retain(level, now, res.step, res.points(10.0))
    assert {w: len(p) for w, p in kept.items()} == {
        Window.HOUR: 60,
        Window.DAY: 96,
        Window.WEEK: 168,
    }
    week = kept[Window.WEEK]
    assert week[-1].t == bucket(now, 3600)  # the newest hour
    assert week[0].t == bucket(now, 3600) - 167 * 3600
    for p in week:
        assert p.cpu == ((p.t - T0) // 3600) % 24  # each hour's mean: its hour number
        assert p.samples == 360


@given(
    st.lists(st.floats(0, 30 * DAY), max_size=400),
    st.sampled_from([10.0, 60.0, 900.0, 3600.0]),
    st.integers(1, 200),
)
def test_retention_never_keeps_more_than_its_limit(
    times: list[float], step: float, limit: int
) -> None:
    now = T0 + 30 * DAY
    points = downsample([Point(T0 + t, cpu=1.0) for t in times], step)
    kept = retain(points, now, step, limit)
    assert len(kept) <= limit
    assert kept == [p for p in points if p.t >= cutoff(now, step, limit)]  # the newest ones


def test_cutoff_keeps_the_current_bucket_and_the_ones_before() -> None:
    assert cutoff(T0 + 1800, 3600, 168) == T0 - 167 * 3600
    assert cutoff(T0 + 5, 10, 60) == T0 - 590


def test_combining_workers_adds_up_and_averages_gpus() -> None:
    workers = [
        Point(T0, cpu=1.5, memory=100.0, gpu_util=90.0, gpu_memory=10.0),
        Point(T0, cpu=0.5, memory=50.0, gpu_util=None, gpu_memory=None),
        Point(T0, cpu=None, memory=None, gpu_util=70.0, gpu_memory=20.0),
    ]
    job = combine(workers, T0)
    assert (job.cpu, job.memory, job.gpu_util, job.gpu_memory) == (2.0, 150.0, 80.0, 30.0)
    nothing_known = combine([Point(T0)], T0)
    assert (nothing_known.cpu, nothing_known.memory, nothing_known.gpu_util) == (None,) * 3
    idle = combine([], T0)  # a virtual node without workers uses nothing of its slice
    assert (idle.cpu, idle.memory, idle.gpu_util, idle.gpu_memory) == (0.0, 0.0, None, None)
