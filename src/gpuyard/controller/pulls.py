"""Pulling a starting job's image on its nodes, as a phase of its own (docs/images.md#pulling).

Before the workers of a job in an image start, each of its nodes is asked to hold the image
(:meth:`Executor.pull_image`). What that takes is shown where the job's other phases are: an
``image`` event ``pulling image <ref> on <node>`` (and the job's reason, in ``gpuyard show``)
before a node downloads it, and ``pulled image … : <size> in <seconds>`` after.

A registry that cannot be reached is a reason to wait, not to fail: the job stays starting
with that reason and is tried again every :data:`RETRY_EVERY` seconds, until the admin's
timeout (``GPUYARD_IMAGE_PULL_TIMEOUT``) has passed since its first refusal; then it fails,
saying so. Anything else that keeps the image from a node (no such image, a layer whose digest
does not match, no room) fails the job at once with its reason.

Pulls run in the launcher's threads (:mod:`gpuyard.controller.launcher`), never in the loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import StaleWrite
from gpuyard.executors.base import Executor, LaunchDeferred, LaunchError
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.image import pinned_digest
from gpuyard.quantities import format_bytes, format_duration
from gpuyard.services.transitions import record_event
from gpuyard.store.engine import Store
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import JobRow, NodeImageRow

__all__ = ["RETRY_EVERY", "ImagePulls", "PullWaiting"]

RETRY_EVERY = 5.0
"""Seconds between tries of a pull whose registry could not be reached."""
ACTOR = Actor.CONTROLLER


class PullWaiting(Exception):
    """The job's image cannot be pulled yet; it stays starting and is tried again."""


@dataclass
class _Waiting:
    since: float
    """When a pull of this attempt was first refused (the timeout counts from there)."""
    reason: str
    retry_at: float


class ImagePulls:
    """The pull phase of starting jobs; see the module docstring."""

    def __init__(self, store: Store, executor: Executor, clock: Clock, *, timeout: float) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.timeout = timeout
        self._waiting: dict[tuple[int, int], _Waiting] = {}
        self._lock = threading.Lock()

    def due(self, job: JobRow) -> bool:
        """Whether the job's launch may be tried now (False while its pull waits to retry)."""
        with self._lock:
            waiting = self._waiting.get((job.id, job.attempt))
        return waiting is None or self.clock.now() >= waiting.retry_at

    def pull(self, job: JobRow, ref: str, nodes: Iterable[str]) -> None:
        """Have every one of ``nodes`` hold the image ``ref``. Raises :class:`PullWaiting`
        while its registry cannot be reached, :class:`LaunchError` (its message the job's
        reason) when the image cannot be had or the wait has lasted past the timeout."""
        cleared = False
        held = list(dict.fromkeys(nodes))
        for node in held:
            cleared = self._pull_on(job, ref, node) or cleared
        self._record_held(ref, held)
        with self._lock:
            waited = self._waiting.pop((job.id, job.attempt), None)
        if waited is not None and not cleared:  # another job pulled it meanwhile
            self._set_reason(job, "")

    def _pull_on(self, job: JobRow, ref: str, node: str) -> bool:
        """Whether ``node`` pulled the image now (and said so), rather than had it."""
        began: list[float] = []

        def pulling() -> None:
            began.append(time.monotonic())
            self._note(job, f"pulling image {ref} on {node}")

        try:
            pulled = self.executor.pull_image(node, ref, pulling=pulling)
        except LaunchDeferred as exc:
            self._wait(job, str(exc))
        if not pulled:
            return False
        took = time.monotonic() - (began[0] if began else time.monotonic())
        self._note(job, _pulled(ref, node, pulled, took), reason="")
        return True

    def _record_held(self, ref: str, nodes: list[str]) -> None:
        """Note that ``nodes`` hold the image, for the scheduler's preference
        (docs/images.md, "Placement"); only nodes not noted yet are written, so that a job
        whose nodes had it already costs one read."""
        digest = pinned_digest(ref)
        if digest is None or not nodes:
            return
        with self.store.read() as session:
            known = set(
                session.scalars(
                    select(NodeImageRow.node).where(
                        NodeImageRow.digest == digest, NodeImageRow.node.in_(nodes)
                    )
                )
            )
        new = [node for node in nodes if node not in known]
        if not new:
            return
        with self.store.write() as session:
            now = self.clock.now()
            for node in new:
                session.merge(NodeImageRow(node=node, digest=digest, at=now))

    def _wait(self, job: JobRow, reason: str) -> NoReturn:
        now = self.clock.now()
        with self._lock:
            for key in [k for k, w in self._waiting.items() if w.retry_at < now - self.timeout]:
                del self._waiting[key]  # jobs stopped while they waited
            waiting = self._waiting.setdefault((job.id, job.attempt), _Waiting(now, "", now))
            waited, news = now - waiting.since, reason != waiting.reason
            waiting.reason, waiting.retry_at = reason, now + RETRY_EVERY
        if waited >= self.timeout:
            with self._lock:
                self._waiting.pop((job.id, job.attempt), None)
            raise LaunchError(
                f"{reason}; gave up after {format_duration(waited)} "
                f"(GPUYARD_IMAGE_PULL_TIMEOUT is {format_duration(self.timeout)})"
            )
        if news:
            left = format_duration(self.timeout - waited)
            self._note(job, f"{reason}; retrying every {RETRY_EVERY:g} s, failing in {left}")
        raise PullWaiting(reason)

    def _note(self, job: JobRow, what: str, *, reason: str | None = None) -> None:
        """An ``image`` event, and the job's reason (``what`` unless given) while it starts."""
        with self.store.write() as session:
            record_event(
                session, job, kind=EventKind.IMAGE, actor=ACTOR, reason=what, time=self.clock.now()
            )
            self._reason_in(session, job, what if reason is None else reason)

    def _set_reason(self, job: JobRow, reason: str) -> None:
        with self.store.write() as session:
            self._reason_in(session, job, reason)

    @staticmethod
    def _reason_in(session: Session, job: JobRow, reason: str) -> None:
        # Stopped meanwhile: the event stays, and the loop sees the change.
        with contextlib.suppress(StaleWrite):
            guarded_update(session, job, reason=reason)


def _pulled(ref: str, node: str, size: int, seconds: float) -> str:
    rate = f" ({size / seconds / 1e6:.0f} MB/s)" if seconds > 0 else ""
    return f"pulled image {ref} on {node}: {format_bytes(size)} in {seconds:.1f} s{rate}"
