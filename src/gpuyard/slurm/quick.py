"""``sbatch``'s quick path: the same submission without loading the client and the models.

Every ``sbatch`` is a process of its own, and most of one is spent importing: httpx, pydantic,
the settings and every model take about a second on a busy 2-core machine, against a few
milliseconds for Slurm's C ``sbatch``. When the pool's address and a token are in the
environment (``GPUYARD_URL``, ``GPUYARD_TOKEN``), this path parses the options and builds the
spec with the same functions (``gpuyard.slurm.sbatch``, standard library only) and posts it
with ``http.client``. Whatever it does not handle (an array, a script on standard input, an
option error, an answer that is not a success) it leaves to the full command
(:func:`gpuyard.slurm.commands.sbatch`), which runs from the start and prints what Slurm
would, so both paths print the same. It never leaves after the pool may have taken the job.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

from gpuyard.slurm import sbatch as build
from gpuyard.slurm.options import OptionError
from gpuyard.spec_limits import DEFAULT_POOL

__all__ = ["sbatch"]

TIMEOUT = 30.0


class _Elsewhere(Exception):
    """Not for the quick path: the full command takes over."""


def sbatch(args: Sequence[str], out: TextIO) -> int | None:
    """Submit like ``sbatch ARGS``; its exit status, or None when the full command must run."""
    url, token = os.environ.get("GPUYARD_URL", ""), os.environ.get("GPUYARD_TOKEN", "")
    parts = urlsplit(url)
    if not token or parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        options, script, name = build.parse(args, _no_stdin)
        if "array" in options.values:
            raise _Elsewhere  # several submissions, withdrawn together if one fails
        pools: list[str] = []
        partition = options.values.get("partition", "").split(",")[0]
        if partition and partition != DEFAULT_POOL:
            pools = [str(p["name"]) for p in _request(url, token, "GET", "/pools")]
        [spec] = build.specs_from_here(options, script, script_name=name, pools=pools)
    except (_Elsewhere, OptionError, OSError, ValueError):
        return None
    job = _submit(url, token, spec)
    if job is None:
        return None
    out.write(f"{job}\n" if "parsable" in options.values else f"Submitted batch job {job}\n")
    return 0


def _no_stdin() -> bytes | None:
    raise _Elsewhere  # read once only, by whichever path keeps it


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https":
        import ssl  # only then: it takes a while to load

        return http.client.HTTPSConnection(
            host, parts.port, timeout=TIMEOUT, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(host, parts.port, timeout=TIMEOUT)


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _request(url: str, token: str, method: str, path: str) -> Any:
    """A read: any failure sends the submission down the full path."""
    connection = _connection(url)
    try:
        base = urlsplit(url).path.rstrip("/")
        connection.request(method, f"{base}/api/v1{path}", headers=_headers(token))
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise _Elsewhere
        return json.loads(body)
    finally:
        connection.close()


def _submit(url: str, token: str, spec: dict[str, Any]) -> int | None:
    """The new job's id; None when the pool did not take it (nothing was created, so the full
    command may try again and word the refusal). Once the request may have reached the pool,
    a failure is reported instead: trying again could submit the job twice."""
    connection = _connection(url)
    try:
        try:
            connection.connect()
        except OSError:
            return None
        base = urlsplit(url).path.rstrip("/")
        body = json.dumps(spec).encode()
        try:
            connection.request("POST", f"{base}/api/v1/jobs", body=body, headers=_headers(token))
            response = connection.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise SystemExit(
                f"sbatch: error: no answer from the pool at {url} ({exc}); the job may have "
                "been submitted: check with squeue before submitting it again"
            ) from None
        if response.status != 201:
            return None
        try:
            return int(json.loads(answer)["id"])
        except (ValueError, KeyError, TypeError):
            raise SystemExit(
                f"sbatch: error: the pool at {url} answered without a job id"
            ) from None
    finally:
        connection.close()
