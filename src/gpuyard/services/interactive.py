"""Interactive jobs' rules (docs/interactive.md): what a TensorBoard may show, who reaches a
service through the proxy, and whether it is ready.

- **At submission** (:meth:`Interactive.resolved`): a TensorBoard that names jobs gets each
  one's outputs mounted read-only at ``workspace/model/job-<id>``; each must be a job its
  submitter may see (the permission matrix's ``tensorboard`` action: read-only access is
  enough), else it is refused as a job that does not exist.
- **Through the proxy** (:meth:`Interactive.target`): only the job's owner. A service's pages
  are served by code its owner controls (the command, the image, the environment) on the pool's
  own address; shown to anyone else, that code would act as them in the web UI. So another
  person who may read a job makes a TensorBoard of their own over it
  (``gpuyard tensorboard JOB``), and nobody but the owner enters a notebook, an admin included
  (an admin stops or suspends it). Anyone else is told the job does not exist, or, if they may
  see it, that only its owner may open it.
- **Readiness** (:meth:`Interactive.view`): a running service is ``ready`` only once it answers
  an HTTP request at its prefix (the proxy's 503 says "starting" until then).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import InvalidSpec, NotFound, PermissionDenied
from gpuyard.models import JobSpec, JobState
from gpuyard.models.access import Action
from gpuyard.models.job import Mount
from gpuyard.models.service import (
    SecretUse,
    ServiceKind,
    ServiceState,
    ServiceView,
    proxy_prefix,
    service_secret,
    source_mount,
)
from gpuyard.services.auth import Policy
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.suspension import set_held
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow

__all__ = ["PROBE_TIMEOUT", "Activity", "Interactive", "ServiceTarget", "open_path"]

TARGET_CACHE_AGE = 2.0
"""Seconds the proxy reuses where a service is without reading the job again (while nothing
changed in this process: writes of other servers sharing the database are seen this late)."""
MAX_CACHED_TARGETS = 10_000
_TARGET_TABLES = ("jobs", "users", "groups", "pool_settings")
LISTENER_TRUST = 5.0
"""Seconds a service's port, once found to be its owner's, is trusted without a look."""
PROBE_TIMEOUT = 2.0
"""Seconds the readiness probe waits for a service's answer."""

_ENDED = {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED}
_SERVICE_KIND = JobRow.spec[("service", "kind")].as_string()


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    """Where the proxy forwards a job's requests, and what it presents there."""

    job_id: int
    kind: ServiceKind
    origin: str
    """``http://address:port`` of the service on its node."""
    token: str
    """JupyterLab's token (``JUPYTER_TOKEN``, derived from the job's attempt secret; none for
    a TensorBoard); the proxy sends it as ``Authorization: token …``, so the browser never
    holds it."""

    @property
    def prefix(self) -> str:
        return proxy_prefix(self.job_id)

    def headers(self) -> dict[str, str]:
        return {"authorization": f"token {self.token}"} if self.token else {}


def open_path(job_id: int, kind: ServiceKind) -> str:
    """The page a person opens: JupyterLab's ``lab`` under the prefix, TensorBoard's root."""
    prefix = proxy_prefix(job_id)
    return prefix + "lab" if kind is ServiceKind.NOTEBOOK else prefix


class Activity:
    """When each job's service was last reached through the proxy (the pool clock's seconds),
    and how many WebSockets are open to it now."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.last: dict[int, float] = {}
        """Any request or WebSocket."""
        self.changed: dict[int, float] = {}
        """A request that changes something (not a GET, HEAD or OPTIONS), or a WebSocket:
        what a notebook's own page does not do on its own (it polls with GETs)."""
        self.open: dict[int, int] = {}

    def touch(self, job_id: int, *, method: str = "POST") -> None:
        now = self.clock.now()
        self.last[job_id] = now
        if method not in ("GET", "HEAD", "OPTIONS"):
            self.changed[job_id] = now

    def forget(self, job_id: int) -> None:
        for seen in (self.last, self.changed, self.open):
            seen.pop(job_id, None)

    @contextlib.contextmanager
    def connected(self, job_id: int) -> Iterator[None]:
        self.open[job_id] = self.open.get(job_id, 0) + 1
        try:
            yield
        finally:
            self.open[job_id] -= 1
            self.touch(job_id)


class Interactive:
    def __init__(
        self,
        store: Store,
        policy: Policy,
        job_dir: Callable[[int], str],
        *,
        clock: Clock,
        programs: str = "",
        notify: Notify = nobody,
    ) -> None:
        self.store = store
        self.clock = clock
        self.notify = notify
        self.activity = Activity(clock)
        """What the proxy saw of each job's service."""
        self.policy = policy
        self.job_dir = job_dir
        """A job's directory on its nodes (its default outputs are ``outputs`` in it)."""
        self.listener: Callable[[str, int], int | None] | None = None
        """The uid listening on an address and port (where the server can tell: its own
        machine's nodes); with :attr:`owner_uid`, a service is reached only while the port
        is its owner's account's."""
        self.owner_uid: Callable[[str], int | None] = lambda _owner: None
        """The uid a user's jobs run as (None: not known here)."""
        self._checked: dict[tuple[int, int], float] = {}
        self._targets: dict[tuple[int, str], tuple[tuple[int, ...], float, ServiceTarget]] = {}
        self.programs = programs
        """The ``PATH`` a service job without an image and without a ``PATH`` of its own
        gets (one made in the web UI, or with ``--export=NONE``): the pool's own programs,
        whose environment has JupyterLab and TensorBoard when it was installed with them."""

    # -- submission -------------------------------------------------------------------------

    def resolved(self, specs: Sequence[JobSpec], *, owner: str) -> list[JobSpec]:
        """``specs`` with each TensorBoard's source jobs mounted read-only."""
        if not any(s.service is not None for s in specs):
            return list(specs)
        return [self._with_path(self._with_sources(spec, owner)) for spec in specs]

    def _with_path(self, spec: JobSpec) -> JobSpec:
        if spec.service is None or spec.image or "PATH" in spec.env or not self.programs:
            return spec
        return spec.model_copy(update={"env": {**spec.env, "PATH": self.programs}})

    def _with_sources(self, spec: JobSpec, owner: str) -> JobSpec:
        if spec.service is None or not spec.service.jobs:
            return spec
        names = {source_mount(j) for j in spec.service.jobs}
        mounts = [m for m in spec.mounts.models if m.name not in names]
        with self.store.read() as session:
            for job_id in dict.fromkeys(spec.service.jobs):
                row = session.get(JobRow, job_id)
                try:
                    self.policy.check_job(session, owner, row, job_id, Action.TENSORBOARD)
                except (NotFound, PermissionDenied):
                    raise InvalidSpec(
                        f"service.jobs: job {job_id} does not exist, or you may not see it; a "
                        "TensorBoard shows only jobs you can see (gpuyard ls)"
                    ) from None
                assert row is not None
                mounts.append(Mount(name=source_mount(job_id), path=self._outputs(row)))
        return spec.model_copy(update={"mounts": spec.mounts.model_copy(update={"models": mounts})})

    def _outputs(self, row: JobRow) -> str:
        """Where ``row``'s workers write their outputs (a batch job's sub-tasks: one folder
        each below it, which TensorBoard shows as runs)."""
        spec = row.job_spec()
        return spec.mounts.outputs or posixpath.join(self.job_dir(row.id), "outputs")

    # -- the proxy ---------------------------------------------------------------------------

    def target(self, job_id: int, *, actor: str) -> ServiceTarget | ServiceView:
        """Where to forward ``actor``'s request to job ``job_id``'s service, or, when it
        cannot be reached yet or any more, its view (the proxy answers 503 with it).
        NotFound for a job that is not ``actor``'s to see or serves nothing,
        PermissionDenied for one it may see but not open (only its owner may)."""
        # Read before the job: a change after it makes the answer cached below a miss.
        generation = self.store.generation(*_TARGET_TABLES)
        with self.store.read() as session:
            row, kind = self._service_row(session, job_id, actor)
            if row.owner != actor:
                raise PermissionDenied(
                    f"job {job_id}'s {kind.value} is its owner's alone: its pages "
                    "run as its owner. Make your own with `gpuyard tensorboard "
                    f"{job_id}` or `gpuyard notebook --from {job_id}`"
                )
            found = self._target(row, kind)
            paused = bool(row.held) and row.state == JobState.SUSPENDED
        if isinstance(found, ServiceView) and paused:
            return self._resume(job_id, actor, found)
        if isinstance(found, ServiceTarget):
            if len(self._targets) >= MAX_CACHED_TARGETS:
                self._targets.clear()
            self._targets[(job_id, actor)] = (generation, self.clock.monotonic(), found)
        return found

    def _service_row(self, session: Session, job_id: int, actor: str) -> tuple[JobRow, ServiceKind]:
        """Job ``job_id``, if ``actor`` may see it and it serves something, and its kind."""
        row = self.policy.check_job(
            session, actor, session.get(JobRow, job_id), job_id, Action.VIEW
        )
        service = row.job_spec().service
        if service is None:
            raise NotFound(f"job {job_id} serves nothing through the proxy")
        return row, service.kind

    def target_cached(self, job_id: int, *, actor: str) -> ServiceTarget | None:
        """:meth:`target`'s answer for a running service, when it needs no database: one
        given in the last :data:`TARGET_CACHE_AGE` seconds while no job or user changed in
        this process. For the proxy's event loop, which must not block."""
        hit = self._targets.get((job_id, actor))
        if hit is None:
            return None
        generation, at, target = hit
        if generation != self.store.generation(*_TARGET_TABLES):
            return None
        if self.clock.monotonic() - at > TARGET_CACHE_AGE:
            return None
        return target

    def _resume(self, job_id: int, actor: str, view: ServiceView) -> ServiceView:
        """Release a suspended, held service (one reclaimed when idle) that its owner opens:
        it is queued again, like any job."""
        with self.store.write() as session:
            row = session.get(JobRow, job_id)
            if row is None or not row.held or row.state != JobState.SUSPENDED:
                return view
            set_held(
                session, row, actor=actor, held=False, now=self.clock.now(), audit=self.policy.audit
            )
        self.notify(job_id)
        return view.model_copy(
            update={
                "detail": f"job {job_id} was suspended; opening it resumed it: it is queued and "
                "serves once it runs again"
            }
        )

    def running_target(self, row: JobRow, kind: ServiceKind) -> ServiceTarget | None:
        """Where ``row``'s service listens, while it runs."""
        found = self._target(row, kind)
        return found if isinstance(found, ServiceTarget) else None

    def _target(self, row: JobRow, kind: ServiceKind) -> ServiceTarget | ServiceView:
        state = JobState(row.state)
        placement = row.placement or []
        if state is not JobState.RUNNING or not placement:
            ended = state in _ENDED
            return ServiceView(
                job_id=row.id,
                kind=kind,
                state=ServiceState.ENDED if ended else ServiceState.WAITING,
                path=open_path(row.id, kind),
                detail=f"job {row.id} is {state.value}"
                + ("" if ended else ": it serves once it runs (gpuyard show)"),
            )
        slot = placement[0]
        foreign = self._foreign_listener(row, slot["address"], int(slot["port"]))
        if foreign:
            return ServiceView(
                job_id=row.id,
                kind=kind,
                state=ServiceState.STARTING,
                path=open_path(row.id, kind),
                detail=foreign,
            )
        return ServiceTarget(
            job_id=row.id,
            kind=kind,
            origin=f"http://{_host(slot['address'])}:{int(slot['port'])}",
            token=service_secret(row.token, SecretUse.JUPYTER)
            if row.token and kind is ServiceKind.NOTEBOOK
            else "",
        )

    def _foreign_listener(self, row: JobRow, address: str, port: int) -> str:
        """Why the proxy must not forward to ``address:port``: another account listens there
        (a process of someone else's that took the port before the service). "" when the
        owner's account does, nothing does yet, or this server cannot tell. A port found to
        be the owner's is trusted for :data:`LISTENER_TRUST` seconds (it cannot change hands
        while its holder listens)."""
        if self.listener is None:
            return ""
        key = (row.id, row.attempt)
        now = self.clock.monotonic()
        if now - self._checked.get(key, -LISTENER_TRUST) < LISTENER_TRUST:
            return ""
        expected, found = self.owner_uid(row.owner), self.listener(address, port)
        if found is None or expected is None or found == expected:
            if found is not None and expected is not None:
                if len(self._checked) >= MAX_CACHED_TARGETS:
                    self._checked.clear()
                self._checked[key] = now
            return ""
        return (
            f"another account's process (uid {found}) listens on job {row.id}'s port "
            f"{address}:{port}, not the job's: the proxy does not forward to it. Stop the job "
            "and start it again (it gets another port)"
        )

    # -- readiness ---------------------------------------------------------------------------

    def view(self, job_id: int, *, actor: str) -> ServiceView:
        """Where job ``job_id`` serves and whether it is ready (a probe, when it runs)."""
        with self.store.read() as session:
            row, kind = self._service_row(session, job_id, actor)
            found = self._target(row, kind)
        if isinstance(found, ServiceView):
            return found
        detail = probe(found)
        return ServiceView(
            job_id=job_id,
            kind=found.kind,
            state=ServiceState.STARTING if detail else ServiceState.READY,
            path=open_path(job_id, found.kind),
            detail=detail,
        )

    def services_of(self, owner: str, *, limit: int = 20) -> list[int]:
        """The ids of ``owner``'s interactive jobs that have not ended, newest first (at most
        ``limit``): a filter on the spec's ``service.kind`` in the database, so a user with
        many queued jobs costs one indexed read."""
        with self.store.read() as session:
            return list(
                session.scalars(
                    select(JobRow.id)
                    .where(
                        JobRow.owner == owner,
                        JobRow.state.not_in(_ENDED),
                        _SERVICE_KIND.is_not(None),
                    )
                    .order_by(JobRow.id.desc())
                    .limit(limit)
                )
            )


def probe(target: ServiceTarget) -> str:
    """ "" when the service answers at its prefix (any status below 500), else why not."""
    try:
        response = httpx.get(
            target.origin + target.prefix, headers=target.headers(), timeout=PROBE_TIMEOUT
        )
    except httpx.HTTPError as exc:
        return f"the {target.kind.value} is starting: it does not answer yet ({type(exc).__name__})"
    if response.status_code >= 500:
        return f"the {target.kind.value} is starting: it answered {response.status_code}"
    return ""


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
