"""A plain submitit program (no gpuyard import): submit, result, array, failure, cancel."""

import sys
import time

import submitit


def add(a, b):
    import os

    return a + b, os.environ["SLURM_JOB_ID"], os.environ.get("SLURM_ARRAY_TASK_ID")


def fail():
    raise ValueError("boom from the job")


def sleep_long():
    time.sleep(600)


def main(folder: str) -> None:
    executor = submitit.AutoExecutor(folder=folder)
    assert executor.cluster == "slurm", executor.cluster
    executor.update_parameters(timeout_min=5, nodes=1, tasks_per_node=1, cpus_per_task=1)
    job = executor.submit(add, 2, 3)
    value, job_id, task = job.result()
    assert (value, job_id, task) == (5, job.job_id, None), (value, job_id, task, job.job_id)
    print("submit ok")
    jobs = executor.map_array(add, [1, 2, 3], [10, 20, 30])
    results = [j.result() for j in jobs]
    assert [r[0] for r in results] == [11, 22, 33], results
    assert [r[2] for r in results] == ["0", "1", "2"], results
    assert all(j.job_id.startswith(jobs[0].job_id.split("_")[0] + "_") for j in jobs)
    print("array ok")
    failing = executor.submit(fail)
    try:
        failing.result()
    except submitit.core.utils.FailedJobError as exc:
        if "boom from the job" not in str(exc):
            raise AssertionError(f"the job's error is missing: {exc}") from None
        print("failure ok")
    else:
        raise AssertionError("a failing job returned a result")
    slow = executor.submit(sleep_long)
    while slow.state not in ("RUNNING",):
        time.sleep(0.5)
    slow.cancel()
    deadline = time.time() + 60
    while not slow.done() and time.time() < deadline:
        time.sleep(1)
    assert slow.done(), slow.state
    assert slow.state.startswith("CANCELLED"), slow.state
    print("cancel ok")


if __name__ == "__main__":
    main(sys.argv[1])
