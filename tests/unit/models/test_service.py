"""Interactive jobs' pure rules (docs/interactive.md): a service spec's defaults and what it
refuses, the commands each kind runs, and what its worker is told."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.launch.service import service_env
from gpuyard.models import JobSpec
from gpuyard.models.command import parse_command
from gpuyard.models.service import (
    SecretUse,
    Service,
    ServiceKind,
    default_command,
    environment_overrides,
    notebook_token,
    proxy_prefix,
    service_secret,
)


def test_a_service_spec_needs_no_command_and_is_named_after_its_kind() -> None:
    spec = JobSpec.model_validate({"service": {"kind": "notebook"}})
    assert spec.command == default_command(Service(kind=ServiceKind.NOTEBOOK))
    assert spec.effective_name() == "notebook"
    given = JobSpec.model_validate({"service": {"kind": "notebook"}, "command": "my-lab --x"})
    assert given.command == "my-lab --x"  # the user's own server, told where to listen


@pytest.mark.parametrize("kind", list(ServiceKind))
def test_each_default_command_follows_the_command_rules_and_listens_where_told(
    kind: ServiceKind,
) -> None:
    jobs = [3, 4] if kind is ServiceKind.TENSORBOARD else []
    command = default_command(Service(kind=kind, jobs=jobs))
    env = {
        "GPUYARD_NODE_ADDRESS": "10.0.0.5",
        "GPUYARD_SERVICE_PORT": "20001",
        "GPUYARD_SERVICE_PREFIX": "/proxy/9/",
        "GPUYARD_SERVICE_PATH": "/proxy/9",
        "GPUYARD_OUTPUT_DIR": "/out",
        "GPUYARD_WORKSPACE": "/ws",
    }
    argv = parse_command(command).render(env)
    assert "--port=20001" in argv
    assert any(a.endswith("10.0.0.5") for a in argv)
    assert any(a.endswith("/proxy/9/") or a.endswith("/proxy/9") for a in argv)
    assert not any("TOKEN" in a for a in argv)  # never on a command line others read in ps
    if kind is ServiceKind.TENSORBOARD:
        assert "--logdir_spec=job-3:/ws/model/job-3,job-4:/ws/model/job-4" in argv


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"nodes": 2}, "one worker"),
        ({"mode": "pytorch"}, "one worker"),
        ({"type": "batch", "tasks": [{"command": "x"}]}, "one worker"),
    ],
)
def test_a_service_is_one_worker(extra: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        JobSpec.model_validate({"service": {"kind": "notebook"}, **extra})


def test_only_a_tensorboard_names_jobs_and_bad_kinds_are_refused() -> None:
    with pytest.raises(ValidationError, match="only a tensorboard"):
        JobSpec.model_validate({"service": {"kind": "notebook", "jobs": [1]}})
    with pytest.raises(ValidationError):
        JobSpec.model_validate({"service": {"kind": "vscode"}})
    with pytest.raises(ValidationError):
        JobSpec.model_validate({"service": {"kind": "tensorboard", "jobs": list(range(1, 40))}})


def test_a_development_environment_of_a_distributed_batch_job_is_one_notebook() -> None:
    source = {
        "type": "batch",
        "tasks": [{"command": "a"}, {"command": "b"}],
        "mode": "pytorch",
        "nodes": 4,
        "min_nodes": 2,
        "resources": {"gpus": 8},
        "image": "official/pytorch:2",
        "hold": True,
    }
    made = JobSpec.model_validate(source | environment_overrides(ServiceKind.NOTEBOOK, "nb"))
    assert (made.nodes, made.mode.value, made.type.value, made.hold) == (
        1,
        "single",
        "regular",
        False,
    )
    assert made.resources.gpus == 8 and made.image == "official/pytorch:2"
    assert made.service is not None and made.service.kind is ServiceKind.NOTEBOOK


def test_the_worker_is_told_its_port_prefix_and_a_notebook_its_tokens() -> None:
    notebook = service_env(Service(kind=ServiceKind.NOTEBOOK), job_id=7, port=20010, token="s3")
    assert notebook == {
        "GPUYARD_SERVICE_PORT": "20010",
        "GPUYARD_SERVICE_PREFIX": proxy_prefix(7),
        "GPUYARD_SERVICE_PATH": "/proxy/7",
        "JUPYTER_TOKEN": service_secret("s3", SecretUse.JUPYTER),
        "GPUYARD_TOKEN": notebook_token(7, "s3"),
    }
    board = service_env(Service(kind=ServiceKind.TENSORBOARD), job_id=7, port=1, token="s3")
    assert "JUPYTER_TOKEN" not in board and "GPUYARD_TOKEN" not in board
    # Each use its own secret: JupyterLab's (which the proxy presents to whatever listens on
    # the port) is not the API token's, and neither is the attempt's own.
    secrets = {"s3", notebook["JUPYTER_TOKEN"], notebook["GPUYARD_TOKEN"].rsplit("_", 1)[1]}
    assert len(secrets) == 3
