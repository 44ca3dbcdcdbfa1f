"""Whether a job runs slow against its own history (002 性能检测): pure arithmetic over samples.

A job reports its step (``gpuyard.runtime.report_progress``) and, where it can, the share of a
step's wall time spent in kernels or collectives (the ``hardware_ratio`` metric). The controller
samples both as they change. :func:`judge` compares the last ``window`` seconds with the job's
usual pace: the median over the earlier whole windows of the same attempt (at least two of
them, so a job is judged only after three windows). A median, not a mean or a best: one stall
or one fast stretch does not move it.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MAX_WINDOWS", "Sample", "Slowness", "judge"]

MAX_WINDOWS = 48
"""Earlier windows the usual pace is taken over (the most recent ones)."""


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    step: int
    hardware_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class Slowness:
    measure: str
    """``step rate`` or ``hardware ratio``."""
    now: float
    usual: float

    def describe(self, window: float) -> str:
        unit = " steps/s" if self.measure == "step rate" else ""
        share = self.now / self.usual if self.usual else 0.0
        return (
            f"{self.measure} over the last {window:g} s is {self.now:.3g}{unit}, "
            f"{share:.0%} of its usual {self.usual:.3g}{unit}"
        )


def judge(samples: Sequence[Sample], *, window: float, threshold: float) -> Slowness | None:
    """The first measure below ``threshold`` x its usual value, or None (also when there is
    not yet enough history). ``samples`` are in time order."""
    if len(samples) < 2 or window <= 0:
        return None
    times = [s.time for s in samples]
    end = times[-1]
    edges = [end - k * window for k in range(MAX_WINDOWS + 2)]
    edges = [e for e in edges if e >= times[0]]
    if len(edges) < 4:  # the current window and two earlier ones
        return None

    def step_at(t: float) -> int:
        return samples[max(0, bisect_right(times, t) - 1)].step

    rates = [(step_at(edges[k]) - step_at(edges[k + 1])) / window for k in range(len(edges) - 1)]
    usual = statistics.median(rates[1:])
    if usual > 0 and rates[0] < threshold * usual:
        return Slowness("step rate", rates[0], usual)
    ratios = [_mean_ratio(samples, edges[k + 1], edges[k]) for k in range(len(edges) - 1)]
    earlier = [r for r in ratios[1:] if r is not None]
    if ratios[0] is not None and len(earlier) >= 2:
        usual = statistics.median(earlier)
        if usual > 0 and ratios[0] < threshold * usual:
            return Slowness("hardware ratio", ratios[0], usual)
    return None


def _mean_ratio(samples: Sequence[Sample], start: float, end: float) -> float | None:
    values = [
        s.hardware_ratio for s in samples if start < s.time <= end and s.hardware_ratio is not None
    ]
    return statistics.fmean(values) if values else None
