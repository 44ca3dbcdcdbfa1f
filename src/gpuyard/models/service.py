"""Interactive jobs: a job that serves a web page through the pool's proxy (docs/interactive.md).

A notebook (JupyterLab) or a TensorBoard is an ordinary job (queued, prioritised, under quotas,
in its image when it has one) whose spec carries a :class:`Service`. Its one worker listens on
the port the pool gave its slot, on its node's address, under the path prefix
``/proxy/<job id>/`` that the pool's server forwards to it; the pure rules of that are here:
the command each kind runs when the spec gives none (:func:`default_command`), the prefix
(:func:`proxy_prefix`), and what a development environment made from another job keeps of it
(:func:`environment_overrides`).
"""

from __future__ import annotations

import hmac
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpuyard.models.ids import Id

__all__ = [
    "JOB_TOKEN_PREFIX",
    "MAX_SOURCES",
    "PATH_VARIABLE",
    "PORT_VARIABLE",
    "PREFIX_VARIABLE",
    "IdleAction",
    "SecretUse",
    "Service",
    "ServiceKind",
    "ServiceState",
    "ServiceView",
    "default_command",
    "environment_overrides",
    "notebook_token",
    "proxy_prefix",
    "service_secret",
    "source_mount",
]

MAX_SOURCES = 32
"""Jobs one TensorBoard may show."""

PORT_VARIABLE = "GPUYARD_SERVICE_PORT"
"""The port the service must listen on (its node's address: ``GPUYARD_NODE_ADDRESS``)."""
PREFIX_VARIABLE = "GPUYARD_SERVICE_PREFIX"
"""The path every URL of the service starts with (``/proxy/<id>/``); the proxy keeps it."""
PATH_VARIABLE = "GPUYARD_SERVICE_PATH"
"""The same without its trailing slash (TensorBoard's ``--path_prefix`` wants it so)."""


class ServiceKind(StrEnum):
    """What an interactive job serves."""

    NOTEBOOK = "notebook"
    """JupyterLab, in the job's environment: a shell as its owner, so only its owner enters."""
    TENSORBOARD = "tensorboard"
    """TensorBoard over the outputs of the jobs it names (or its own outputs)."""


class IdleAction(StrEnum):
    """What the pool does to an interactive job left idle past its timeout."""

    SUSPEND = "suspend"
    """Suspend and hold it, its files kept: opening it again through the proxy resumes it
    (queued like any job)."""
    STOP = "stop"
    """Stop it; its files are kept."""


class ServiceState(StrEnum):
    """Where an interactive job's service stands, as ``GET /jobs/{id}/service`` says."""

    WAITING = "waiting"
    """The job has not started (queued, held, pulling its image)."""
    STARTING = "starting"
    """Its worker runs, but the service does not answer yet (the readiness probe failed)."""
    READY = "ready"
    """The service answered the readiness probe: the proxy forwards to it."""
    ENDED = "ended"
    """The job has ended: nothing serves any more."""


class Service(BaseModel):
    """A spec's ``service``: what the job serves through the proxy."""

    model_config = ConfigDict(extra="forbid")

    kind: ServiceKind = Field(description="notebook (JupyterLab) or tensorboard.")
    jobs: list[Id] = Field(
        default_factory=list,
        max_length=MAX_SOURCES,
        description="tensorboard: the jobs whose outputs it shows (each mounted read-only at "
        "workspace/model/job-<id>); none: its own outputs.",
    )


class ServiceView(BaseModel):
    """Whether an interactive job's service can be opened, and where."""

    job_id: int
    kind: ServiceKind
    state: ServiceState
    path: str = Field(description="Where the pool serves it: /proxy/<id>/ (JupyterLab: lab).")
    detail: str = Field("", description="Why it is not ready, when it is not.")


JOB_TOKEN_PREFIX = "gyj_"  # noqa: S105 - a prefix, not a secret
"""What a notebook's own API token (``GPUYARD_TOKEN`` in it) starts with."""


class SecretUse(StrEnum):
    """What a secret derived from a job's attempt secret is for: each use its own, so that
    one given away (JupyterLab's, presented by the proxy to whatever listens on the port)
    opens nothing else."""

    JUPYTER = "jupyter"
    API = "api"


def service_secret(attempt_secret: str, use: SecretUse) -> str:
    """The secret of ``use`` derived from a job's attempt secret (HMAC-SHA256)."""
    mac = hmac.new(attempt_secret.encode(), f"gpuyard-service:{use.value}".encode(), "sha256")
    return mac.hexdigest()[:40]


def notebook_token(job_id: int, attempt_secret: str) -> str:
    """The API token a notebook's code signs in with as its owner (``gpuyard submit`` and the
    client work inside it): the job's id and a secret derived from its attempt's, so it is
    valid while that attempt runs and never after
    (:meth:`gpuyard.services.auth.TokenService.signed_in`)."""
    return f"{JOB_TOKEN_PREFIX}{job_id}_{service_secret(attempt_secret, SecretUse.API)}"


def proxy_prefix(job_id: int) -> str:
    """The path prefix of job ``job_id``'s service, the same in the proxy and the service."""
    return f"/proxy/{job_id}/"


def source_mount(job_id: int) -> str:
    """The name of the mount (under ``workspace/model``) of a TensorBoard's source job."""
    return f"job-{job_id}"


def default_command(service: Service) -> str:
    """The command a service job runs when its spec gives none. It listens on the node's
    address and the slot's port, under the proxy's prefix, so that the proxy's paths are its
    own (nothing is stripped). Its token comes in the environment (JupyterLab's
    ``JUPYTER_TOKEN``), never in a command line others can read in ``ps``."""
    listen = f"--port=${PORT_VARIABLE}"
    if service.kind is ServiceKind.NOTEBOOK:
        return (
            f"jupyter lab --no-browser --ip=$GPUYARD_NODE_ADDRESS {listen} "
            f"--ServerApp.base_url=${PREFIX_VARIABLE} --ServerApp.allow_remote_access=True "
            "--ServerApp.root_dir=$GPUYARD_OUTPUT_DIR --allow-root"
        )
    if service.jobs:
        logdirs = ",".join(
            f"{source_mount(j)}:$GPUYARD_WORKSPACE/model/{source_mount(j)}" for j in service.jobs
        )
        logdir = f"--logdir_spec={logdirs}"
    else:
        logdir = "--logdir=$GPUYARD_OUTPUT_DIR"
    return (
        f"tensorboard {logdir} --host=$GPUYARD_NODE_ADDRESS {listen} "
        f"--path_prefix=${PATH_VARIABLE} --load_fast=false"
    )


def environment_overrides(kind: ServiceKind, name: str) -> dict[str, Any]:
    """What a development environment made from a job (reference 002's "create development
    environment", prefilled from the job) changes in the job's spec: one node, one worker,
    the service's own command; its image, resources, mounts, environment and working directory
    are the job's."""
    return {
        "name": name,
        "service": {"kind": kind.value},
        "command": None,
        "type": "regular",
        "tasks": [],
        "mode": "single",
        "nodes": 1,
        "min_nodes": None,
        "parameter_servers": 0,
        "alternatives": [],
        "slurm": None,
        "after": [],
        "hold": False,
        "fault_tolerance": None,
    }
