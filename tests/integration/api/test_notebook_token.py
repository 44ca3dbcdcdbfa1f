"""A notebook's own API token (``GPUYARD_TOKEN`` inside it, docs/interactive.md): its owner
submits from inside the notebook, while that notebook runs and never after; the token makes no
tokens and signs nothing else in (issue 27, point 4). Both databases, fake executor."""

from __future__ import annotations

import pytest

from gpuyard.client import Client, PermissionDenied, Unauthenticated
from gpuyard.controller.loop import Controller
from gpuyard.launch.service import service_env
from gpuyard.models.service import (
    SecretUse,
    Service,
    ServiceKind,
    notebook_token,
    service_secret,
)
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow
from gpuyard.testing.auth import TokenFor


@pytest.fixture
def ada(api_url: str, token_for: TokenFor) -> Client:
    return Client(api_url, token=token_for("ada"))


def _running(ada: Client, controller: Controller, spec: dict[str, object]) -> int:
    job_id = ada.submit(spec).id
    for _ in range(3):
        controller.tick()
    assert ada.job(job_id).state.value == "running"
    return job_id


def _inside(store: Store, api_url: str, job_id: int) -> Client:
    """The client as the job's code makes it: from the token the launch gave the job."""
    with store.read() as session:
        secret = session.get(JobRow, job_id).token  # type: ignore[union-attr]
    env = service_env(Service(kind=ServiceKind.NOTEBOOK), job_id=job_id, port=1, token=secret)
    assert env["GPUYARD_TOKEN"] == notebook_token(job_id, secret or "")
    return Client(api_url, token=env["GPUYARD_TOKEN"])


def test_a_notebook_submits_as_its_owner_while_it_runs(
    ada: Client, api_url: str, store: Store, controller: Controller
) -> None:
    notebook = _running(ada, controller, {"service": {"kind": "notebook"}})
    inside = _inside(store, api_url, notebook)
    child = inside.submit({"command": "true"})
    assert child.owner == "ada"
    with pytest.raises(PermissionDenied, match="makes no tokens"):
        inside.create_token()
    ada.stop(notebook)
    for _ in range(3):
        controller.tick()
    assert ada.job(notebook).state.value in ("stopped", "stopping")
    with pytest.raises(Unauthenticated, match="not running any more"):
        inside.submit({"command": "true"})


def test_only_a_running_notebooks_own_secret_signs_in(
    ada: Client, api_url: str, store: Store, controller: Controller
) -> None:
    notebook = _running(ada, controller, {"service": {"kind": "notebook"}})
    trainer = _running(ada, controller, {"command": "train"})
    with store.read() as session:
        trainer_secret = session.get(JobRow, trainer).token  # type: ignore[union-attr]
        secret = session.get(JobRow, notebook).token or ""  # type: ignore[union-attr]
    assert Client(api_url, token=notebook_token(notebook, secret)).jobs().items
    for token in (
        f"gyj_{notebook}_{secret}",  # the attempt's own secret
        f"gyj_{notebook}_{service_secret(secret, SecretUse.JUPYTER)}",  # JupyterLab's token
        notebook_token(notebook, "0" * 32),  # a guess
        notebook_token(trainer, trainer_secret or "x"),  # a training job's secret
        "gyj_" + "9" * 30 + "_x",
        "gyj_",
        "gyj_x_y",
    ):
        with pytest.raises(Unauthenticated):
            Client(api_url, token=token).jobs()
