"""Who may do what: every authorization decision of the pool, as one table.

A decision depends on four things only: the caller's role (admin or user, or nobody signed
in), the caller's relation to the job (its owner, a member of the owner's group, anyone
else), the job's *access for others* (docs/accounts.md, 他人访问权限: read-write, read-only or
none) with the pool's sharing switch, and the action. :func:`decide` looks the answer up in
:data:`JOB_MATRIX` (jobs) or :data:`POOL_ACTIONS` (everything else); the server's services
call it inside their transactions, the web UI calls it to hide what is not allowed, and the
tests walk every cell.

The answers:

- ``ALLOW``.
- ``FORBIDDEN`` (403): the caller may see the job but not do this to it. The message says
  what access it has and who may (roles, never names).
- ``HIDDEN`` (404): the caller may not even see the job, and is told exactly what it would be
  told for a job that does not exist, so that no one learns which ids are someone else's.
- ``SIGN_IN`` (401): nobody is signed in.

The matrix of docs/accounts.md, "Others' access to a job", with our actions::

                      read-write  read-only  none
    view (details, events, logs, prediction)   ✓  ✓  ✗
    clone                                      ✓  ✓  ✗
    dev environment, TensorBoard (one's own)   ✓  ✓  ✗   (docs/interactive.md)
    change the runtime                         ✓  ✗  ✗
    change the priority                        ✓  ✗  ✗
    stop (and suspend, which is a kind of stop) ✓  ✗  ✗
    delete                                     ✓  ✗  ✗
    enter (exec run/shell/kill/start)          ✗  ✗  ✗   (403; 404 where it may not view)

The owner and admins may do everything else. *Entering* a job runs code as its owner's OS
account (``gpuyard exec JOB run/shell/kill/start``, terminals): only its owner may, never a
member of its group, whatever access it was given (read-write lets a member stop a job, not
become its owner); admins only where the pool allows it (``GPUYARD_ADMIN_EXEC``, each entry
audited). When an admin turns sharing off, every job's access for others is none, whatever it
was submitted with (and new jobs may only ask for none).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ANONYMOUS",
    "JOB_ACTIONS",
    "JOB_MATRIX",
    "OFFERED_JOB_ACTIONS",
    "POOL_ACTIONS",
    "Access",
    "Action",
    "Caller",
    "Relation",
    "Verdict",
    "decide",
    "effective_access",
    "relation_to",
]


class Access(StrEnum):
    """What the other members of the owner's group may do with a job."""

    READ_WRITE = "read-write"
    READ_ONLY = "read-only"
    NONE = "none"


class Relation(StrEnum):
    """The caller's relation to a job, from the policy's point of view."""

    ADMIN = "admin"
    OWNER = "owner"
    GROUP = "group"
    """A member of the group the job was submitted in, not its owner."""
    OTHER = "other"
    """Signed in, neither owner, admin nor in the job's group."""
    ANONYMOUS = "anonymous"


class Action(StrEnum):
    # Actions on one job.
    VIEW = "view"
    CLONE = "clone"
    DEV_ENVIRONMENT = "dev-environment"
    TENSORBOARD = "tensorboard"
    CHANGE_RUNTIME = "change-runtime"
    CHANGE_PRIORITY = "change-priority"
    STOP = "stop"
    SUSPEND = "suspend"
    DELETE = "delete"
    ENTER = "enter"
    """Run code in the job as its owner's account (exec run/shell/kill/start, terminals)."""
    # Actions on the pool.
    SUBMIT = "submit"
    READ_POOL = "read-pool"
    """Nodes, pools, queue, groups, quotas: what every signed-in user may read."""
    MANAGE_ACCOUNTS = "manage-accounts"
    """Create and change users (roles, OS accounts), groups, quotas."""
    MANAGE_POOL = "manage-pool"
    """Pool policies, node labels, the sharing switch."""
    MANAGE_TOKENS = "manage-tokens"
    """Create and revoke tokens for other users."""
    READ_AUDIT = "read-audit"
    READ_USERS = "read-users"
    """List every user (a user may always read its own record)."""


class Verdict(StrEnum):
    ALLOW = "allow"
    FORBIDDEN = "forbidden"
    HIDDEN = "hidden"
    SIGN_IN = "sign-in"


JOB_ACTIONS = (
    Action.VIEW,
    Action.CLONE,
    Action.DEV_ENVIRONMENT,
    Action.TENSORBOARD,
    Action.CHANGE_RUNTIME,
    Action.CHANGE_PRIORITY,
    Action.STOP,
    Action.SUSPEND,
    Action.DELETE,
    Action.ENTER,
)
JOB_MATRIX_ACTIONS = frozenset(JOB_ACTIONS)
OFFERED_JOB_ACTIONS = tuple(a for a in JOB_ACTIONS if a is not Action.ENTER)
"""The job actions offered in job views' ``allowed`` (entering is its owner's, so it is not
offered to anyone else). A development environment or a TensorBoard made from a job is a job
of the caller's own (``gpuyard notebook --from``, ``gpuyard tensorboard``)."""
_READS = frozenset({Action.VIEW, Action.CLONE, Action.DEV_ENVIRONMENT, Action.TENSORBOARD})

JOB_MATRIX: dict[tuple[Access, Action], Verdict] = {
    (access, action): (
        Verdict.HIDDEN
        if access is Access.NONE
        else Verdict.FORBIDDEN
        if action is Action.ENTER
        else Verdict.ALLOW
        if access is Access.READ_WRITE or action in _READS
        else Verdict.FORBIDDEN
    )
    for access in Access
    for action in JOB_ACTIONS
}
"""(the job's effective access for others, action) -> verdict for a member of its group."""

POOL_ACTIONS: dict[Action, frozenset[Relation]] = {
    Action.SUBMIT: frozenset({Relation.ADMIN, Relation.OTHER}),
    Action.READ_POOL: frozenset({Relation.ADMIN, Relation.OTHER}),
    Action.MANAGE_ACCOUNTS: frozenset({Relation.ADMIN}),
    Action.MANAGE_POOL: frozenset({Relation.ADMIN}),
    Action.MANAGE_TOKENS: frozenset({Relation.ADMIN}),
    Action.READ_AUDIT: frozenset({Relation.ADMIN}),
    Action.READ_USERS: frozenset({Relation.ADMIN}),
}
"""Pool actions -> who may (a plain signed-in user is ``OTHER`` here)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: a signed-in user (its role and group as the store has them now), or
    nobody (``name`` empty)."""

    name: str
    admin: bool = False
    group: str = ""
    group_id: int | None = None
    """The id of its group: what a job's access for others is granted to (a group made
    again under a deleted one's name has another id)."""

    @property
    def signed_in(self) -> bool:
        return bool(self.name)


ANONYMOUS = Caller("")


def relation_to(caller: Caller, owner: str | None, group_id: int | None) -> Relation:
    """The caller's relation to a job of ``owner`` submitted in the group of id ``group_id``
    (``owner`` None: a pool action, not about one job)."""
    if not caller.signed_in:
        return Relation.ANONYMOUS
    if owner is not None and caller.name == owner:
        return Relation.OWNER  # an admin's own job is its own: it enters it as its owner
    if caller.admin:
        return Relation.ADMIN
    if owner is not None and group_id is not None and caller.group_id == group_id:
        return Relation.GROUP
    return Relation.OTHER


def effective_access(access: Access, *, sharing: bool) -> Access:
    """What others may do while the pool's sharing switch is as given."""
    return access if sharing else Access.NONE


def decide(
    relation: Relation,
    action: Action,
    access: Access = Access.NONE,
    *,
    sharing: bool = True,
    admin_enter: bool = False,
) -> Verdict:
    """The verdict for a caller in ``relation`` doing ``action`` (to a job with ``access``
    for others, where the action is on a job). ``admin_enter``: the pool lets admins enter
    jobs (``GPUYARD_ADMIN_EXEC``)."""
    if relation is Relation.ANONYMOUS:
        return Verdict.SIGN_IN
    if action not in JOB_MATRIX_ACTIONS:
        allowed = POOL_ACTIONS[action]
        who = Relation.ADMIN if relation is Relation.ADMIN else Relation.OTHER
        return Verdict.ALLOW if who in allowed else Verdict.FORBIDDEN
    if relation is Relation.ADMIN and action is Action.ENTER:
        return Verdict.ALLOW if admin_enter else Verdict.FORBIDDEN
    if relation in (Relation.ADMIN, Relation.OWNER):
        return Verdict.ALLOW
    if relation is Relation.OTHER:
        return Verdict.HIDDEN
    return JOB_MATRIX[effective_access(access, sharing=sharing), action]
