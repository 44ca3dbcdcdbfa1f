"""The job query: which jobs a list shows, in which order, which page of them.

One model for the three places that list jobs: the API's ``GET /api/v1/jobs`` (and the
Slurm commands through the client), the web UI's job list, and the client that builds the
API's query string. The server turns it into SQL in one place
(:mod:`gpuyard.services.job_search`); each field filters nothing when left empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuyard.models.job import JobMode, Priority
from gpuyard.models.states import JobStatus

__all__ = ["MAX_PAGE", "MAX_WEB_PAGE", "JobQuery", "JobSort"]

MAX_PAGE = 1000
"""The most jobs (or events, or faults) one API request returns; a client pages past it."""
MAX_WEB_PAGE = 200
"""The largest page the web UI's job list renders: a person reads it, and each row is HTML."""


class JobSort(StrEnum):
    """Columns the list sorts by."""

    ID = "id"
    NAME = "name"
    OWNER = "owner"
    STATE = "state"
    PRIORITY = "priority"
    CREATED = "created"
    STARTED = "started"


@dataclass(frozen=True)
class JobQuery:
    """What a job list shows. Empty fields filter nothing; the default order is newest first."""

    statuses: tuple[JobStatus, ...] = ()
    owner: str = ""
    name: str = ""
    """A substring of the name."""
    text: str = ""
    """The web's search box: a substring of the name or a job id (``12``: either; ``#12``:
    the id only)."""
    ids: tuple[int, ...] = ()
    """Only these jobs."""
    array: int | None = None
    """The tasks of this job array (its first task is the array itself)."""
    group: str = ""
    pool: str = ""
    priority: Priority | None = None
    mode: JobMode | None = None
    since: float | None = None
    """Submitted at or after (seconds since the epoch)."""
    until: float | None = None
    """Submitted before."""
    active_after: float | None = None
    """Not ended before (sacct's ``-S``)."""
    created_before: float | None = None
    """Submitted by then (sacct's ``-E``)."""
    sort: JobSort = JobSort.ID
    descending: bool = True
    offset: int = 0
    limit: int = 100

    def page_error(self, largest: int) -> str | None:
        """What is wrong with the page asked for, when pages hold at most ``largest`` jobs."""
        if self.offset < 0 or not 1 <= self.limit <= largest:
            return f"offset must be >= 0 and limit between 1 and {largest}"
        return None

    def params(
        self, *, statuses: Sequence[str] | None = None
    ) -> list[tuple[str, str | int | float]]:
        """The query string of ``GET /api/v1/jobs`` for this query (its fields the API
        filters by). ``statuses``: as the caller spelt them, for the server to parse."""
        params: list[tuple[str, str | int | float]] = [
            ("offset", self.offset),
            ("limit", self.limit),
        ]
        wanted = [str(s) for s in self.statuses] if statuses is None else list(statuses)
        params += [("status", s) for s in wanted]
        params += [("id", i) for i in self.ids]
        if self.array is not None:
            params.append(("array", self.array))
        if self.name:
            params.append(("name", self.name))
        if self.owner:
            params.append(("owner", self.owner))
        if self.active_after is not None:
            params.append(("active_after", self.active_after))
        if self.created_before is not None:
            params.append(("created_before", self.created_before))
        return params
