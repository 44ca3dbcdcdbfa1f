"""The HTTP client. Synchronous (httpx), one connection pool per Client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from gpuyard.errors import GpuyardError, ServerUnavailable, error_for_code
from gpuyard.models import JobEvent, JobSpec, JobStatus, JobView, LogChunk, NodeView, Page
from gpuyard.settings import Settings

__all__ = ["Client", "discover_url"]

USER_HEADER = "X-Gpuyard-User"


def discover_url(settings: Settings) -> str:
    """``GPUYARD_URL``, else the URL a running ``gpuyard up`` wrote in the home directory."""
    if settings.url:
        return settings.url.rstrip("/")
    try:
        data = json.loads(settings.server_file.read_text())
        return str(data["url"]).rstrip("/")
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        raise ServerUnavailable(
            f"no gpuyard server found: none is recorded in {settings.server_file}. Start one "
            "with `gpuyard up`, or point GPUYARD_URL at a running server."
        ) from None


class Client:
    def __init__(
        self,
        url: str | None = None,
        *,
        user: str | None = None,
        settings: Settings | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        settings = settings or Settings()
        self.url = (url or discover_url(settings)).rstrip("/")
        self.user = user or settings.user
        self._http = httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={USER_HEADER: self.user},
            transport=transport,
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnavailable(
                f"cannot reach the gpuyard server at {self.url}: {exc}. Is `gpuyard up` running?"
            ) from None
        _raise_for_error(response)
        return response

    # -- jobs -----------------------------------------------------------------------------

    def submit(self, spec: JobSpec | Mapping[str, Any]) -> JobView:
        body = (
            spec.model_dump(mode="json", exclude_unset=True)
            if isinstance(spec, JobSpec)
            else dict(spec)
        )
        return JobView.model_validate(self._request("POST", "/jobs", json=body).json())

    def jobs(
        self,
        *,
        status: Sequence[JobStatus | str] = (),
        name: str | None = None,
        owner: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> Page[JobView]:
        params: list[tuple[str, str | int]] = [("offset", offset), ("limit", limit)]
        params += [("status", str(s)) for s in status]
        if name:
            params.append(("name", name))
        if owner:
            params.append(("owner", owner))
        data = self._request("GET", "/jobs", params=params).json()
        return Page[JobView].model_validate(data)

    def job(self, job_id: int) -> JobView:
        return JobView.model_validate(self._request("GET", f"/jobs/{job_id}").json())

    def stop(self, job_id: int) -> JobView:
        return JobView.model_validate(self._request("POST", f"/jobs/{job_id}/stop").json())

    def delete(self, job_id: int) -> None:
        self._request("DELETE", f"/jobs/{job_id}")

    def clone(self, job_id: int, **overrides: Any) -> JobView:
        response = self._request("POST", f"/jobs/{job_id}/clone", json=overrides or None)
        return JobView.model_validate(response.json())

    def events(self, job_id: int, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        data = self._request(
            "GET", f"/jobs/{job_id}/events", params={"after": after, "limit": limit}
        ).json()
        return [JobEvent.model_validate(e) for e in data]

    def logs(
        self,
        job_id: int,
        *,
        worker: int = 0,
        attempt: int | None = None,
        offset: int = 0,
        limit: int = 65536,
    ) -> LogChunk:
        params: dict[str, Any] = {"worker": worker, "offset": offset, "limit": limit}
        if attempt is not None:
            params["attempt"] = attempt
        data = self._request("GET", f"/jobs/{job_id}/logs", params=params).json()
        return LogChunk.model_validate(data)

    def follow_logs(
        self, job_id: int, *, worker: int = 0, attempt: int | None = None, offset: int = 0
    ) -> Iterator[bytes]:
        """The log's bytes as they are written, until the worker ends."""
        params: dict[str, Any] = {"worker": worker, "offset": offset, "follow": "true"}
        if attempt is not None:
            params["attempt"] = attempt
        try:
            with self._http.stream(
                "GET", f"/jobs/{job_id}/logs", params=params, timeout=httpx.Timeout(30, read=None)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for_error(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ServerUnavailable(f"lost the log stream from {self.url}: {exc}") from None

    def wait(self, job_id: int, *, timeout: float | None = None, poll: float = 0.2) -> JobView:
        """Poll until the job has ended; raise TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.status.is_terminal():
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job.status.label} after {timeout}s")
            time.sleep(poll)

    # -- pool -----------------------------------------------------------------------------

    def nodes(self) -> list[NodeView]:
        return [NodeView.model_validate(n) for n in self._request("GET", "/nodes").json()]

    def health(self) -> dict[str, Any]:
        data: dict[str, Any] = self._request("GET", "/health").json()
        return data


def _raise_for_error(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
        detail, code = str(body.get("detail")), str(body.get("code", ""))
        extra = {k: v for k, v in body.items() if k not in ("detail", "code")}
    except (json.JSONDecodeError, AttributeError):
        detail, code, extra = response.text or response.reason_phrase, "", {}
    cls = error_for_code(code) if code else GpuyardError
    raise cls(detail, extra=extra)
