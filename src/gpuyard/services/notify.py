"""How services tell the controller that something changed, so it looks soon."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Notify", "nobody"]


class Notify(Protocol):
    def __call__(self, job_id: int | None = None) -> None:
        """``job_id`` changed (stopped, suspended, re-prioritized); None: the queue or the
        pool changed (a submission, a quota, a label), so scheduling should run again."""
        ...


def nobody(job_id: int | None = None) -> None:
    """A Notify for services that run without a controller (tests, one-off tools)."""
