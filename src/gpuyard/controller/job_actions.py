"""What the controller's job handlers ask of the lifecycle that owns them.

:class:`~gpuyard.controller.hold.Hold`, :class:`~gpuyard.controller.recovery.FaultRecovery`
and :class:`~gpuyard.controller.suspension.Suspender` each take one job a step further, but the
guard on the job's row, the drain of its workers and the next pass belong to
:class:`~gpuyard.controller.lifecycle.Lifecycle`. They reach them through this protocol, one
object (the lifecycle) instead of a callback per action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gpuyard.models import JobState
from gpuyard.store.tables import JobRow, WorkerRow

__all__ = ["JobActions"]


class JobActions(Protocol):
    def fresh(self, session: Any, job: JobRow) -> JobRow | None:
        """The job's row if nobody changed it since ``job`` was read, else None (and the
        next pass looks again)."""
        ...

    def drain(
        self, job: JobRow, state: JobState, workers: list[WorkerRow], *, grace: float | None = None
    ) -> None:
        """Tell live workers to exit (within ``grace`` seconds, default the job's graceful
        period), SIGKILL stragglers, end the job once all exited."""
        ...

    def mark_dirty(self) -> None:
        """Have the loop run a full pass soon: something changed that it must look at."""
        ...

    def account(self, job: JobRow) -> str | None:
        """The OS account the job's workers run as (None: the pool's own user)."""
        ...

    def gpu_devices(self) -> Mapping[str, Sequence[str]]:
        """Each node's GPU devices, as the executor reports them."""
        ...
