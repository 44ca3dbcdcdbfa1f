"""The artifact's "consolidate" placement and queue rules, one table per behaviour."""

from __future__ import annotations

import pytest

from gpuyard.simulator import Engine, Partition, PolicyContext, SimulationError, Slot, TraceJob
from gpuyard.simulator.reference import ReferencePolicy, consolidate

EIGHT = [8, 8, 8, 8]


@pytest.mark.parametrize(
    ("free", "gpus", "expected"),
    [
        # Best fit: the fewest free GPUs that fit; ties go to the lowest index.
        ([8, 3, 5, 3], 2, (Slot(1, 2),)),
        ([8, 3, 5, 3], 4, (Slot(2, 4),)),
        ([8, 3, 5, 3], 8, (Slot(0, 8),)),
        ([7, 7, 7, 7], 8, None),
        # Gangs: gpus // 8 completely free nodes, lowest indices first.
        ([8, 2, 8, 8], 16, (Slot(0, 8), Slot(2, 8))),
        ([8, 7, 7, 8], 24, None),
        # A remainder goes on the next node by free GPUs (descending): another free node...
        ([8, 8, 6, 8], 14, (Slot(0, 8), Slot(1, 6))),
        # ...or else the emptiest partly used node (ties: lowest index), if it fits there.
        ([8, 6, 7, 7], 14, (Slot(0, 8), Slot(2, 6))),
        ([8, 5, 5, 0], 14, None),
        # Never more than the partition's free GPUs in all.
        ([8, 0, 0, 0], 16, None),
    ],
)
def test_consolidate(free: list[int], gpus: int, expected: tuple[Slot, ...] | None) -> None:
    assert consolidate(free, EIGHT, gpus) == expected


def test_gangs_need_nodes_of_one_size() -> None:
    with pytest.raises(SimulationError, match="nodes of one size"):
        consolidate([8, 4], [8, 4], 12)


def job(job_id: str, submit: float, gpus: int, duration: float) -> TraceJob:
    return TraceJob(job_id, "c", "u", "g", submit, gpus, duration)


def replay(order: str, jobs: list[TraceJob], nodes: int = 1) -> dict[str, float | None]:
    partition = Partition.uniform("c", nodes=nodes)
    durations = [j.duration for j in jobs] if order == "sjf" else None
    policy = ReferencePolicy(PolicyContext(partition, durations), order)
    return {j.job_id: j.first_start for j in Engine(partition, jobs, policy).run().jobs}


def test_fifo_blocks_behind_the_first_job_that_does_not_fit() -> None:
    # "big" cannot start until "a" ends; "small" would fit at once but waits behind it.
    starts = replay("fifo", [job("a", 0, 4, 100), job("big", 1, 8, 10), job("small", 2, 1, 5)])
    assert starts == {"a": 0, "big": 100, "small": 110}


def test_sjf_orders_by_duration_and_ties_by_arrival() -> None:
    jobs = [
        job("run", 0, 8, 50),
        job("long", 1, 8, 30),
        job("tie1", 2, 8, 10),
        job("tie2", 2, 8, 10),
        job("short", 3, 8, 5),
    ]
    assert replay("sjf", jobs) == {"run": 0, "short": 50, "tie1": 55, "tie2": 65, "long": 75}


def test_sjf_refuses_to_run_without_the_oracle() -> None:
    with pytest.raises(SimulationError, match="oracle"):
        ReferencePolicy(PolicyContext(Partition.uniform("c", 1)), "sjf")
