"""The viewer of a response: the rule of :mod:`gpuyard.models.disclosure` with the store's facts.

A :class:`Viewer` is made once per request, inside its read (the caller's role and group as
the store has them now, the sharing switch), and then answers, for any job ids the response
would name, which it may see. Services ask it before they name jobs that are not the subject
of the request (the jobs on a node, those a prediction waits for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.models.access import ANONYMOUS, Access, Caller
from gpuyard.models.disclosure import (
    Disclosed,
    JobFacts,
    disclose,
    job_ids_in,
    may_see,
    redact,
)
from gpuyard.services.auth import Policy
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow

__all__ = ["POOL_ITSELF", "Viewer", "disclosed_errors"]

POOL_ITSELF = Caller("gpuyard pool", admin=True)
"""The pool's own view, for callers inside the server (no user asked)."""


@dataclass
class Viewer:
    """Who is looking (``caller``), and the jobs whose visibility is already known."""

    caller: Caller
    sharing: bool
    _known: dict[int, bool] = field(default_factory=dict)

    @classmethod
    def of(cls, session: Session, policy: Policy | None, actor: str | None) -> Viewer:
        """``actor`` as the store has it now (an empty name: nobody signed in, sees nothing);
        ``None``: the pool itself (the controller, its tests), which sees every job."""
        if actor is None:
            return cls(POOL_ITSELF, sharing=True)
        if policy is None:
            raise ValueError("a viewer that is a user needs the pool's policy")
        return cls(policy.caller(session, actor), policy.sharing(session))

    @property
    def sees_everything(self) -> bool:
        return self.caller.admin

    def learn(self, session: Session, ids: Iterable[int]) -> None:
        """Read the facts of the jobs in ``ids`` not known yet (a job that no longer exists is
        not seen)."""
        wanted = {i for i in ids if i not in self._known}
        if not wanted or self.sees_everything:
            return
        rows = session.execute(
            select(JobRow.id, JobRow.owner, JobRow.group_id, JobRow.access).where(
                JobRow.id.in_(sorted(wanted))
            )
        ).all()
        for job_id, owner, group, access in rows:
            facts = JobFacts(job_id, owner, group, Access(access or Access.NONE.value))
            self._known[job_id] = may_see(self.caller, facts, sharing=self.sharing)
        for job_id in wanted - self._known.keys():
            self._known[job_id] = False

    def sees(self, job_id: int) -> bool:
        """Whether the viewer may be told about ``job_id`` (:meth:`learn` it first)."""
        return self.sees_everything or self._known.get(job_id, False)

    def disclose(self, session: Session, ids: Iterable[int]) -> Disclosed:
        """``ids`` as this viewer may get them: visible ones, and a count of the others."""
        listed = list(ids)
        self.learn(session, listed)
        return disclose(listed, self.sees)

    def redact(self, session: Session, text: str | None) -> str | None:
        """``text`` (a reason) naming only the jobs this viewer may see."""
        if self.sees_everything:
            return text
        self.learn(session, job_ids_in(text))
        return redact(text, self.sees)


def disclosed_errors(
    store: Store, policy: Policy, actor: str | None, recent: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The controller's recent errors (``/health``) as ``actor`` may read them (None: nobody
    signed in, a monitor): an error of a job it may not see keeps its time and the kind of
    error, without the job's id or the message (which may name the job's files); errors of
    the pool as a whole (no job) are everyone's, as they say why the pool stalls."""
    jobs = [e["job"] for e in recent if e.get("job") is not None]
    if not jobs:
        return [dict(e) for e in recent]
    with store.read() as session:
        viewer = (
            Viewer(ANONYMOUS, sharing=False) if actor is None else Viewer.of(session, policy, actor)
        )
        viewer.learn(session, jobs)
    return [
        dict(e)
        if e.get("job") is None or viewer.sees(e["job"])
        else {"time": e.get("time"), "job": None, "error": str(e.get("error", "")).split(":")[0]}
        for e in recent
    ]
