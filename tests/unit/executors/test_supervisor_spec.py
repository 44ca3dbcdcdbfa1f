"""The supervisor reads every field of the spec.json the executor writes, and only those."""

from __future__ import annotations

from gpuyard.executors.local.supervisor import WorkerSpec, loads
from gpuyard.models.workerdir import SupervisorSpec


def test_its_fields_are_the_models() -> None:
    assert set(WorkerSpec.__slots__) == set(SupervisorSpec.model_fields)


def test_it_reads_a_spec_the_executor_wrote_with_every_default() -> None:
    written = SupervisorSpec(
        job=3, attempt=1, rank=2, argv=["true"], env={}, cwd="/", grace=7.5, log="/tmp/log"
    )
    spec = WorkerSpec(loads(written.model_dump_json()))
    assert (spec.job, spec.attempt, spec.rank, spec.grace) == (3, 1, 2, 7.5)
    assert (spec.notify, spec.workspace, spec.job_dir, spec.log_max) == ("", "", "", 0)
    assert spec.files == {} and spec.binds == [] and spec.terminal is False
    assert spec.cgroup is None and spec.account is None and spec.sandbox is None
