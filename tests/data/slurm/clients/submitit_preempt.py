"""A plain submitit program (no gpuyard import): a Checkpointable callable, preempted by a
higher-QOS job, checkpoints on submitit's signal (USR2), requeues itself with `scontrol
requeue`, resumes from its saved state and returns the result."""

import os
import subprocess
import sys
import time
from pathlib import Path

import submitit


class Counter(submitit.helpers.Checkpointable):
    def __init__(self, progress: str) -> None:
        self.progress = progress
        self.count = 0
        self.starts: list[int] = []  # the count each attempt began at: saved by checkpoint()

    def __call__(self, until: int) -> tuple[int, list[int], str, str]:
        self.starts.append(self.count)
        # The first attempt never finishes by itself: it stops one short of ``until`` and waits
        # for its preemption, however late a loaded machine delivers it; a later attempt ends.
        first = os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
        while self.count < until:
            time.sleep(0.1)
            if first and self.count >= until - 1:
                continue
            self.count += 1
            Path(self.progress).write_text(str(self.count))
        return (
            self.count,
            self.starts,
            os.environ["SLURM_RESTART_COUNT"],
            os.environ["SLURM_JOB_ID"],
        )


def main(folder: str) -> None:
    progress = Path(folder) / "progress"
    executor = submitit.AutoExecutor(folder=folder)
    executor.update_parameters(
        timeout_min=30, nodes=1, tasks_per_node=1, gpus_per_node=2, slurm_qos="low"
    )
    job = executor.submit(Counter(str(progress)), 60)
    while not progress.exists() or int(progress.read_text() or 0) < 10:
        if job.done():
            raise AssertionError(f"the job ended before it was preempted: {job.state}")
        time.sleep(0.2)
    # A job of a higher QOS that needs every node preempts it.
    subprocess.run(
        [
            "sbatch",
            "--qos=high",
            "-N",
            "2",
            "--gpus-per-node=2",
            "-J",
            "urgent",
            "--wrap",
            "sleep 1",
        ],
        check=True,
    )
    count, starts, restarts, job_id = job.result()
    assert count == 60, count
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 10, starts
    assert (restarts, job_id) == ("1", job.job_id), (restarts, job_id, job.job_id)
    print(f"requeue ok: resumed at {starts[1]}")


if __name__ == "__main__":
    main(sys.argv[1])
