"""The Python client of the gpuyard REST API, used by the CLI and by users' own scripts.

    from gpuyard.client import Client
    client = Client()                      # finds the server and token like the CLI does
    job = client.submit({"command": "python train.py", "resources": {"gpus": 1}})
    client.wait(job.id)

Errors arrive as the same classes the server raised (:mod:`gpuyard.errors`).
"""

from gpuyard.client.datasets import DatasetsClient
from gpuyard.client.http import (
    Client,
    ServiceNotReady,
    discover_token,
    discover_url,
    store_token,
)
from gpuyard.errors import (
    Conflict,
    GpuyardError,
    IllegalTransition,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    ServerUnavailable,
    Unauthenticated,
)

__all__ = [
    "Client",
    "Conflict",
    "DatasetsClient",
    "GpuyardError",
    "IllegalTransition",
    "InvalidSpec",
    "NotFound",
    "PermissionDenied",
    "ServerUnavailable",
    "ServiceNotReady",
    "Unauthenticated",
    "discover_token",
    "discover_url",
    "store_token",
]
