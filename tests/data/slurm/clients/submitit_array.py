"""Unmodified submitit: a map_array of 20 tasks whose logs go to a folder per task
(``folder=".../%j"``), which submitit creates only after ``sbatch`` has returned."""

import sys

import submitit


def square(x):
    return x * x


def main(folder: str) -> None:
    executor = submitit.AutoExecutor(folder=f"{folder}/%j")
    executor.update_parameters(timeout_min=5, nodes=1, tasks_per_node=1, cpus_per_task=1)
    jobs = executor.map_array(square, list(range(20)))
    results = [j.result() for j in jobs]
    assert results == [x * x for x in range(20)], results
    print("map_array ok")


if __name__ == "__main__":
    main(sys.argv[1])
