"""Who did something, as recorded in a job's event log and the audit trail.

An actor is stored and shown as a plain string: ``user:NAME`` for a person, ``worker:RANK``
for one of a job's workers, or the name of a part of the pool (``controller``, ``scheduler``,
``time-limit``, ``job``, ``inspection``, ``pool``). :class:`Actor` is that string, built in
one place: it is a ``str``, so it goes into columns and JSON unchanged, and writers that take
an ``Actor`` cannot be handed a string put together by hand.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

__all__ = ["ACTOR_FORMS", "Actor", "ActorKind"]


class ActorKind(StrEnum):
    USER = "user"
    """A person, by user name."""
    WORKER = "worker"
    """One of a job's workers, by rank."""
    CONTROLLER = "controller"
    """The controller's loop."""
    SCHEDULER = "scheduler"
    """The scheduler's decisions, applied by the controller."""
    TIME_LIMIT = "time-limit"
    """The signal a job asked for before its time limit."""
    JOB = "job"
    """The job itself (it asked to be requeued)."""
    INSPECTION = "inspection"
    """The node inspection."""
    POOL = "pool"
    """The pool on its own behalf (a token it issued)."""


_NAMED = frozenset({ActorKind.USER.value, ActorKind.WORKER.value})
_KINDS = frozenset(kind.value for kind in ActorKind)


class Actor(str):
    """An actor's string, made by :meth:`user`, :meth:`worker` or one of the constants, or
    read back from its string with :meth:`parse`."""

    __slots__ = ()

    CONTROLLER: ClassVar[Actor]
    SCHEDULER: ClassVar[Actor]
    TIME_LIMIT: ClassVar[Actor]
    JOB: ClassVar[Actor]
    INSPECTION: ClassVar[Actor]
    POOL: ClassVar[Actor]

    @classmethod
    def user(cls, name: str) -> Actor:
        """A person: ``user:NAME``."""
        return cls(f"{ActorKind.USER}:{name}")

    @classmethod
    def worker(cls, rank: int) -> Actor:
        """One of a job's workers: ``worker:RANK``."""
        return cls(f"{ActorKind.WORKER}:{rank}")

    @classmethod
    def parse(cls, text: str) -> Actor:
        """The actor a stored string names; ValueError if it names none."""
        kind, sep, name = text.partition(":")
        named = kind in _NAMED
        if kind not in _KINDS or named != bool(sep) or (named and not name):
            raise ValueError(f"not an actor: {text!r}")
        return cls(text)

    @property
    def kind(self) -> ActorKind:
        """What kind of actor this is."""
        return ActorKind(self.partition(":")[0])

    @property
    def name(self) -> str:
        """The user name or worker rank after ``user:`` or ``worker:`` ("" for the others)."""
        return self.partition(":")[2]


Actor.CONTROLLER = Actor(ActorKind.CONTROLLER.value)
Actor.SCHEDULER = Actor(ActorKind.SCHEDULER.value)
Actor.TIME_LIMIT = Actor(ActorKind.TIME_LIMIT.value)
Actor.JOB = Actor(ActorKind.JOB.value)
Actor.INSPECTION = Actor(ActorKind.INSPECTION.value)
Actor.POOL = Actor(ActorKind.POOL.value)

ACTOR_FORMS = (
    "Who: user:NAME, worker:RANK, "
    + ", ".join(kind.value for kind in ActorKind if kind.value not in _NAMED)
    + "."
)
"""Every form, for a field's description."""
