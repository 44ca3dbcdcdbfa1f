"""Who may do what: users, groups, quotas, pool policies and node labels, as the API shows them.

Requests (``*Spec``, ``*Update``) check their own shape and say what to fix; the rules that need
the store (does the group exist, is the caller an admin) live in the server's account service.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from gpuyard.models.ids import MAX_INT32
from gpuyard.models.job import Priority
from gpuyard.models.units import Seconds
from gpuyard.quantities import parse_duration

__all__ = [
    "OFF",
    "AuditEntry",
    "GroupSpec",
    "GroupUpdate",
    "GroupView",
    "IssuedToken",
    "JobChange",
    "LabelsUpdate",
    "NodeLabels",
    "PoolPreemption",
    "PoolSettings",
    "PoolSettingsUpdate",
    "PoolSpec",
    "PoolUpdate",
    "PoolView",
    "PriorityChange",
    "QuotaKind",
    "QuotaSpec",
    "QuotaView",
    "Role",
    "SignalRequest",
    "TailSetting",
    "TokenKind",
    "TokenSpec",
    "TokenView",
    "UserSpec",
    "UserUpdate",
    "UserView",
    "check_label",
]

_OS_ACCOUNT = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
_POOL_NAME = re.compile(r"^(?!\.{1,2}$)[\w.-]{1,64}$")
_LABEL_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_./-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[\w.:+/@-]{1,128}$")


def _account_name(value: str, what: str) -> str:
    if not _ACCOUNT_NAME.match(value):
        raise ValueError(
            f"a {what} name is 1-64 letters, digits, '_', '.', '@' or '-', not starting with "
            f"'.', '@' or '-' (got {value!r})"
        )
    return value


def _os_account(value: str) -> str:
    if not _OS_ACCOUNT.match(value) or value == "root":
        raise ValueError(
            f"an OS account is 1-32 lower-case letters, digits, '_' or '-', starting with a "
            f"letter or '_', and not root (got {value!r})"
        )
    return value


def _pool_name(value: str) -> str:
    if not _POOL_NAME.match(value):
        raise ValueError(
            f"a pool name is 1-64 letters, digits, '_', '.' or '-', and not '.' or '..' "
            f"(got {value!r})"
        )
    return value


def check_label(key: str, value: str | None = None) -> None:
    """Raise ValueError, saying what to fix, unless ``key`` (and ``value``) make a node label.
    A ``pool`` label's value must be a pool name, since jobs name it."""
    if not _LABEL_KEY.match(key):
        raise ValueError(
            f"label {key!r}: a label name is a letter, then up to 62 letters, digits, '_', '.', "
            "'/' or '-'"
        )
    if value is None:
        return
    if not _LABEL_VALUE.match(value):
        raise ValueError(
            f"label {key}={value!r}: a value is 1-128 letters, digits or '_ . : + / @ -', "
            "without spaces (to remove a label, name it in `remove`)"
        )
    if key == "pool":
        try:
            _pool_name(value)
        except ValueError as exc:
            raise ValueError(f"label pool={value!r}: {exc}") from None


class Role(StrEnum):
    USER = "user"
    """Submits jobs at the tiers the pool allows users (GPUYARD_USER_TIERS); reads everything."""
    ADMIN = "admin"
    """Also any tier, and manages users, groups, quotas, pools and node labels."""


class QuotaKind(StrEnum):
    USER = "user"
    GROUP = "group"


class PoolPreemption(StrEnum):
    """What a pool lets a higher tier do to lower running jobs (the scheduler's Preemption)."""

    NEVER = "never"
    """Higher tiers only block lower jobs that have not started (docs/scheduling.md)."""
    SUSPEND = "suspend"
    """Higher tiers suspend lower running jobs to take their place (docs/preemption.md)."""


# -- users --------------------------------------------------------------------------------


class UserView(BaseModel):
    name: str
    group: str | None = Field(description="The group whose quotas and urgent limit it shares.")
    role: Role
    share: float = Field(description="Fair-share weight inside a tier (default 1).")
    tiers: list[Priority] = Field(description="The priority tiers this user may choose.")
    os_user: str | None = Field(
        None, description="The OS account its jobs run as, where an admin mapped one."
    )
    created_at: datetime


class UserSpec(BaseModel):
    """A user to create (admins only)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Login name.")
    group: str = Field("default", description="An existing group.")
    role: Role = Field(Role.USER, description="user or admin.")
    share: float = Field(1.0, gt=0, le=1e6, description="Fair-share weight inside a tier.")
    os_user: str | None = Field(
        None,
        description="The OS account the user's jobs run as (default: one the pool makes, "
        "gpy-<name>; docs/security.md).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _account_name(value, "user")

    @field_validator("os_user")
    @classmethod
    def _os_user(cls, value: str | None) -> str | None:
        return None if value is None else _os_account(value)

    @field_validator("group")
    @classmethod
    def _group(cls, value: str) -> str:
        return _account_name(value, "group")


class UserUpdate(BaseModel):
    """Fields of a user to change (admins only); the others stay."""

    model_config = ConfigDict(extra="forbid")

    group: str | None = Field(None, description="Move the user to this existing group.")
    role: Role | None = None
    share: float | None = Field(None, gt=0, le=1e6)
    os_user: str | None = Field(
        None, description='Map the user\'s jobs to this OS account; "" removes the mapping.'
    )

    @field_validator("group")
    @classmethod
    def _group(cls, value: str | None) -> str | None:
        return None if value is None else _account_name(value, "group")

    @field_validator("os_user")
    @classmethod
    def _os_user(cls, value: str | None) -> str | None:
        return value if not value else _os_account(value)

    @model_validator(mode="after")
    def _something(self) -> UserUpdate:
        if "os_user" in self.model_fields_set:
            return self
        if self.group is None and self.role is None and self.share is None:
            raise ValueError("nothing to change: give group, role, share or os_user")
        return self


# -- groups -------------------------------------------------------------------------------


class GroupView(BaseModel):
    name: str
    urgent_limit: int | None = Field(
        description="Most running + queued jobs of the group at the urgent tier; none: no limit."
    )
    urgent_jobs: int = Field(description="Its running + queued jobs at the urgent tier now.")
    members: list[str]
    created_at: datetime


class GroupSpec(BaseModel):
    """A group to create (admins only)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    urgent_limit: int | None = Field(
        None,
        ge=0,
        le=MAX_INT32,
        description="Most running + queued urgent jobs; omit for no limit.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _account_name(value, "group")


class GroupUpdate(BaseModel):
    """``{"urgent_limit": N}`` sets the limit, ``{"urgent_limit": null}`` removes it."""

    model_config = ConfigDict(extra="forbid")

    urgent_limit: int | None = Field(ge=0, le=MAX_INT32)


# -- quotas -------------------------------------------------------------------------------


class QuotaSpec(BaseModel):
    """How much one user or group may hold at one tier (the HAI model: "10 nodes at NORMAL").
    Setting a quota replaces the one of the same subject and tier."""

    model_config = ConfigDict(extra="forbid")

    kind: QuotaKind
    subject: str = Field(description="The user's or group's name.")
    tier: Priority
    nodes: int | None = Field(
        None, ge=0, le=MAX_INT32, description="Most nodes (workers) held at once."
    )
    gpus: int | None = Field(None, ge=0, le=MAX_INT32, description="Most GPUs held at once.")

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        return _account_name(value, "user or group")

    @model_validator(mode="after")
    def _a_limit(self) -> QuotaSpec:
        if self.nodes is None and self.gpus is None:
            raise ValueError(
                "a quota limits nodes and/or gpus; give at least one (to remove a quota, "
                "DELETE /api/v1/quotas/{kind}/{subject}/{tier} or `gpuyard quota clear`)"
            )
        return self


class QuotaView(BaseModel):
    kind: QuotaKind
    subject: str
    tier: Priority
    nodes: int | None
    gpus: int | None
    used_nodes: int = Field(description="Nodes its running jobs at this tier hold now.")
    used_gpus: int = Field(description="GPUs its running jobs at this tier hold now.")


# -- pools --------------------------------------------------------------------------------


def _ascending_slices(value: list[float] | None) -> list[float] | None:
    if value is None:
        return None
    if len(value) > 8:
        raise ValueError(f"slices: at most 8 (got {len(value)})")
    if any(v <= 0 for v in value) or any(b <= a for a, b in itertools.pairwise(value)):
        raise ValueError(
            "slices: GPU-time amounts above zero, each larger than the one before, e.g. "
            "1h,10h,100h (GPU-hours)"
        )
    return value


SLICES_HELP = (
    "Time-slicing: GPU-time of service (1h = one GPU-hour) that splits each tier into bands; "
    "the least served band goes first and, with preemption suspend, may suspend more served "
    "jobs of its tier (docs/scheduling.md). Empty: no slicing."
)


OFF = "off"
"""A tail guard's setting that switches it off."""
MAX_TAIL = 30 * 86400.0
"""The longest half-life or quantum a pool may have: 30 days."""


def _tail_setting(given: Any) -> Any:
    """A tail guard as given: a duration above zero (seconds, or "3h"), or ``off``."""
    value = given
    if isinstance(given, str):
        if given.strip().lower() == OFF:
            return OFF
        try:
            value = parse_duration(given)
        except ValueError as exc:
            raise ValueError(f"{exc}; or off to switch it off (got {given!r})") from None
    if isinstance(value, bool) or (isinstance(value, int | float) and not 0 < value <= MAX_TAIL):
        raise ValueError(
            "a duration above zero and at most 30 days (e.g. 3h, 90m or 5400), or off to "
            f"switch it off (got {given!r})"
        )
    return value


TailSetting = Annotated[float | Literal["off"] | None, BeforeValidator(_tail_setting)]
"""A tail guard of time-slicing: seconds (or a duration such as "3h"), or ``"off"``; None: not
given (a new pool's default; in an update, unchanged)."""

AGE_HALFLIFE_HELP = (
    "Time-slicing's aging: the service a waiting job is ranked by halves for every this long "
    "it has waited in all (or for every stretch as long as it has run, if longer), so that "
    "suspended long jobs come back. A duration (3h) or off."
)
MIN_RUN_HELP = (
    "Time-slicing's quantum: a job of its own tier does not suspend a job before it has run "
    "this long in its current attempt, doubled for each suspension it had (a higher tier is "
    "not held back). A duration (1h) or off."
)
TAIL_DEFAULT = " Default: 3h and 1h where the pool has slices, else off."
TAIL_TURNED_ON = (
    " Giving a pool slices when it had none sets the aging and quantum it lacks to 3h and 1h, "
    "unless the same change gives them."
)


FLOOR_HELP = (
    "GB/s of all-reduce bus bandwidth below which the node check's collective test fails "
    "(docs/fault-tolerance.md); none by default"
)
IDLE_HELP = (
    "Seconds (or 2h) an interactive job of this pool may sit idle before it is reclaimed "
    "(docs/interactive.md); the pool-wide GPUYARD_IDLE_TIMEOUT by default"
)
IDLE_MAX = 30 * 86400.0


class PoolSpec(BaseModel):
    """A pool's policy (admins only). Nodes join a pool by their ``pool`` label; ``default``
    is the pool of nodes without one."""

    model_config = ConfigDict(extra="forbid")

    name: str
    preemption: PoolPreemption = PoolPreemption.NEVER
    same_zone: bool = Field(False, description="Keep each multi-node gang in one `zone`.")
    notice: Seconds = Field(
        60.0, gt=0, le=86400, description="Seconds a preempted job has to checkpoint and exit."
    )
    grow_after: Seconds = Field(
        60.0, ge=0, le=86400, description="Seconds an elastic job runs before it may grow."
    )
    slices: list[Seconds] = Field(default_factory=list, description=SLICES_HELP)
    age_halflife: TailSetting = Field(None, description=AGE_HALFLIFE_HELP + TAIL_DEFAULT)
    min_run: TailSetting = Field(None, description=MIN_RUN_HELP + TAIL_DEFAULT)
    allreduce_floor: float | None = Field(None, gt=0, le=1e5, description=FLOOR_HELP + ".")
    idle_timeout: Seconds | None = Field(None, gt=0, le=IDLE_MAX, description=IDLE_HELP + ".")
    description: str = Field("", max_length=1000)

    @field_validator("slices")
    @classmethod
    def _slices(cls, value: list[float]) -> list[float]:
        return _ascending_slices(value) or []

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _pool_name(value)


class PoolUpdate(BaseModel):
    """Fields of a pool's policy to change; the others stay."""

    model_config = ConfigDict(extra="forbid")

    preemption: PoolPreemption | None = None
    same_zone: bool | None = None
    notice: Seconds | None = Field(None, gt=0, le=86400)
    grow_after: Seconds | None = Field(None, ge=0, le=86400)
    slices: list[Seconds] | None = Field(None, description=SLICES_HELP + " [] removes them.")
    age_halflife: TailSetting = Field(None, description=AGE_HALFLIFE_HELP + TAIL_TURNED_ON)
    min_run: TailSetting = Field(None, description=MIN_RUN_HELP + TAIL_TURNED_ON)
    allreduce_floor: float | None = Field(
        None, ge=0, le=1e5, description=FLOOR_HELP + "; 0 removes it."
    )
    idle_timeout: Seconds | None = Field(
        None, ge=0, le=IDLE_MAX, description=IDLE_HELP + "; 0 removes it."
    )
    description: str | None = Field(None, max_length=1000)

    @field_validator("slices")
    @classmethod
    def _slices(cls, value: list[float] | None) -> list[float] | None:
        return _ascending_slices(value)

    @model_validator(mode="after")
    def _something(self) -> PoolUpdate:
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError(
                "nothing to change: give preemption, same_zone, notice, grow_after, slices, "
                "age_halflife, min_run, allreduce_floor, idle_timeout or description"
            )
        return self


class PoolView(BaseModel):
    name: str
    preemption: PoolPreemption
    same_zone: bool
    notice: float
    grow_after: float
    slices: list[float] = Field(default_factory=list, description="GPU-seconds.")
    age_halflife: float | None = Field(
        None, description="Seconds; time-slicing's aging (see PoolSpec). None: off."
    )
    min_run: float | None = Field(
        None, description="Seconds; time-slicing's quantum (see PoolSpec). None: off."
    )
    allreduce_floor: float | None = Field(None, description="GB/s; see PoolSpec. None: none.")
    idle_timeout: float | None = Field(
        None, description="Seconds; see PoolSpec. None: the pool-wide GPUYARD_IDLE_TIMEOUT."
    )
    description: str
    declared: bool = Field(
        description="An admin set its policy; otherwise it exists only as node labels and has "
        "the default policy."
    )
    nodes: list[str] = Field(description="Nodes in it (by their effective `pool` label).")


# -- node labels --------------------------------------------------------------------------


LabelMap = Annotated[dict[str, str], Field(default_factory=dict)]


class LabelsUpdate(BaseModel):
    """Admin labels to set and to remove on one node (pool, zone, network, driver, …). They win
    over the labels the executor reports, which cannot be removed, only overridden."""

    model_config = ConfigDict(extra="forbid")

    set: LabelMap
    remove: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _valid(self) -> LabelsUpdate:
        if not self.set and not self.remove:
            raise ValueError("nothing to change: give labels to set and/or to remove")
        for key, value in self.set.items():
            check_label(key, value)
        for key in self.remove:
            check_label(key)
        both = sorted(set(self.set) & set(self.remove))
        if both:
            raise ValueError(f"{', '.join(both)}: set or remove a label, not both")
        return self


class NodeLabels(BaseModel):
    node: str
    labels: dict[str, str] = Field(description="What the executor reports.")
    extra_labels: dict[str, str] = Field(description="What admins set; wins over `labels`.")
    effective: dict[str, str] = Field(description="What the scheduler sees.")


# -- jobs ---------------------------------------------------------------------------------


class PriorityChange(BaseModel):
    """Change a queued or suspended job's tier (docs/jobs.md, "Changing a job's tier…")."""

    model_config = ConfigDict(extra="forbid")

    priority: Priority


class JobChange(BaseModel):
    """Change a job's priority (queued or suspended jobs: 调整优先级) and/or its runtime limit
    (调整使用时长: any job that has not ended; measured from its start)."""

    model_config = ConfigDict(extra="forbid")

    priority: Priority | None = None
    max_runtime: Seconds | None = Field(
        None,
        gt=0,
        le=366 * 86400,
        description="The new runtime limit in seconds (or 90m, 2h, 1d).",
    )

    @model_validator(mode="after")
    def _something(self) -> JobChange:
        if self.priority is None and self.max_runtime is None:
            raise ValueError("nothing to change: give priority and/or max_runtime")
        return self


# -- sign-in, settings, audit -------------------------------------------------------------


class TokenKind(StrEnum):
    API = "api"
    """A token a person or program sends as ``Authorization: Bearer``."""
    SESSION = "session"
    """A web UI session's: made at sign-in, carried by its cookie, revoked at sign-out."""


class TokenSpec(BaseModel):
    """A new API token. Only admins create tokens for other users."""

    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(None, description="Whose token (default: yours).")
    label: str = Field("", max_length=64, description="What it is for, e.g. laptop, ci.")
    expires_in: Seconds = Field(
        90 * 86400.0,
        gt=0,
        le=366 * 86400,
        description="Seconds until it expires (or 30d, 12h); at most 366 days.",
    )

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        return None if value is None else _account_name(value, "user")

    @field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        if any(not ch.isprintable() for ch in value):
            raise ValueError("a label is printable text")
        return value


class TokenView(BaseModel):
    id: int
    user: str
    label: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    kind: TokenKind = Field(
        TokenKind.API, description="api, or session: a web sign-in's (the web UI only)."
    )
    parent: int | None = Field(
        None,
        description="The token it was made with: it expires no later, and goes when that "
        "one is revoked.",
    )


class IssuedToken(TokenView):
    token: str = Field(description="The token itself: shown this once, stored only as a hash.")


class PoolSettings(BaseModel):
    sharing: bool = Field(
        description="Whether jobs may give their group's other members access (docs/accounts.md, "
        "他人访问权限): off, every job's access for others is none."
    )


class PoolSettingsUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sharing: bool | None = None

    @model_validator(mode="after")
    def _something(self) -> PoolSettingsUpdate:
        if self.sharing is None:
            raise ValueError("nothing to change: give sharing")
        return self


class AuditEntry(BaseModel):
    id: int
    time: datetime
    actor: str = Field(description="user:<name>, pool or controller.")
    action: str = Field(description="e.g. job.stop, job.delete, user.update, token.create.")
    target: str = Field(description="e.g. job:12, user:bob, sharing.")
    detail: str


class SignalRequest(BaseModel):
    """A signal for a running job (``scancel --signal``)."""

    model_config = ConfigDict(extra="forbid")

    signal: int = Field(ge=1, le=64, description="The signal's number (10 for SIGUSR1, ...).")
    steps: bool = Field(
        True, description="To its job steps (srun); false: to its batch shell / main process."
    )
