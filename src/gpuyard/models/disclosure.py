"""Which jobs a viewer may be told about: one rule for every answer that names jobs.

A job is named (its id, its name) to a viewer only when the viewer may view the job
(:func:`gpuyard.models.access.decide` with ``Action.VIEW``). Everywhere else a response would
name jobs — the jobs on a node, the jobs a prediction waits for or queues behind, the jobs a
GPU error was attributed to, per-job series in ``/metrics`` — the jobs the viewer may not see
are left out and only *counted*: a viewer learns that the pool is busy (it could tell from
its own job waiting anyway), never which ids or names are someone else's.

Reasons written in words name jobs too ("suspended to make room for job 7", "waiting for jobs
3, 4 to suspend"): :func:`redact` rewrites each such list with :func:`name_jobs`, the phrase
predictions use ("a job of another user").

Pure: the server's :mod:`gpuyard.services.disclosure` reads the facts in the store and asks
:func:`may_see`, :func:`disclose` and :func:`redact`; docs/security.md ("What a user can see")
tells users.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuyard.models.access import Access, Action, Caller, Verdict, decide, relation_to

__all__ = [
    "HIDDEN_VALUE",
    "Disclosed",
    "JobFacts",
    "disclose",
    "env_for",
    "job_ids_in",
    "may_see",
    "name_jobs",
    "redact",
]

HIDDEN_VALUE = "(hidden: only its owner and admins see the values)"
"""What another viewer reads for each value of a job's ``env``."""

_JOB_LIST = re.compile(r"\bjobs? (\d+(?:, \d+)*)\b")
"""How reasons name jobs: ``job 7``, ``jobs 3, 4``."""


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the rule needs of a job: whose it is, its group (by id), its access for others."""

    id: int
    owner: str
    group_id: int | None = None
    access: Access = Access.NONE


def may_see(caller: Caller, job: JobFacts, *, sharing: bool) -> bool:
    """Whether ``caller`` may be told that ``job`` exists (its id, its name)."""
    relation = relation_to(caller, job.owner, job.group_id)
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


def name_jobs(ids: Iterable[int], hidden: int = 0) -> str:
    """``job 3``, ``jobs 3, 4``, ``jobs 3, 4 and 2 jobs of other users``, ``a job of another
    user``; empty for none."""
    listed = list(ids)
    others = (
        ""
        if not hidden
        else "a job of another user"
        if hidden == 1
        else f"{hidden} jobs of other users"
    )
    if not listed:
        return others
    named = ("jobs " if len(listed) > 1 else "job ") + ", ".join(map(str, listed))
    return f"{named} and {others}" if others else named


def job_ids_in(text: str | None) -> list[int]:
    """The job ids ``text`` names the way reasons do."""
    if not text:
        return []
    return [int(i) for m in _JOB_LIST.finditer(text) for i in m.group(1).split(", ")]


def redact(text: str | None, sees: Callable[[int], bool]) -> str | None:
    """``text`` with each list of jobs naming only those ``sees`` keeps, the others counted."""
    if not text:
        return text

    def one(match: re.Match[str]) -> str:
        found = disclose((int(i) for i in match.group(1).split(", ")), sees)
        return match.group(0) if not found.hidden else name_jobs(found.shown, found.hidden)

    return _JOB_LIST.sub(one, text)


def env_for(caller: Caller, owner: str, env: dict[str, str]) -> dict[str, str]:
    """A job's ``env`` as ``caller`` may read it: whole for its owner and admins; for anyone
    else who may view the job (its group, with its access), the names only. From the CLI
    ``env`` holds the submitting shell's variables (``--export=ALL``), where cloud keys and
    tokens live: a job shared read-only shares its command, not its owner's secrets."""
    if caller.admin or caller.name == owner:
        return env
    return dict.fromkeys(env, HIDDEN_VALUE)
