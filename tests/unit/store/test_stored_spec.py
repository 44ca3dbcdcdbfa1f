"""A job row's typed spec: validated once per version, never another job's or store's model."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from gpuyard.models.job import JobSpec, JobType
from gpuyard.store.tables import JobRow


def _stored(**fields: object) -> dict[str, object]:
    given = fields or {"command": "python train.py"}
    return JobSpec.model_validate(given).model_dump(mode="json")


def test_the_model_is_made_once_per_version() -> None:
    spec = _stored(command="python train.py", graceful_shutdown=12)
    first = JobRow(id=9001, version=4, spec=spec).job_spec()
    again = JobRow(id=9001, version=4, spec=copy.deepcopy(spec)).job_spec()
    assert again is first
    assert first.graceful_shutdown == 12


def test_a_different_stored_value_gets_its_own_model() -> None:
    """Same id and version, another value (another store, say): never the other's model."""
    JobRow(
        id=9002, version=0, spec=_stored(type="batch", tasks=[{"command": "a"}, {"command": "b"}])
    ).job_spec()
    other = JobRow(id=9002, version=0, spec=_stored()).job_spec()
    assert other.type is JobType.REGULAR


def test_grace_is_the_specs_or_the_fields_default() -> None:
    assert (
        JobRow(
            id=9003, version=0, spec=_stored(command="python train.py", graceful_shutdown=5)
        ).grace()
        == 5.0
    )
    assert JobRow(id=9004, version=0, spec=_stored()).grace() == 30.0
    # A stored spec that no longer loads: the field's default, and no model.
    broken = JobRow(id=9005, version=0, spec={"command": "x", "gone": True})
    assert broken.grace() == 30.0
    assert broken.loaded_spec() is None
    with pytest.raises(ValidationError):
        broken.job_spec()
