"""Which jobs a viewer may be told about: one rule for every answer that names jobs.

A job is named (its id, its name) to a viewer only when the viewer may view the job
(:func:`gpuyard.models.access.decide` with ``Action.VIEW``). Everywhere else a response would
name jobs — the jobs on a node, the jobs a prediction waits for or queues behind, the jobs a
GPU error was attributed to, per-job series in ``/metrics`` — the jobs the viewer may not see
are left out and only *counted*: a viewer learns that the pool is busy (it could tell from
its own job waiting anyway), never which ids or names are someone else's.

Pure: the server's :mod:`gpuyard.services.disclosure` reads the facts in the store and asks
:func:`may_see` and :func:`disclose`; docs/security.md ("What a user can see") tells users.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuyard.models.access import Access, Action, Caller, Verdict, decide, relation_to

__all__ = ["Disclosed", "JobFacts", "disclose", "may_see"]


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the rule needs of a job: whose it is, its group, its access for others."""

    id: int
    owner: str
    group: str = ""
    access: Access = Access.NONE


def may_see(caller: Caller, job: JobFacts, *, sharing: bool) -> bool:
    """Whether ``caller`` may be told that ``job`` exists (its id, its name)."""
    relation = relation_to(caller, job.owner, job.group)
    return decide(relation, Action.VIEW, job.access, sharing=sharing) is Verdict.ALLOW


@dataclass(frozen=True, slots=True)
class Disclosed:
    """Job ids as a viewer gets them: those it may see, in their order, and how many others."""

    shown: tuple[int, ...]
    hidden: int


def disclose(ids: Iterable[int], sees: Callable[[int], bool]) -> Disclosed:
    """``ids`` split by ``sees``: the visible ones keep their order, the rest are counted
    (an id listed twice is counted twice, as it was listed)."""
    shown: list[int] = []
    hidden = 0
    for job_id in ids:
        if sees(job_id):
            shown.append(job_id)
        else:
            hidden += 1
    return Disclosed(tuple(shown), hidden)
