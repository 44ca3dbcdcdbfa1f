"""Workload variants: the same trace under another shape, to check that a policy is not tuned
to one trace's numbers (``bench/simulate.py`` replays each).

- :func:`scale_arrivals`: jobs arrive ``rate`` times as fast (``rate`` 1.25: the gaps between
  submissions shrink by 1.25; 0.8: they grow), the jobs themselves unchanged. The load a
  cluster sees scales with it.
- :func:`shrink`: a cluster with a fraction of each node class, the jobs unchanged: how a
  trace from a cluster far larger than its load becomes a contended one (openb's jobs hold
  42 GPUs at the median, 70 at most, of its 6,212).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.cluster import NodeClass, Partition
from gpuyard.simulator.trace import TraceJob

__all__ = ["scale_arrivals", "shrink"]


def scale_arrivals(jobs: Sequence[TraceJob], rate: float) -> list[TraceJob]:
    """Submissions ``rate`` times as fast, measured from the first one; order unchanged."""
    if not math.isfinite(rate) or rate <= 0:
        raise InvalidSpec(f"arrival rate {rate!r}: must be a number above 0")
    if not jobs:
        return []
    origin = min(j.submit for j in jobs)
    return [dataclasses.replace(j, submit=origin + (j.submit - origin) / rate) for j in jobs]


def shrink(partition: Partition, divisor: float) -> Partition:
    """``partition`` with each node class's count divided by ``divisor``, rounded to the
    nearest; classes that round to no node are left out (at least one node of the largest
    class stays). Jobs larger than every node left cannot run there: the caller drops them."""
    if not math.isfinite(divisor) or divisor < 1:
        raise InvalidSpec(f"divisor {divisor!r}: must be a number of 1 or more")
    classes = [NodeClass(c.name, round(c.count / divisor), c.gpus) for c in partition.classes]
    kept = tuple(c for c in classes if c.count > 0)
    if not kept:
        largest = max(partition.classes, key=lambda c: (c.gpus, c.count))
        kept = (NodeClass(largest.name, 1, largest.gpus),)
    return Partition(partition.name, kept)
