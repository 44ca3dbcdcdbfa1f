"""The fault-tolerance settings of a job spec: defaults, bounds, and combinations refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.models import JobSpec
from gpuyard.models.faults import FaultTolerance, Recovery


def spec(**ft: object) -> JobSpec:
    return JobSpec(command="python train.py", fault_tolerance=ft)


def test_defaults_and_a_stored_spec_reads_back() -> None:
    job = spec(max_restarts=2, hang_timeout="2m", preflight=True, preflight_tries=5)
    ft = job.fault_tolerance
    assert ft is not None
    assert (ft.recovery, ft.max_restarts, ft.hang_timeout, ft.preflight_tries) == (
        Recovery.RESUME,
        2,
        120.0,
        5,
    )
    again = JobSpec.model_validate(job.model_dump(mode="json"))
    assert again.fault_tolerance == ft
    assert FaultTolerance(enabled=False).restarts == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"enabled": False, "max_restarts": 2}, "max_restarts only apply with fault tolerance on"),
        ({"preflight_tries": 2}, "set preflight: true"),
        ({"retry_job_errors": True, "detect_exceptions": False}, "needs detect_exceptions"),
        ({"hang_timeout": 1}, "greater than or equal to 10"),
        ({"max_restarts": -1}, "greater than or equal to 0"),
        ({"recovery": "rewind"}, "'resume' or 'restart'"),
        ({"retries": 3}, "Extra inputs are not permitted"),
    ],
)
def test_bad_combinations_get_a_clear_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(**fields)
