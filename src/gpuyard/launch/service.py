"""What an interactive job's worker is told beside the contract (docs/interactive.md): where
to listen and under which path, and, for JupyterLab, the token the proxy presents for the
person (never shown to the browser, never on a command line), and the API token its code
signs in with as its owner, valid while it runs."""

from __future__ import annotations

from gpuyard.models.service import (
    PATH_VARIABLE,
    PORT_VARIABLE,
    PREFIX_VARIABLE,
    SecretUse,
    Service,
    ServiceKind,
    notebook_token,
    proxy_prefix,
    service_secret,
)

__all__ = ["service_env"]


def service_env(service: Service, *, job_id: int, port: int, token: str) -> dict[str, str]:
    prefix = proxy_prefix(job_id)
    env = {PORT_VARIABLE: str(port), PREFIX_VARIABLE: prefix, PATH_VARIABLE: prefix.rstrip("/")}
    if service.kind is ServiceKind.NOTEBOOK and token:
        env["JUPYTER_TOKEN"] = service_secret(token, SecretUse.JUPYTER)
        env["GPUYARD_TOKEN"] = notebook_token(job_id, token)  # the client and CLI inside it
    return env
