"""The job form's fields to a spec and back: a clone loses nothing, errors name their field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuyard.models import JobSpec
from gpuyard.web.forms import MOUNT_KINDS, check_form, form_values, spec_data, spec_yaml

RICH = {
    "name": "resnet-ddp",
    "command": "python train.py --lr 0.1",
    "mode": "pytorch",
    "nodes": 4,
    "min_nodes": 2,
    "launcher": "legacy",
    "resources": {"gpus": 2, "cpus": 7.5, "memory": "16Gi"},
    "pool": "a100",
    "exclude_nodes": ["n3", "n4"],
    "priority": "high",
    "access": "read-only",
    "env": {"NCCL_DEBUG": "INFO", "EMPTY": ""},
    "workdir": "/work",
    "mounts": {
        "algorithm": "/code",
        "algorithm_readonly": False,
        "datasets": [
            {"name": "imagenet", "path": "/data/imagenet", "readonly": True},
            {"name": "scratch", "path": "/data/scratch", "readonly": False},
        ],
        "models": [{"name": "bert", "path": "/models/bert"}],
        "volumes": [{"name": "cache", "path": "/cache"}],
        "outputs": "/out",
    },
    "max_runtime": "8h",
    "graceful_shutdown": 90,
    "after": [{"job": 3, "when": "ended"}],
    "hold": True,
    "fault_tolerance": {
        "recovery": "restart",
        "max_restarts": 5,
        "preflight": True,
        "preflight_tries": 2,
        "hang_timeout": "10m",
        "keep_failed": "1h",
        "performance": {"threshold": 0.5, "window": "5m", "action": "reschedule"},
    },
}


def posted(values: dict[str, Any]) -> dict[str, list[str]]:
    """What a browser posts for a form filled with ``values`` (unchanged by the user)."""
    form: dict[str, list[str]] = {}
    for name, value in values.items():
        if name in MOUNT_KINDS:
            form[f"{name}_name"] = [m["name"] for m in value]
            form[f"{name}_path"] = [m["path"] for m in value]
            form[f"{name}_ro"] = [str(i) for i, m in enumerate(value) if m["readonly"]]
        elif name == "alternatives":
            for key in ("gpus", "cpus", "memory"):
                form[f"alt_{key}"] = [str(a[key]) for a in value]
        elif isinstance(value, bool):
            if value:
                form[name] = ["on"]
        else:
            form[name] = [str(value)]
    return form


@pytest.mark.parametrize(
    "spec",
    [
        RICH,
        {"command": "python x.py"},
        {"type": "batch", "tasks": [{"command": "python a.py"}, {"command": "python b.py"}]},
        {
            "command": "mpirun python x.py",
            "mode": "mpi",
            "mpi": "mpich",
            "alternatives": [{"gpus": 1, "cpus": 2, "memory": "4Gi"}, {"gpus": 0}],
        },
        {"command": "python ps.py", "mode": "tensorflow", "nodes": 2, "parameter_servers": 1},
        {"command": "python x.py", "fault_tolerance": {"enabled": False}},
        {"command": "python x.py", "nodes": 2, "exclusive": False},  # shared: false survives
        {"command": "python x.py", "exclusive": True},
    ],
)
def test_a_clone_of_any_spec_submits_the_same_spec(spec: dict[str, Any]) -> None:
    original = JobSpec.model_validate(spec)
    checked = check_form(posted(form_values(original)))
    assert checked.errors == {}
    assert checked.spec == original.model_copy(
        update={"fault_tolerance": original.fault_tolerance}
        if original.fault_tolerance and original.fault_tolerance.enabled
        else {"fault_tolerance": None}
    )


def test_empty_fields_leave_the_spec_defaults() -> None:
    data = spec_data({"command": ["python x.py"], "name": [""], "gpus": [""], "env": [""]})
    assert data == {"type": "regular", "command": "python x.py"}


@pytest.mark.parametrize(
    ("fields", "where", "says"),
    [
        ({"command": ["KEY=1 python x.py"]}, "command", "executable"),
        ({"command": ["python x.py"], "gpus": ["-1"]}, "resources.gpus", "0"),
        ({"command": ["python x.py"], "memory": ["lots"]}, "resources.memory", "size"),
        ({"command": ["python x.py"], "env": ["1BAD=x"]}, "env", "not an environment"),
        (
            {"command": ["python x.py"], "datasets_name": ["d"], "datasets_path": ["rel"]},
            "mounts.datasets.0.path",
            "absolute",
        ),
        (
            {"command": ["python x.py"], "pool": ["a"], "node_names": ["n1"]},
            "pool",
            "not several",
        ),
        ({"command": ["python x.py"], "max_runtime": ["soon"]}, "max_runtime", "duration"),
    ],
)
def test_errors_name_their_field(fields: dict[str, list[str]], where: str, says: str) -> None:
    checked = check_form(fields)
    assert checked.spec is None
    assert where in checked.errors, checked.errors
    assert says in checked.errors[where]


def test_the_yaml_leaves_out_defaults_and_reads_back() -> None:
    spec = JobSpec.model_validate(RICH)
    text = spec_yaml(spec)
    assert "graceful_shutdown: 90" in text and "mpi:" not in text
    assert JobSpec.model_validate(yaml.safe_load(text)) == spec
