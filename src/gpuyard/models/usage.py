"""What workers and nodes use (CPU, memory, GPU), and the series it is kept in.

Three kinds of thing live here, all pure:

- **Readings** (:class:`WorkerUsage`, :class:`NodeUsage`): what an executor measured, once.
  CPU is a counter (cumulative CPU seconds), so that the reader of two readings derives the
  utilisation between them in cores (:func:`cpu_cores`) without the executor keeping state.
  A figure the executor could not measure is ``None`` (no GPU driver, a vanished cgroup),
  never a 0 that would read as "idle".
- **Series** (:class:`Point`): one figure set per time bucket, averaged over the samples that
  fell in it. The controller samples every ``usage_interval`` seconds and keeps four
  resolutions, one per view (:data:`RESOLUTIONS`): realtime (each sample, 10 minutes), 1 h
  (1-minute averages), 1 d (15-minute averages), 7 d (1-hour averages). Each coarser one is
  made from the next finer one when a bucket closes (:func:`downsample`), and each keeps a
  fixed number of points (:func:`retain`), so a series never holds more than
  60 + 60 + 96 + 168 points whatever its age.
- **Views** (pydantic): what the API returns for a job, a node, and the pool now.

docs/monitoring.md says what each figure means.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

__all__ = [
    "DEFAULT_INTERVAL",
    "RESOLUTIONS",
    "JobNow",
    "JobUsage",
    "NodeNow",
    "NodeUsage",
    "NodeUsageSeries",
    "Point",
    "PoolUsage",
    "Resolution",
    "UsagePoint",
    "Window",
    "WorkerSeries",
    "WorkerUsage",
    "bucket",
    "combine",
    "cpu_cores",
    "cutoff",
    "downsample",
    "resolution",
    "retain",
]

DEFAULT_INTERVAL = 10.0
"""Seconds between samples (the ``usage_interval`` setting's default)."""


# -- readings ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerUsage:
    """One worker's processes, measured once by its executor."""

    cpu_seconds: float | None
    """CPU time its processes have used since it started (user + system), a counter."""
    memory: int | None
    """Bytes of memory in use: the cgroup's working set (usage less inactive file cache), or
    without a cgroup the resident set of its processes."""
    gpu_util: float | None = None
    """Mean utilisation of its GPUs, percent; None without a driver or without real GPUs."""
    gpu_memory: int | None = None
    """Bytes of memory in use on its GPUs; None as ``gpu_util``."""
    source: str = ""
    """Where CPU and memory were read: ``cgroup-v1``, ``cgroup-v2`` or ``processes``."""


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One node, measured once. CPU and memory are None where the executor cannot measure
    the node as a whole (a virtual node is a slice of one machine): the controller then
    counts its workers' figures for it (see :func:`combine`)."""

    cpu_seconds: float | None = None
    """CPU time used by everything on the node (not idle, not waiting for I/O), a counter."""
    memory: int | None = None
    """Bytes in use: total less what is available to new processes."""
    gpu_util: float | None = None
    gpu_memory: int | None = None


def cpu_cores(
    before: tuple[float, float] | None, at: float, cpu_seconds: float | None
) -> float | None:
    """CPU cores used between two readings of a counter: ``before`` is (time, seconds) of the
    last one. None without a last reading, with no time between them, or when the counter went
    back (processes that ended took their CPU time with them: a new count begins)."""
    if before is None or cpu_seconds is None:
        return None
    then, seconds = before
    if at <= then or cpu_seconds < seconds:
        return None
    return (cpu_seconds - seconds) / (at - then)


# -- resolutions ------------------------------------------------------------------------------


class Window(StrEnum):
    """The views of usage history (the reference documents' four)."""

    REALTIME = "realtime"
    HOUR = "1h"
    DAY = "1d"
    WEEK = "7d"


@dataclass(frozen=True, slots=True)
class Resolution:
    window: Window
    level: int
    """How it is stored: 0 the samples themselves, each next level coarser."""
    step: float
    """Seconds per point (realtime: 0, meaning the sampling interval)."""
    span: float
    """Seconds of history the view shows."""

    def step_for(self, interval: float) -> float:
        return self.step or interval

    def points(self, interval: float) -> int:
        """How many points a series keeps at this resolution."""
        return max(1, round(self.span / self.step_for(interval)))


RESOLUTIONS = (
    Resolution(Window.REALTIME, 0, 0.0, 600.0),
    Resolution(Window.HOUR, 1, 60.0, 3600.0),
    Resolution(Window.DAY, 2, 900.0, 86400.0),
    Resolution(Window.WEEK, 3, 3600.0, 7 * 86400.0),
)
"""Finest first: each level is averaged from the one before it."""


def resolution(window: Window) -> Resolution:
    return next(r for r in RESOLUTIONS if r.window is window)


# -- series -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Point:
    """The figures of one series over one bucket (``t``: its start), averaged over
    ``samples`` samples. A figure none of them measured is None."""

    t: float
    samples: int = 1
    cpu: float | None = None
    """CPU cores."""
    memory: float | None = None
    gpu_util: float | None = None
    gpu_memory: float | None = None


FIGURES = ("cpu", "memory", "gpu_util", "gpu_memory")


def bucket(t: float, step: float) -> float:
    """The start of the bucket of ``step`` seconds that ``t`` falls in (aligned to the epoch,
    so that every series' buckets line up)."""
    return math.floor(t / step) * step


def downsample(points: Iterable[Point], step: float) -> list[Point]:
    """One point per bucket of ``step`` seconds, oldest first: each figure the mean of the
    points that have it, weighted by their samples (so a mean of means is the mean of the
    samples); None where none has it."""
    buckets: dict[float, list[Point]] = defaultdict(list)
    for p in points:
        buckets[bucket(p.t, step)].append(p)
    return [_mean(t, group) for t, group in sorted(buckets.items())]


def _mean(t: float, group: Sequence[Point]) -> Point:
    figures: dict[str, float | None] = {}
    for name in FIGURES:
        weight = total = 0.0
        for p in group:
            value = getattr(p, name)
            if value is not None:
                weight += p.samples
                total += value * p.samples
        figures[name] = total / weight if weight else None
    return Point(t, sum(p.samples for p in group), **figures)


def cutoff(now: float, step: float, points: int) -> float:
    """The oldest bucket start a series keeps when it keeps ``points`` points: the bucket of
    ``now`` and the ``points - 1`` before it."""
    return bucket(now, step) - (points - 1) * step


def retain(points: Iterable[Point], now: float, step: float, limit: int) -> list[Point]:
    """The points a series keeps at a resolution of ``step`` seconds: the last ``limit``
    buckets up to ``now``, so never more than ``limit`` points (one per bucket)."""
    oldest = cutoff(now, step, limit)
    return [p for p in points if oldest <= p.t <= now]


def combine(points: Sequence[Point], t: float) -> Point:
    """Several series at one time as one (a job's workers, a virtual node's workers): CPU,
    memory and GPU memory add up; GPU utilisation is the mean of those that have it. A figure
    is None where no series has it; no series at all uses no CPU and no memory (and nothing
    is known of GPUs)."""
    figures: dict[str, float | None] = {}
    for name in ("cpu", "memory", "gpu_memory"):
        values = [v for p in points if (v := getattr(p, name)) is not None]
        empty = 0.0 if not points and name != "gpu_memory" else None
        figures[name] = sum(values) if values else empty
    utils = [p.gpu_util for p in points if p.gpu_util is not None]
    figures["gpu_util"] = sum(utils) / len(utils) if utils else None
    return Point(t, max((p.samples for p in points), default=1), **figures)


# -- views ------------------------------------------------------------------------------------


class UsagePoint(BaseModel):
    """The figures of one bucket of a series, averaged over the samples in it."""

    time: datetime = Field(description="The start of the bucket.")
    samples: int = Field(description="How many samples the figures average.")
    cpu: float | None = Field(None, description="CPU cores in use (1.0: one core busy).")
    memory: int | None = Field(None, description="Bytes of memory in use.")
    gpu_util: float | None = Field(
        None, description="GPU utilisation, percent (mean of the GPUs); null: not measured."
    )
    gpu_memory: int | None = Field(None, description="Bytes of GPU memory in use.")


class WorkerSeries(BaseModel):
    attempt: int
    rank: int
    node: str
    points: list[UsagePoint]


class JobUsage(BaseModel):
    """A job's usage over a window: one series per worker (of every attempt in the window)."""

    job_id: int
    window: Window
    step: float = Field(description="Seconds per point.")
    since: datetime = Field(description="The oldest bucket the window shows.")
    workers: list[WorkerSeries]


class NodeUsageSeries(BaseModel):
    node: str
    window: Window
    step: float
    since: datetime
    points: list[UsagePoint]


class NodeNow(BaseModel):
    """A node's latest sample."""

    name: str
    time: datetime | None = Field(None, description="When; null: never sampled.")
    cpu: float | None = None
    memory: int | None = None
    gpu_util: float | None = None
    gpu_memory: int | None = None


class JobNow(BaseModel):
    """A running job's latest sample, its workers added up (GPU utilisation: their mean)."""

    id: int
    name: str
    owner: str
    nodes: list[str]
    gpus: int = Field(0, description="GPUs its workers use (what it asked for).")
    held_gpus: int = Field(
        0, description="GPUs it holds: more than gpus where it takes whole nodes."
    )
    time: datetime | None = None
    cpu: float | None = None
    memory: int | None = None
    gpu_util: float | None = None
    gpu_memory: int | None = None


class PoolUsage(BaseModel):
    """The pool now, for ``gpuyard top``: every node's latest sample and the running jobs the
    caller may view, busiest first."""

    interval: float = Field(description="Seconds between samples.")
    nodes: list[NodeNow]
    jobs: list[JobNow]
