"""The HTTP client. Synchronous (httpx), one connection pool per Client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import httpx

from gpuyard.errors import (
    Conflict,
    GpuyardError,
    InvalidSpec,
    ServerUnavailable,
    error_for_code,
)
from gpuyard.models import (
    AuditEntry,
    BulkResult,
    ExecOutcome,
    ExecStatus,
    ExecTarget,
    FaultEntry,
    GroupView,
    IssuedToken,
    JobEvent,
    JobSpec,
    JobStatus,
    JobView,
    LogChunk,
    NodeLabels,
    NodeView,
    Page,
    PoolSettings,
    PoolView,
    Prediction,
    Priority,
    QuotaKind,
    QuotaView,
    SubmittedJobs,
    TokenView,
    UserView,
)
from gpuyard.models.checkpoints import CheckpointList, ResumeFrom
from gpuyard.models.image_catalogue import ImageScope, ImageView, ImageVisibility
from gpuyard.models.job_query import JobQuery
from gpuyard.models.registry_login import RegistryLoginView
from gpuyard.models.service import ServiceState, ServiceView
from gpuyard.models.slurm import SlurmStepView
from gpuyard.models.usage import JobUsage, NodeUsageSeries, PoolUsage, Window
from gpuyard.private_files import write_private
from gpuyard.settings import Settings

if TYPE_CHECKING:
    from gpuyard.client.shell import ShellConnection

__all__ = ["Client", "ServiceNotReady", "discover_token", "discover_url", "store_token"]


class ServiceNotReady(Conflict):
    """An interactive job's service is not ready (yet, or any more): :attr:`view` says why."""

    def __init__(self, view: ServiceView) -> None:
        super().__init__(
            f"job {view.job_id}'s {view.kind.value} is not ready: "
            + (view.detail or view.state.value)
        )
        self.view = view


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


def discover_token(settings: Settings, url: str) -> str | None:
    """The token to send to ``url``: ``GPUYARD_TOKEN``; else the one ``gpuyard login`` stored
    for that URL; else, for the pool this machine's ``gpuyard up`` runs, the owner's token
    (readable only by the user who started it)."""
    if settings.token:
        return settings.token.strip()
    try:
        stored = json.loads(settings.credentials_file.read_text())
        token = stored.get(url.rstrip("/")) if isinstance(stored, dict) else None
        if isinstance(token, str) and token:
            return token
    except (OSError, ValueError):
        pass
    try:
        running = json.loads(settings.server_file.read_text())
        if str(running.get("url", "")).rstrip("/") == url.rstrip("/"):
            return settings.owner_token_file.read_text().strip() or None
    except (OSError, ValueError, AttributeError):
        pass
    return None


def store_token(settings: Settings, url: str, token: str) -> Path:
    """Keep ``token`` for ``url`` in the user's credentials file (0600); return its path."""
    path = settings.credentials_file
    try:
        stored = json.loads(path.read_text())
        if not isinstance(stored, dict):
            stored = {}
    except (OSError, ValueError):
        stored = {}
    stored[url.rstrip("/")] = token
    write_private(path, json.dumps(stored, indent=1))
    return path


class Client:
    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        settings: Settings | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        verify: bool | str = True,
    ) -> None:
        """A client of the server at ``url`` (default: discovered, see :func:`discover_url`),
        signed in with ``token`` (default: :func:`discover_token`). ``verify``: TLS
        verification, or a CA bundle's path (a pool with a self-signed certificate)."""
        settings = settings or Settings()
        self.url = (url or discover_url(settings)).rstrip("/")
        self.token = token or discover_token(settings, self.url)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._verify = verify
        self._http = httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers=headers,
            transport=transport,
            timeout=timeout,
            verify=verify,
        )
        self._me: str | None = None

    @property
    def user(self) -> str:
        """The name of the user this client's token signs in (asked once)."""
        if self._me is None:
            self._me = self.user_info().name
        return self._me

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

    def submit(self, spec: JobSpec | Mapping[str, Any], *, export: str | None = None) -> JobView:
        """Submit a job. ``export``: what it takes from this process's environment, as
        ``gpuyard submit --export`` (``ALL``, ``NONE``, ``NAME,NAME=VALUE``; the spec's own
        ``env`` wins); None, the default: nothing (the spec says all, as it always did)."""
        body = _spec_body(spec)
        if export is not None:
            body["env"] = {**_exported(export), **(body.get("env") or {})}
        return JobView.model_validate(self._request("POST", "/jobs", json=body).json())

    def submit_many(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> list[int]:
        """Submit several jobs in one request, all or none; their ids, in order."""
        body = {"jobs": [_spec_body(s) for s in specs]}
        data = self._request("POST", "/jobs/batch", json=body).json()
        return SubmittedJobs.model_validate(data).ids

    def predict(self, spec: JobSpec | Mapping[str, Any]) -> Prediction:
        """When a job with this spec would start if submitted now; nothing is submitted."""
        response = self._request("POST", "/jobs/predict", json=_spec_body(spec))
        return Prediction.model_validate(response.json())

    def prediction(self, job_id: int) -> Prediction:
        """When a queued job should start, and behind which jobs."""
        response = self._request("GET", f"/jobs/{job_id}/prediction")
        return Prediction.model_validate(response.json())

    def jobs(
        self,
        *,
        status: Sequence[JobStatus | str] = (),
        name: str | None = None,
        owner: str | None = None,
        ids: Sequence[int] = (),
        array: int | None = None,
        active_after: float | None = None,
        created_before: float | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> Page[JobView]:
        wanted = JobQuery(
            name=name or "",
            owner=owner or "",
            ids=tuple(ids),
            array=array,
            active_after=active_after,
            created_before=created_before,
            offset=offset,
            limit=limit,
        )
        params = wanted.params(statuses=[str(s) for s in status])
        data = self._request("GET", "/jobs", params=params).json()
        return Page[JobView].model_validate(data)

    def job(self, job_id: int) -> JobView:
        return JobView.model_validate(self._request("GET", f"/jobs/{job_id}").json())

    def stop(self, job_id: int) -> JobView:
        return JobView.model_validate(self._request("POST", f"/jobs/{job_id}/stop").json())

    def delete(self, job_id: int) -> None:
        self._request("DELETE", f"/jobs/{job_id}")

    def stop_many(self, job_ids: Sequence[int]) -> BulkResult:
        """Stop several jobs in one request; the result says which could not be, and why."""
        data = self._request("POST", "/jobs/stop", json={"ids": list(job_ids)}).json()
        return BulkResult.model_validate(data)

    def hold_many(self, job_ids: Sequence[int], *, held: bool = True) -> BulkResult:
        """Hold (or, ``held=False``, release) several waiting jobs in one request."""
        path = "/jobs/hold" if held else "/jobs/release"
        data = self._request("POST", path, json={"ids": list(job_ids)}).json()
        return BulkResult.model_validate(data)

    def delete_many(self, job_ids: Sequence[int]) -> BulkResult:
        """Delete several ended jobs in one request; the result says which could not be."""
        data = self._request("POST", "/jobs/delete", json={"ids": list(job_ids)}).json()
        return BulkResult.model_validate(data)

    def signal(self, job_id: int, signum: int, *, steps: bool = True) -> JobView:
        """Send a signal to a running job's steps (srun) or, with ``steps=False``, its batch
        shell."""
        body = {"signal": signum, "steps": steps}
        return JobView.model_validate(
            self._request("POST", f"/jobs/{job_id}/signal", json=body).json()
        )

    def suspend(self, job_id: int, *, hold: bool = False) -> JobView:
        """Ask a running job to checkpoint and go back to the queue at its place; with
        ``hold``, keep it held there until :meth:`release` (a pause)."""
        body = {"hold": True} if hold else None
        response = self._request("POST", f"/jobs/{job_id}/suspend", json=body)
        return JobView.model_validate(response.json())

    def change_priority(self, job_id: int, priority: Priority | str) -> JobView:
        """Move a queued or suspended job to another tier (its owner or an admin)."""
        response = self._request("PATCH", f"/jobs/{job_id}", json={"priority": str(priority)})
        return JobView.model_validate(response.json())

    def change_runtime(self, job_id: int, max_runtime: float | str) -> JobView:
        """Set the runtime limit of a job that has not ended (seconds, or 90m, 2h, 1d)."""
        body = {"max_runtime": max_runtime}
        return JobView.model_validate(self._request("PATCH", f"/jobs/{job_id}", json=body).json())

    def clone(self, job_id: int, **overrides: Any) -> JobView:
        response = self._request("POST", f"/jobs/{job_id}/clone", json=overrides or None)
        return JobView.model_validate(response.json())

    def checkpoints(self, job_id: int) -> CheckpointList:
        """The job's complete checkpoints and the step it resumes from (docs/checkpoints.md)."""
        return CheckpointList.model_validate(
            self._request("GET", f"/jobs/{job_id}/checkpoints").json()
        )

    def resume_from(self, job_id: int, step: int | None) -> CheckpointList:
        """Resume the job from complete checkpoint ``step`` (None: the newest); releases it."""
        body = ResumeFrom(step=step).model_dump()
        return CheckpointList.model_validate(
            self._request("POST", f"/jobs/{job_id}/checkpoints/resume", json=body).json()
        )

    def pin_checkpoint(self, job_id: int, step: int, *, pinned: bool = True) -> CheckpointList:
        """Keep a complete step on storage whatever the retention (or let it go again)."""
        answer = self._request(
            "PUT" if pinned else "DELETE", f"/jobs/{job_id}/checkpoints/{step}/pin"
        )
        return CheckpointList.model_validate(answer.json())

    def service(self, job_id: int) -> ServiceView:
        """Where an interactive job serves and whether it is ready (docs/interactive.md)."""
        return ServiceView.model_validate(self._request("GET", f"/jobs/{job_id}/service").json())

    def service_url(self, job_id: int, *, wait: float = 0.0, poll: float = 0.5) -> str:
        """The address of an interactive job's page, once it is ready: waits up to ``wait``
        seconds for that; :class:`ServiceNotReady` (with the service's view) after them."""
        deadline = time.monotonic() + wait
        while True:
            view = self.service(job_id)
            if view.state is ServiceState.READY:
                return self.url.rstrip("/") + view.path
            if view.state is ServiceState.ENDED or time.monotonic() >= deadline:
                raise ServiceNotReady(view)
            time.sleep(poll)

    def events(self, job_id: int, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        data = self._request(
            "GET", f"/jobs/{job_id}/events", params={"after": after, "limit": limit}
        ).json()
        return [JobEvent.model_validate(e) for e in data]

    def slurm_steps(self, job_id: int) -> list[SlurmStepView]:
        """The srun steps of a Slurm batch job's current attempt (sacct's step rows)."""
        data = self._request("GET", f"/jobs/{job_id}/slurm-steps").json()
        return [SlurmStepView.model_validate(s) for s in data]

    def hold(self, job_id: int) -> JobView:
        """Keep a waiting job from starting until :meth:`release`."""
        return JobView.model_validate(self._request("POST", f"/jobs/{job_id}/hold").json())

    def release(self, job_id: int) -> JobView:
        """Let a held job (waiting, suspending or suspended) be placed again: resume it."""
        return JobView.model_validate(self._request("POST", f"/jobs/{job_id}/release").json())

    def faults(self, job_id: int) -> list[FaultEntry]:
        """The job's fault-tolerance log (``gpuyard ft-log``)."""
        data = self._request("GET", f"/jobs/{job_id}/faults").json()
        return [FaultEntry.model_validate(e) for e in data]

    def job_usage(self, job_id: int, *, window: Window | str = Window.REALTIME) -> JobUsage:
        """CPU, memory and GPU use of each of the job's workers over ``window`` (realtime,
        1h, 1d or 7d)."""
        params = {"window": str(window)}
        data = self._request("GET", f"/jobs/{job_id}/usage", params=params).json()
        return JobUsage.model_validate(data)

    # -- gpuyard exec (debugging a job) ---------------------------------------------------

    def exec_status(self, job_id: int) -> ExecStatus:
        """The job's state and each worker of its current attempt (``gpuyard exec JOB
        status``)."""
        return ExecStatus.model_validate(self._request("GET", f"/jobs/{job_id}/exec").json())

    def exec_stop(self, job_id: int, *, hold: float | str | None = None) -> ExecOutcome:
        """Hold a running job: its workers stop, its nodes stay its own for ``hold`` (seconds
        or "30m"); of a held job, stop what ``exec_run`` started."""
        body = _given(hold=hold)
        response = self._request("POST", f"/jobs/{job_id}/exec/stop", json=body)
        return ExecOutcome.model_validate(response.json())

    def exec_start(self, job_id: int) -> ExecOutcome:
        """Run a held job's command again, as its next attempt on the same nodes."""
        response = self._request("POST", f"/jobs/{job_id}/exec/start")
        return ExecOutcome.model_validate(response.json())

    def exec_run(
        self,
        job_id: int,
        command: Sequence[str] = (),
        *,
        target: ExecTarget | str = ExecTarget.COMMAND,
    ) -> ExecOutcome:
        """Run ``command`` (an argv) once on each node of a held job, or with ``target``
        ``task`` the job itself, ``checker`` the node check. Asynchronous: the answer names
        the workers, whose logs hold the output."""
        body = {"command": list(command), "target": str(target)}
        response = self._request("POST", f"/jobs/{job_id}/exec/run", json=body)
        return ExecOutcome.model_validate(response.json())

    def exec_kill(self, job_id: int, ranks: Sequence[int]) -> ExecOutcome:
        """SIGKILL these workers of a held job."""
        body = {"ranks": list(ranks)}
        response = self._request("POST", f"/jobs/{job_id}/exec/kill", json=body)
        return ExecOutcome.model_validate(response.json())

    def open_shell(
        self, job_id: int, *, worker: int = 0, rows: int = 24, cols: int = 80
    ) -> ShellConnection:
        """An interactive shell in the context of worker ``worker`` of a held job (its node,
        account, environment, working directory, limits), on a terminal of ``rows`` x
        ``cols``. Leaving (``close``) kills it; :meth:`ShellConnection.recv` raises
        :class:`~gpuyard.client.shell.ShellEnded` with its exit code once it has exited."""
        from gpuyard.client.shell import ShellConnection

        query = urlencode({"worker": worker, "rows": rows, "cols": cols})
        url = f"{self.url}/api/v1/jobs/{job_id}/exec/shell?{query}"
        return ShellConnection.open(url, token=self.token, verify=self._verify)

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

    def node(self, name: str) -> NodeView:
        """One node, with every finding of its latest health inspection."""
        return NodeView.model_validate(self._request("GET", f"/nodes/{name}").json())

    def node_usage(self, name: str, *, window: Window | str = Window.REALTIME) -> NodeUsageSeries:
        """CPU, memory and GPU use of a node over ``window`` (realtime, 1h, 1d or 7d)."""
        params = {"window": str(window)}
        data = self._request("GET", f"/nodes/{name}/usage", params=params).json()
        return NodeUsageSeries.model_validate(data)

    def usage(self, *, limit: int = 20) -> PoolUsage:
        """The pool now (``gpuyard top``): each node's latest figures and the running jobs you
        may view, busiest first."""
        data = self._request("GET", "/usage", params={"limit": limit}).json()
        return PoolUsage.model_validate(data)

    def health(self) -> dict[str, Any]:
        """The server's health report; ``status`` is "stalled" (HTTP 503) while its
        controller makes no progress, which is an answer, not an error."""
        try:
            response = self._http.request("GET", "/health")
        except httpx.TransportError as exc:
            raise ServerUnavailable(
                f"cannot reach the gpuyard server at {self.url}: {exc}. Is `gpuyard up` running?"
            ) from None
        if response.status_code != 503:
            _raise_for_error(response)
        data: dict[str, Any] = response.json()
        return data

    def pools(self) -> list[PoolView]:
        return [PoolView.model_validate(p) for p in self._request("GET", "/pools").json()]

    def pool(self, name: str) -> PoolView:
        return PoolView.model_validate(self._request("GET", f"/pools/{name}").json())

    def create_pool(
        self,
        name: str,
        *,
        preemption: str = "never",
        same_zone: bool = False,
        notice: float | str = 60.0,
        grow_after: float | str = 60.0,
        slices: Sequence[float | str] = (),
        age_halflife: float | str | None = None,
        min_run: float | str | None = None,
        allreduce_floor: float | None = None,
        idle_timeout: float | str | None = None,
        description: str = "",
    ) -> PoolView:
        """Declare a pool's policy. ``age_halflife`` and ``min_run`` are seconds, a duration
        ("3h") or ``"off"``; None leaves them to the server's default (on with slices)."""
        body = {
            "name": name,
            "preemption": preemption,
            "same_zone": same_zone,
            "notice": notice,
            "grow_after": grow_after,
            "slices": list(slices),
            **_given(
                age_halflife=age_halflife,
                min_run=min_run,
                allreduce_floor=allreduce_floor,
                idle_timeout=idle_timeout,
            ),
            "description": description,
        }
        return PoolView.model_validate(self._request("POST", "/pools", json=body).json())

    def update_pool(
        self,
        name: str,
        *,
        preemption: str | None = None,
        same_zone: bool | None = None,
        notice: float | str | None = None,
        grow_after: float | str | None = None,
        slices: Sequence[float | str] | None = None,
        age_halflife: float | str | None = None,
        min_run: float | str | None = None,
        allreduce_floor: float | None = None,
        idle_timeout: float | str | None = None,
        description: str | None = None,
    ) -> PoolView:
        """Change the given fields of a pool's policy (a pool known only from node labels
        gets a policy of its own). ``slices=[]`` removes time-slicing;
        ``age_halflife="off"`` and ``min_run="off"`` switch those off; ``allreduce_floor=0``
        removes the floor, ``idle_timeout=0`` the pool's own idle timeout."""
        body = _given(
            preemption=preemption,
            same_zone=same_zone,
            notice=notice,
            grow_after=grow_after,
            slices=None if slices is None else list(slices),
            age_halflife=age_halflife,
            min_run=min_run,
            allreduce_floor=allreduce_floor,
            idle_timeout=idle_timeout,
            description=description,
        )
        return PoolView.model_validate(self._request("PATCH", f"/pools/{name}", json=body).json())

    def node_labels(self, node: str) -> NodeLabels:
        return NodeLabels.model_validate(self._request("GET", f"/nodes/{node}/labels").json())

    def label(
        self, node: str, *, set: Mapping[str, str] | None = None, remove: Sequence[str] = ()
    ) -> NodeLabels:
        """Set and remove admin labels on a node (pool, zone, network, driver, …)."""
        body = {"set": dict(set or {}), "remove": list(remove)}
        response = self._request("PATCH", f"/nodes/{node}/labels", json=body)
        return NodeLabels.model_validate(response.json())

    def cordon(self, node: str, reason: str, *, drain: bool = False) -> NodeView:
        """Keep a node out of scheduling; ``drain`` also suspends the jobs running on it."""
        verb = "drain" if drain else "cordon"
        response = self._request("POST", f"/nodes/{node}/{verb}", json={"reason": reason})
        return NodeView.model_validate(response.json())

    def uncordon(self, node: str) -> NodeView:
        return NodeView.model_validate(self._request("POST", f"/nodes/{node}/uncordon").json())

    def remove_node(self, node: str) -> None:
        """Forget a gone node that no job holds (admins): ``gpuyard nodes rm``."""
        self._request("DELETE", f"/nodes/{quote(node, safe='')}")

    # -- accounts -------------------------------------------------------------------------

    def users(self) -> list[UserView]:
        return [UserView.model_validate(u) for u in self._request("GET", "/users").json()]

    def user_info(self, name: str | None = None) -> UserView:
        """A user (default: the one this client's token signs in)."""
        data = self._request("GET", f"/users/{name or 'me'}").json()
        return UserView.model_validate(data)

    def create_user(
        self,
        name: str,
        *,
        group: str = "default",
        role: str = "user",
        share: float = 1.0,
        os_user: str | None = None,
    ) -> UserView:
        body = {"name": name, "group": group, "role": role, "share": share, "os_user": os_user}
        return UserView.model_validate(self._request("POST", "/users", json=body).json())

    def update_user(
        self,
        name: str,
        *,
        group: str | None = None,
        role: str | None = None,
        share: float | None = None,
        os_user: str | None = None,
    ) -> UserView:
        """Change a user (admins); ``os_user=""`` removes its OS account mapping."""
        body = _given(group=group, role=role, share=share, os_user=os_user)
        return UserView.model_validate(self._request("PATCH", f"/users/{name}", json=body).json())

    # -- images -----------------------------------------------------------------------------

    def images(
        self, *, scope: ImageScope | str | None = None, accelerator: str | None = None
    ) -> list[ImageView]:
        """The catalogue's images you may see (docs/images.md)."""
        params = {k: str(v) for k, v in (("scope", scope), ("accelerator", accelerator)) if v}
        found = self._request("GET", "/images", params=params).json()
        return [ImageView.model_validate(i) for i in found]

    def image(self, name: str) -> ImageView:
        return ImageView.model_validate(self._request("GET", _image_path(name)).json())

    def push_image(
        self,
        archive: Path,
        name: str,
        *,
        scope: ImageScope | str = ImageScope.TRAINING,
        accelerator: str = "",
        description: str = "",
        visibility: ImageVisibility | str | None = None,
        timeout: float = 3600.0,
    ) -> ImageView:
        """Push ``archive`` (an OCI layout tar, OCI archive or ``docker save`` tar) as
        ``name``; it is streamed from disk, never read whole."""
        params = {"name": name, "scope": str(scope), "accelerator": accelerator}
        params["description"] = description
        if visibility:
            params["visibility"] = str(visibility)
        headers = {"Content-Type": "application/octet-stream"}
        headers["Content-Length"] = str(archive.stat().st_size)
        response = self._request(
            "POST",
            "/images",
            params=params,
            content=_file_chunks(archive),
            headers=headers,
            timeout=timeout,
        )
        return ImageView.model_validate(response.json())

    def copy_image(
        self,
        source: str,
        name: str,
        *,
        scope: ImageScope | str = ImageScope.TRAINING,
        accelerator: str = "",
        description: str = "",
        visibility: ImageVisibility | str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 3600.0,
    ) -> ImageView:
        """Push ``source`` (HOST/REPO:TAG of a registry the pool copies from) as ``name``;
        ``username``/``password`` are that registry's, used for this copy only."""
        body: dict[str, str | None] = {"source": source, "name": name, "scope": str(scope)}
        body["accelerator"] = accelerator
        body |= {"description": description, "username": username, "password": password}
        if visibility:
            body["visibility"] = str(visibility)
        response = self._request("POST", "/images/copy", json=body, timeout=timeout)
        return ImageView.model_validate(response.json())

    def share_image(self, name: str, visibility: ImageVisibility | str) -> ImageView:
        body = {"visibility": str(visibility)}
        response = self._request("POST", _image_path(name) + "/share", json=body)
        return ImageView.model_validate(response.json())

    def delete_image(self, name: str) -> None:
        self._request("DELETE", _image_path(name))

    def registry_logins(self) -> list[RegistryLoginView]:
        """Your saved logins at the registries the pool copies images from (no passwords)."""
        found = self._request("GET", "/registry-logins").json()
        return [RegistryLoginView.model_validate(item) for item in found]

    def save_registry_login(self, host: str, *, username: str, password: str) -> RegistryLoginView:
        """Save your login at ``host`` (HOST[:PORT], a registry the pool copies from); the
        registry checks it first. A copy from ``host`` without credentials then uses it."""
        body = {"username": username, "password": password}
        response = self._request("PUT", _login_path(host), json=body)
        return RegistryLoginView.model_validate(response.json())

    def delete_registry_login(self, host: str) -> None:
        """Forget your login at ``host``."""
        self._request("DELETE", _login_path(host))

    # -- accounts ---------------------------------------------------------------------------

    def groups(self) -> list[GroupView]:
        return [GroupView.model_validate(g) for g in self._request("GET", "/groups").json()]

    def group(self, name: str) -> GroupView:
        return GroupView.model_validate(self._request("GET", f"/groups/{name}").json())

    def create_group(self, name: str, *, urgent_limit: int | None = None) -> GroupView:
        body = {"name": name, "urgent_limit": urgent_limit}
        return GroupView.model_validate(self._request("POST", "/groups", json=body).json())

    def set_urgent_limit(self, name: str, limit: int | None) -> GroupView:
        """Set a group's limit on running + queued urgent jobs; None removes it."""
        response = self._request("PATCH", f"/groups/{name}", json={"urgent_limit": limit})
        return GroupView.model_validate(response.json())

    def delete_group(self, name: str) -> None:
        self._request("DELETE", f"/groups/{name}")

    def quotas(
        self, *, kind: QuotaKind | str | None = None, subject: str | None = None
    ) -> list[QuotaView]:
        params = _given(kind=str(kind) if kind else None, subject=subject)
        data = self._request("GET", "/quotas", params=params).json()
        return [QuotaView.model_validate(q) for q in data]

    def set_quota(
        self,
        kind: QuotaKind | str,
        subject: str,
        tier: Priority | str,
        *,
        nodes: int | None = None,
        gpus: int | None = None,
    ) -> QuotaView:
        """Set (or replace) how much a user or group may hold at one tier."""
        body = {"kind": str(kind), "subject": subject, "tier": str(tier)}
        body |= _given(nodes=nodes, gpus=gpus)
        return QuotaView.model_validate(self._request("POST", "/quotas", json=body).json())

    def clear_quota(self, kind: QuotaKind | str, subject: str, tier: Priority | str) -> None:
        self._request("DELETE", f"/quotas/{kind}/{subject}/{tier}")

    # -- tokens, settings, audit ----------------------------------------------------------

    def create_token(
        self, *, user: str | None = None, label: str = "", expires_in: float | str | None = None
    ) -> IssuedToken:
        """A new token (for yourself; admins may name a user); its secret is in the answer
        only."""
        body: dict[str, Any] = _given(user=user, expires_in=expires_in)
        body["label"] = label
        return IssuedToken.model_validate(self._request("POST", "/tokens", json=body).json())

    def tokens(self, *, user: str | None = None) -> list[TokenView]:
        params = _given(of=user)
        data = self._request("GET", "/tokens", params=params).json()
        return [TokenView.model_validate(t) for t in data]

    def revoke_token(self, token_id: int) -> None:
        self._request("DELETE", f"/tokens/{token_id}")

    def pool_settings(self) -> PoolSettings:
        return PoolSettings.model_validate(self._request("GET", "/settings").json())

    def update_pool_settings(self, *, sharing: bool | None = None) -> PoolSettings:
        response = self._request("PATCH", "/settings", json=_given(sharing=sharing))
        return PoolSettings.model_validate(response.json())

    def audit(
        self,
        *,
        after: int = 0,
        limit: int = 100,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
    ) -> list[AuditEntry]:
        params = {
            "after": after,
            "limit": limit,
            **_given(actor=actor, action=action, target=target),
        }
        data = self._request("GET", "/audit", params=params).json()
        return [AuditEntry.model_validate(e) for e in data]


def _exported(export: str) -> dict[str, str]:
    import os

    from gpuyard.env_export import ExportError, exported_environment

    try:
        return exported_environment(os.environ, export)
    except ExportError as exc:
        raise InvalidSpec(str(exc)) from None


def _spec_body(spec: JobSpec | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, JobSpec):
        return spec.model_dump(mode="json", exclude_unset=True)
    return dict(spec)


def _given(**values: Any) -> dict[str, Any]:
    """The arguments that were given (not None)."""
    return {k: v for k, v in values.items() if v is not None}


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


def _login_path(host: str) -> str:
    return "/registry-logins/" + quote(host, safe=":")


def _image_path(name: str) -> str:
    return "/images/" + quote(name, safe="/:@")


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            yield chunk
