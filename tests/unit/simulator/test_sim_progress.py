"""Progress while replaying: the engine reports as jobs finish (not in jumps of hundreds), and
where stderr is not a terminal, plain lines come each 5 % and at least every 10 s, with an
ETA."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from gpuyard.cli.main import app
from gpuyard.cli.simulate import PlainProgress
from gpuyard.simulator import Engine, Partition, PolicyContext, TraceJob
from gpuyard.simulator.reference import ReferencePolicy


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_come_each_step_with_elapsed_time_and_eta() -> None:
    clock, lines = Clock(), []
    progress = PlainProgress(67_890, lines.append, clock=clock)
    clock.now += 42
    progress.advance(3_000)  # 4 %: not a step yet, but 42 s since the last line
    assert lines == ["replayed 3,000/67,890 jobs (4 %), elapsed 0:42, ETA 15:08"]
    clock.now += 1
    progress.advance(9_345)  # 18 %: crosses the 5, 10 and 15 % steps: one line
    assert lines[-1] == "replayed 12,345/67,890 jobs (18 %), elapsed 0:43, ETA 3:13"
    clock.now += 1
    progress.advance(10)  # same step, 1 s later: nothing
    assert len(lines) == 2


def test_without_progress_a_line_still_comes_every_ten_seconds() -> None:
    clock, lines = Clock(), []
    progress = PlainProgress(1_000, lines.append, clock=clock)
    progress.tick()
    clock.now += 9.9
    progress.tick()
    assert lines == []
    clock.now += 0.1
    progress.tick()
    assert lines == ["replayed 0/1,000 jobs (0 %), elapsed 0:10, ETA unknown"]
    clock.now += 3600
    progress.advance(10)
    assert lines[-1] == "replayed 10/1,000 jobs (1 %), elapsed 1:00:10, ETA 99:16:30"


def test_the_start_and_the_final_count_get_a_line_each_once() -> None:
    clock, lines = Clock(), []
    progress = PlainProgress(40, lines.append, clock=clock, step=50)
    progress.start()
    assert lines == ["replayed 0/40 jobs (0 %), elapsed 0:00, ETA unknown"]
    clock.now += 5
    progress.advance(30)  # 75 %: crosses the 50 % step
    progress.finish()  # the same count: no second line
    assert lines[1:] == ["replayed 30/40 jobs (75 %), elapsed 0:05, ETA 0:02"]
    clock.now += 1
    progress.advance(5)  # 87 %: no step crossed
    progress.finish()
    assert lines[2:] == ["replayed 35/40 jobs (87 %), elapsed 0:06, ETA 0:01"]
    progress.advance(5)
    progress.finish()
    assert lines[3:] == ["replayed 40/40 jobs (100 %), elapsed 0:06"]


def test_the_engine_reports_each_completion_and_all_jobs_at_the_end() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)
    # Four jobs fill the node at 0; three end at 10, when the fifth starts; the fourth ends at
    # 20, the fifth at 30. The last one can never start (it is larger than the cluster).
    jobs = [TraceJob(str(i), "c", "u", "g", 0, 2, 10 if i < 3 else 20) for i in range(5)]
    jobs.append(TraceJob("big", "c", "u", "g", 1, 16, 5))
    seen: list[int] = []
    Engine(
        partition,
        jobs,
        ReferencePolicy(PolicyContext(partition), "fifo"),
        on_progress=seen.append,
    ).run()
    assert seen == [3, 4, 5, 6]  # at 10, 20 and 30; at the end, all of them


def test_a_piped_stderr_gets_plain_progress_lines(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_time,gpus,duration\n" + "".join(f"{i},{i},1,{i + 5}\n" for i in range(20))
    )
    cluster = tmp_path / "c.csv"
    cluster.write_text("gpus_per_node\n2\n")
    args = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o"), "--no-plot"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("replayed ")]
    pattern = r"replayed [\d,]+/20 jobs \(\d+ %\), elapsed \d+:\d\d(, ETA (\d+:\d\d|unknown))?"
    assert all(re.fullmatch(pattern, line) for line in lines[:-1]), lines
    assert lines[0] == "replayed 0/20 jobs (0 %), elapsed 0:00, ETA unknown"
    assert lines[-2].startswith("replayed 20/20 jobs (100 %), elapsed ")
    assert lines[-1].startswith("replayed 20 jobs x 1 policies in ")
    assert len(lines) >= 4  # each 5 % step of 20 jobs that finish at different times
