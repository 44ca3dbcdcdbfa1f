"""``--overhead``: one value, the artifact's SMALL,LARGE, or a table by job size; each
preemption adds the value of the preempted job's size to its remaining work."""

from __future__ import annotations

import pytest

from gpuyard.errors import InvalidSpec
from gpuyard.simulator import Decision, Engine, Overhead, Partition, Slot, StartJob, TraceJob, View


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # GPUs:        1   2   8   9  64  65 500
        ("1:30,8:40,64:90", [30, 40, 40, 90, 90, 90, 90]),
        ("1:30, 8:40, 64:90", [30, 40, 40, 90, 90, 90, 90]),
        ("40,60", [40, 40, 40, 60, 60, 60, 60]),  # the old form: up to 8 GPUs, above
        ("25", [25, 25, 25, 25, 25, 25, 25]),  # the old form: one value
        ("8:40", [40, 40, 40, 40, 40, 40, 40]),  # beyond the last entry: its value
        ("4:10,64:0.5", [10, 10, 0.5, 0.5, 0.5, 0.5, 0.5]),
    ],
)
def test_the_overhead_table_gives_each_job_size_its_seconds(
    text: str, expected: list[float]
) -> None:
    overhead = Overhead.parse(text)
    assert [overhead.of(g) for g in (1, 2, 8, 9, 64, 65, 500)] == expected


def test_the_default_is_the_artifacts() -> None:
    assert Overhead() == Overhead.parse("40,60") == Overhead.small_large(40, 60)
    assert Overhead().describe() == "40 s up to 8 GPUs, 60 s above"
    assert Overhead.parse("1:30,8:40,64:90").describe() == (
        "30 s up to 1 GPU, 40 s up to 8 GPUs, 90 s up to 64 GPUs"
    )
    assert Overhead.parse("25").describe() == "25 s"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("8:40,4:30", "GPU bounds must rise (4 comes after 8)"),
        ("8:40,8:50", "GPU bounds must rise"),
        ("0:30,8:40", "'0:30' is not GPUS:SECONDS"),
        ("1:30,8", "'8' is not GPUS:SECONDS"),
        ("1.5:30", "'1.5:30' is not GPUS:SECONDS"),
        ("8:-1", "'8:-1' is not GPUS:SECONDS"),
        ("8:nan", "'8:nan' is not GPUS:SECONDS"),
        ("-5", "not a number of seconds (0 or more) or a pair"),
        ("40,60,80", "not a number of seconds (0 or more) or a pair"),
        ("fast", "not a number of seconds"),
        ("", "not a number of seconds"),
    ],
)
def test_a_bad_overhead_says_which_forms_work(text: str, says: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        Overhead.parse(text)
    message = str(raised.value)
    assert message.startswith(f"--overhead {text!r}: ")
    assert says in message
    assert "1:30,8:40,64:90" in message and "40,60" in message


def test_a_preempted_job_pays_the_tables_value_for_its_size() -> None:
    partition = Partition.uniform("c", nodes=2, gpus_per_node=8)
    placements = {0: (Slot(0, 1),), 1: (Slot(0, 4),), 2: (Slot(1, 8),)}

    def plan(view: View) -> Decision:
        if view.now == 0:
            return Decision(starts=[StartJob(i, placements[i]) for i in view.pending], wake_at=5)
        if view.now == 5:
            return Decision(preempts=list(view.running), wake_at=6)
        if view.now == 6:
            return Decision(starts=[StartJob(i, placements[i]) for i in view.pending])
        return Decision()

    class Scripted:
        def decide(self, view: View) -> Decision:
            return plan(view)

    jobs = [TraceJob(str(g), "c", "u", "g", 0, g, 100) for g in (1, 4, 8)]
    overhead = Overhead.parse("1:30,4:40,6:90")
    result = Engine(partition, jobs, Scripted(), overhead=overhead).run()
    # Ran 5 s, then 95 s of work plus the overhead of its size after resuming at 6.
    assert [j.end for j in result.jobs] == [6 + 95 + 30, 6 + 95 + 40, 6 + 95 + 90]
