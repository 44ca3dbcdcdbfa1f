"""Sign-in and authorization: API tokens, the caller's standing, the pool's sharing switch,
and the audit trail.

Tokens are 32 random bytes (``gy_`` + URL-safe base64); the store keeps only their SHA-256
digest, so a copy of the database signs no one in. A token belongs to one user, has an
expiry (at most :data:`MAX_TOKEN_LIFE`), and can be listed and revoked. A token made with
another (``POST /tokens`` signed in with it, a web sign-in) is its child: it expires no later
than its parent and is revoked with it. A web session is a token of its own
(:attr:`TokenKind.SESSION`), which signs in only the web UI, never the API. Resolving a token is
on every request's path, so resolved tokens are cached while no user, group or token changes
in this process (``Store.generation``) and for at most :data:`CACHE_AGE` seconds (changes by
another server process).

Every decision goes through :func:`gpuyard.models.access.decide`; :class:`Policy` only
gathers its inputs (the caller's role and group, the job's owner, group and access, the
sharing switch) and turns a verdict into the error the API answers with.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, InvalidSpec, NotFound, PermissionDenied, Unauthenticated
from gpuyard.models.access import (
    OFFERED_JOB_ACTIONS,
    Access,
    Action,
    Caller,
    Verdict,
    decide,
    relation_to,
)
from gpuyard.models.accounts import (
    AuditEntry,
    IssuedToken,
    PoolSettings,
    PoolSettingsUpdate,
    Role,
    TokenKind,
    TokenSpec,
    TokenView,
)
from gpuyard.models.actor import Actor
from gpuyard.models.service import JOB_TOKEN_PREFIX, SecretUse, ServiceKind, service_secret
from gpuyard.models.states import JobState
from gpuyard.store.engine import Store
from gpuyard.store.tables import AuditRow, GroupRow, JobRow, SettingRow, TokenRow, UserRow

__all__ = [
    "CACHE_AGE",
    "DEFAULT_TOKEN_LIFE",
    "MAX_TOKEN_LIFE",
    "Audit",
    "Policy",
    "SignedIn",
    "TokenService",
    "digest",
]

CACHE_AGE = 5.0
DEFAULT_TOKEN_LIFE = 90 * 86400.0
MAX_TOKEN_LIFE = 366 * 86400.0
MAX_TOKENS = 100
"""Unexpired tokens one user may hold (each is a row every sign-in may look up)."""
TOKEN_PREFIX = "gy_"  # noqa: S105 - a prefix, not a secret
_TOUCH_EVERY = 600.0
"""Seconds between writes of a token's ``last_used_at``."""

SIGN_IN_HELP = (
    "send `Authorization: Bearer <token>`; get a token with `gpuyard login` (an admin creates "
    "one with `gpuyard tokens create USER`; on your own machine `gpuyard up` made yours)"
)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _when(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


class Audit:
    """Who did what to which job or setting, and when. Written in the transaction of the
    change itself, so the trail never shows a change that did not happen or misses one."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def record(
        self, session: Session, actor: Actor, action: str, target: str, detail: str = ""
    ) -> None:
        session.add(
            AuditRow(
                time=self.clock.now(),
                actor=actor[:96],
                action=action[:32],
                target=target[:160],
                detail=detail[:2000],
            )
        )

    def record_many(
        self,
        session: Session,
        actor: Actor,
        action: str,
        targets: Sequence[str],
        detail: str = "",
    ) -> None:
        if not targets:
            return
        now = self.clock.now()
        session.execute(
            AuditRow.__table__.insert(),  # type: ignore[attr-defined]
            [
                {
                    "time": now,
                    "actor": actor[:96],
                    "action": action[:32],
                    "target": t[:160],
                    "detail": detail[:2000],
                }
                for t in targets
            ],
        )

    @staticmethod
    def entries(
        session: Session,
        *,
        after: int = 0,
        limit: int = 100,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        newest: bool = False,
    ) -> list[AuditEntry]:
        """Entries after id ``after``, oldest first; ``newest``: the latest ``limit``, newest
        first (the web UI's view of the trail)."""
        query = select(AuditRow).where(AuditRow.id > after)
        if actor:
            query = query.where(AuditRow.actor == actor)
        if action:
            query = query.where(AuditRow.action == action)
        if target:
            query = query.where(AuditRow.target == target)
        order = AuditRow.id.desc() if newest else AuditRow.id
        rows = session.scalars(query.order_by(order).limit(limit)).all()
        return [
            AuditEntry(
                id=r.id,
                time=datetime.fromtimestamp(r.time, UTC),
                actor=r.actor,
                action=r.action,
                target=r.target,
                detail=r.detail,
            )
            for r in rows
        ]


@dataclass(frozen=True, slots=True)
class _Resolved:
    caller: Caller
    token_id: int
    expires_at: float | None
    last_used_at: float | None
    cached_at: float
    kind: TokenKind


NOTEBOOK_TOKEN_ID = 0
"""The token id a notebook's own token signs in with: it has no row, and makes no tokens."""


@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who a token signs in, and the token itself (by id): what a token made with it is
    bounded by."""

    caller: Caller
    token_id: int
    expires_at: float | None


class Policy:
    """The inputs of :func:`decide`, read from the store, and its verdicts as errors."""

    SHARING = "sharing"

    def __init__(
        self, store: Store, clock: Clock, audit: Audit, *, admin_exec: bool = False
    ) -> None:
        self.store = store
        self.clock = clock
        self.audit = audit
        self.admin_exec = admin_exec
        """Admins may enter others' jobs (``GPUYARD_ADMIN_EXEC``; docs/security.md)."""
        self._sharing: tuple[tuple[int, ...], float, bool] | None = None

    # -- the caller -----------------------------------------------------------------------

    @staticmethod
    def caller(session: Session, name: str) -> Caller:
        """``name``'s standing now (role, group), read in ``session``."""
        if not name:
            return Caller("")
        row = session.get(UserRow, name)
        if row is None:
            return Caller(name)
        group_id = (
            session.scalar(select(GroupRow.id).where(GroupRow.name == row.group_name))
            if row.group_name
            else None
        )
        return Caller(
            name,
            admin=row.role == Role.ADMIN.value,
            group=row.group_name or "",
            group_id=group_id,
        )

    # -- the sharing switch ---------------------------------------------------------------

    def sharing(self, session: Session | None = None) -> bool:
        generation = self.store.generation("pool_settings")
        now = self.clock.monotonic()
        cached = self._sharing
        if cached is not None and cached[0] == generation and now - cached[1] < CACHE_AGE:
            return cached[2]
        if session is None:
            with self.store.read() as fresh:
                value = fresh.get(SettingRow, self.SHARING)
        else:
            value = session.get(SettingRow, self.SHARING)
        sharing = True if value is None or value.value is None else bool(value.value)
        self._sharing = (generation, now, sharing)
        return sharing

    def settings(self) -> PoolSettings:
        return PoolSettings(sharing=self.sharing())

    def update_settings(self, change: PoolSettingsUpdate, *, actor: str) -> PoolSettings:
        with self.store.write() as session:
            self.require(session, actor, Action.MANAGE_POOL, "change the pool's settings")
            if change.sharing is not None:
                row = session.get(SettingRow, self.SHARING)
                if row is None:
                    session.add(SettingRow(key=self.SHARING, value=change.sharing))
                else:
                    row.value = change.sharing
                self.audit.record(
                    session, Actor.user(actor), "settings", "sharing", f"sharing={change.sharing}"
                )
        self._sharing = None
        return self.settings()

    def audit_entries(
        self,
        *,
        reader: str,
        after: int = 0,
        limit: int = 100,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        newest: bool = False,
    ) -> list[AuditEntry]:
        """The audit trail, filtered, for ``reader`` (admins only)."""
        with self.store.read() as session:
            self.require(session, reader, Action.READ_AUDIT, "read the audit trail")
            return self.audit.entries(
                session,
                after=after,
                limit=limit,
                actor=actor,
                action=action,
                target=target,
                newest=newest,
            )

    # -- decisions ------------------------------------------------------------------------

    def require(self, session: Session, actor: str, action: Action, what: str) -> Caller:
        """The caller, unless ``action`` on the pool is not open to it (PermissionDenied,
        naming the role that may, never the users who have it)."""
        caller = self.caller(session, actor)
        verdict = decide(relation_to(caller, None, None), action)
        if verdict is Verdict.SIGN_IN:
            raise Unauthenticated(f"sign in first: {SIGN_IN_HELP}")
        if verdict is not Verdict.ALLOW:
            raise PermissionDenied(
                f"only admins may {what}; you ({actor}) are not an admin (ask one; "
                "GPUYARD_ADMINS names admins when the pool starts)"
            )
        return caller

    def verdict(self, caller: Caller, row: JobRow, action: Action, *, sharing: bool) -> Verdict:
        relation = relation_to(caller, row.owner, row.group_id)
        return decide(
            relation,
            action,
            Access(row.access or "none"),
            sharing=sharing,
            admin_enter=self.admin_exec,
        )

    def check_job(
        self, session: Session, actor: str, row: JobRow | None, job_id: int, action: Action
    ) -> JobRow:
        """``row`` if ``actor`` may do ``action`` to it; NotFound when it does not exist or
        the actor may not see it (the same words either way), PermissionDenied when it may see
        it but not do this."""
        if row is None:
            raise NotFound(f"job {job_id} does not exist")
        caller = self.caller(session, actor)
        verdict = self.verdict(caller, row, action, sharing=self.sharing(session))
        if verdict is Verdict.ALLOW:
            return row
        if verdict is Verdict.SIGN_IN:
            raise Unauthenticated(f"sign in first: {SIGN_IN_HELP}")
        if verdict is Verdict.HIDDEN:
            raise NotFound(f"job {job_id} does not exist")
        if action is Action.ENTER:
            raise PermissionDenied(_refused_entry(job_id, caller, row))
        raise PermissionDenied(
            f"your access to job {job_id} is read-only: you may view and clone it; its owner "
            f"or an admin may {action.value.replace('-', ' ')} it (or give its group "
            "read-write access)"
        )

    def allowed(self, caller: Caller, row: JobRow, *, sharing: bool) -> list[Action]:
        return [
            a
            for a in OFFERED_JOB_ACTIONS
            if self.verdict(caller, row, a, sharing=sharing) is Verdict.ALLOW
        ]

    def visible(self, caller: Caller, *, sharing: bool) -> ColumnElement[bool] | None:
        """A WHERE clause for the jobs ``caller`` may see (None: all of them)."""
        if caller.admin:
            return None
        mine = JobRow.owner == caller.name
        if not sharing or caller.group_id is None:
            return mine
        return or_(
            mine,
            and_(JobRow.group_id == caller.group_id, JobRow.access != Access.NONE.value),
        )

    def check_access_choice(self, access: Access, session: Session | None = None) -> None:
        """InvalidSpec when a job asks for access for others while sharing is off."""
        if access is not Access.NONE and not self.sharing(session):
            raise InvalidSpec(
                f"access: an admin has turned sharing off, so access for others can only be "
                f"none (got {access.value})"
            )


def _refused_entry(job_id: int, caller: Caller, row: JobRow) -> str:
    """Why ``caller`` may not enter job ``job_id`` (roles, never names)."""
    what = (
        f"only its owner may run commands, shells or its workers in job {job_id}: they run as "
        "the owner's OS account"
    )
    if caller.admin:
        return (
            f"{what}; this pool does not let admins enter others' jobs (an admin who runs the "
            "pool sets GPUYARD_ADMIN_EXEC=true to allow it, audited)"
        )
    access = row.access or Access.NONE.value
    if access == Access.READ_WRITE.value:
        return f"{what}; your access to it is read-write, which lets you stop or hold it"
    return f"{what}; your access to it is {access}"


def _bearer(authorization: str | None) -> str:
    """The token of a ``Bearer`` header; Unauthenticated, saying how to sign in, otherwise."""
    if not authorization:
        raise Unauthenticated(f"sign in first: {SIGN_IN_HELP}")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(f"the Authorization header must be `Bearer <token>`: {SIGN_IN_HELP}")
    if len(token) > 256 or not token.isascii():
        raise Unauthenticated(f"that is not a gpuyard token: {SIGN_IN_HELP}")
    return token


class TokenService:
    def __init__(self, store: Store, *, clock: Clock, policy: Policy, audit: Audit) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self.audit = audit
        self._lock = threading.Lock()
        self._cache: dict[str, _Resolved] = {}
        self._generation: tuple[int, ...] = ()

    # -- on every request -----------------------------------------------------------------

    def authenticate_cached(
        self, authorization: str | None, *, kind: TokenKind = TokenKind.API
    ) -> Caller | None:
        """:meth:`authenticate` when the answer needs no database (a token resolved lately, or
        a malformed header); None when it does. For an event loop, which must not block."""
        signed = self.signed_in_cached(authorization, kind=kind)
        return None if signed is None else signed.caller

    def signed_in_cached(
        self, authorization: str | None, *, kind: TokenKind = TokenKind.API
    ) -> SignedIn | None:
        """:meth:`signed_in` when the answer needs no database; None when it does."""
        if _bearer(authorization).startswith(JOB_TOKEN_PREFIX):
            return None  # a notebook's token is as valid as its job's state, read each time
        resolved = self._cached(self._key(authorization))
        if resolved is None:
            return None
        return self._check(resolved, kind)

    def authenticate(self, authorization: str | None, *, kind: TokenKind = TokenKind.API) -> Caller:
        """The caller an ``Authorization`` header names; Unauthenticated, saying how to sign
        in, when it is absent, malformed, unknown, revoked or expired, or a token of another
        ``kind`` (a web session's is no API token)."""
        return self.signed_in(authorization, kind=kind).caller

    def signed_in(self, authorization: str | None, *, kind: TokenKind = TokenKind.API) -> SignedIn:
        """:meth:`authenticate`, with the token that signed the caller in. A notebook's own
        token (``gyj_<job>_<secret>``, :func:`gpuyard.models.service.notebook_token`) signs its
        owner in while that attempt of the notebook runs, as an API token that makes no
        tokens."""
        token = _bearer(authorization)
        if token.startswith(JOB_TOKEN_PREFIX):
            return self._notebook_signed_in(token, kind)
        key = self._key(authorization)
        resolved = self._cached(key) or self._resolve(key, self.clock.now())
        return self._check(resolved, kind)

    def still_valid(self, authorization: str | None, *, kind: TokenKind = TokenKind.API) -> bool:
        """Whether the token still signs its caller in (not revoked, not expired): what an
        open stream asks now and then, so that revoking a token ends its streams. Costs a
        dictionary lookup while nothing changed, a read after a change of tokens."""
        try:
            self.signed_in(authorization, kind=kind)
        except Unauthenticated:
            return False
        return True

    def _check(self, resolved: _Resolved, kind: TokenKind) -> SignedIn:
        caller = self._check_expiry(resolved)
        if resolved.kind is not kind:
            raise Unauthenticated(
                f"that is a {resolved.kind.value} token, not an {kind.value} token: {SIGN_IN_HELP}"
                if kind is TokenKind.API
                else f"that is not a web session: sign in on the web UI's page ({SIGN_IN_HELP})"
            )
        return SignedIn(caller, resolved.token_id, resolved.expires_at)

    def _key(self, authorization: str | None) -> str:
        return digest(_bearer(authorization))

    def _notebook_signed_in(self, token: str, kind: TokenKind) -> SignedIn:
        unknown = Unauthenticated(
            "that notebook's token is unknown, or its notebook is not running any more: "
            + SIGN_IN_HELP
        )
        job_text, _, secret = token[len(JOB_TOKEN_PREFIX) :].partition("_")
        if kind is not TokenKind.API or not job_text.isdigit() or not secret:
            raise unknown
        with self.store.read() as session:
            row = session.get(JobRow, int(job_text)) if len(job_text) < 19 else None
            service = ((row.spec or {}).get("service") or {}) if row is not None else {}
            if (
                row is None
                or row.state != JobState.RUNNING
                or not row.token
                or service.get("kind") != ServiceKind.NOTEBOOK
                or not hmac.compare_digest(
                    service_secret(row.token, SecretUse.API).encode(), secret.encode()
                )
            ):
                raise unknown
            return SignedIn(self.policy.caller(session, row.owner), NOTEBOOK_TOKEN_ID, None)

    def _check_expiry(self, resolved: _Resolved) -> Caller:
        if resolved.expires_at is not None and resolved.expires_at <= self.clock.now():
            raise Unauthenticated(
                "your token has expired; get a new one with `gpuyard login` (an admin creates "
                "it with `gpuyard tokens create USER`)"
            )
        return resolved.caller

    def _cached(self, key: str) -> _Resolved | None:
        generation = self.store.generation("users", "groups", "api_tokens")
        with self._lock:
            if generation != self._generation:
                self._cache.clear()
                self._generation = generation
            found = self._cache.get(key)
        if found is None or self.clock.monotonic() - found.cached_at > CACHE_AGE:
            return None
        return found

    def _resolve(self, key: str, now: float) -> _Resolved:
        with self.store.read() as session:
            row = session.scalars(select(TokenRow).where(TokenRow.digest == key)).one_or_none()
            if row is None:
                raise Unauthenticated(f"that token is unknown or was revoked: {SIGN_IN_HELP}")
            caller = self.policy.caller(session, row.user_name)
            resolved = _Resolved(
                caller,
                row.id,
                row.expires_at,
                row.last_used_at,
                self.clock.monotonic(),
                TokenKind(row.kind or TokenKind.API),
            )
        if resolved.last_used_at is None or now - resolved.last_used_at > _TOUCH_EVERY:
            # At most every _TOUCH_EVERY seconds per token: it is a write (and empties the
            # cache of resolved tokens, which then fills again from reads).
            with self.store.write() as session:
                session.execute(
                    update(TokenRow)
                    .where(TokenRow.id == resolved.token_id)
                    .values(last_used_at=now)
                )
        with self._lock:
            self._cache[key] = resolved
        return resolved

    # -- managing tokens ------------------------------------------------------------------

    def issue(
        self,
        spec: TokenSpec,
        *,
        actor: str,
        parent: SignedIn | None = None,
        kind: TokenKind = TokenKind.API,
    ) -> IssuedToken:
        """A new token for ``spec.user`` (default: the actor). Only admins issue tokens for
        others. The token is in the answer only: the store keeps its digest. Made with the
        token ``parent``: it expires no later than that one (its life is cut short to fit)
        and is revoked with it."""
        user = spec.user or actor
        if parent is not None and parent.token_id == NOTEBOOK_TOKEN_ID:
            raise PermissionDenied(
                "a notebook's own token makes no tokens: it lives only as long as its notebook "
                "runs. Make one with your own token (`gpuyard tokens create`, outside the job)"
            )
        with self.store.write() as session:
            if user != actor:
                self.policy.require(
                    session, actor, Action.MANAGE_TOKENS, "create tokens for others"
                )
            if session.get(UserRow, user) is None:
                raise NotFound(
                    f"user {user} does not exist; an admin creates it with `gpuyard users add "
                    f"{user}`"
                )
            self._make_room(session, user)
            view = self._insert(session, user, spec.label, spec.expires_in, parent, kind)
            made_with = f", made with token {parent.token_id}" if parent is not None else ""
            self.audit.record(
                session,
                Actor.user(actor),
                "token.create" if kind is TokenKind.API else "session.create",
                f"user:{user}",
                f"token {view.id} ({spec.label or 'no label'}), expires {view.expires_at}"
                + made_with,
            )
        return view

    def _make_room(self, session: Session, user: str) -> None:
        """Drop ``user``'s expired tokens; Conflict when it still has :data:`MAX_TOKENS`."""
        session.execute(
            delete(TokenRow).where(
                TokenRow.user_name == user, TokenRow.expires_at <= self.clock.now()
            )
        )
        held = session.scalar(
            select(func.count()).select_from(TokenRow).where(TokenRow.user_name == user)
        )
        if (held or 0) >= MAX_TOKENS:
            raise Conflict(
                f"{user} has {held} tokens, the most one user may hold; revoke some first "
                "(`gpuyard tokens`, `gpuyard tokens revoke ID`)"
            )

    def issue_for_owner(self, user: str, label: str, life: float) -> IssuedToken:
        """A token for the pool's own user, made when the pool starts (no caller to check)."""
        with self.store.write() as session:
            view = self._insert(session, user, label, life)
            self.audit.record(session, Actor.POOL, "token.create", f"user:{user}", label)
        return view

    def _insert(
        self,
        session: Session,
        user: str,
        label: str,
        life: float | None,
        parent: SignedIn | None = None,
        kind: TokenKind = TokenKind.API,
    ) -> IssuedToken:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = self.clock.now()
        expires_at = now + (life if life is not None else DEFAULT_TOKEN_LIFE)
        if parent is not None:
            if session.get(TokenRow, parent.token_id) is None:
                raise Unauthenticated(f"that token is unknown or was revoked: {SIGN_IN_HELP}")
            if parent.expires_at is not None:
                expires_at = min(expires_at, parent.expires_at)
        row = TokenRow(
            digest=digest(token),
            user_name=user,
            label=label,
            created_at=now,
            expires_at=expires_at,
            parent_id=parent.token_id if parent is not None else None,
            kind=kind,
        )
        session.add(row)
        session.flush()
        return IssuedToken(**self._view(row).model_dump(), token=token)

    def valid(self, token: str) -> str | None:
        """The user a token signs in, or None (unknown, revoked, expired)."""
        with self.store.read() as session:
            row = session.scalars(
                select(TokenRow).where(TokenRow.digest == digest(token))
            ).one_or_none()
            if row is None or (row.expires_at is not None and row.expires_at <= self.clock.now()):
                return None
            return row.user_name

    def list_tokens(self, *, actor: str, user: str | None = None) -> list[TokenView]:
        """The actor's tokens; an admin may name another user or all (``user="*"``)."""
        with self.store.read() as session:
            wanted = user or actor
            if wanted != actor:
                self.policy.require(session, actor, Action.MANAGE_TOKENS, "list others' tokens")
            query = select(TokenRow).order_by(TokenRow.id)
            if wanted != "*":
                query = query.where(TokenRow.user_name == wanted)
            return [self._view(r) for r in session.scalars(query)]

    def revoke(self, token_id: int, *, actor: str) -> None:
        """Revoke a token and every token made with it (and so on down): their open streams
        end at their next check."""
        with self.store.write() as session:
            row = session.get(TokenRow, token_id)
            caller = self.policy.caller(session, actor)
            if row is None or (row.user_name != actor and not caller.admin):
                raise NotFound(f"token {token_id} does not exist (see `gpuyard tokens list`)")
            gone = self._delete_with_children(session, token_id)
            children = f" and the {len(gone) - 1} made with it" if len(gone) > 1 else ""
            self.audit.record(
                session,
                Actor.user(actor),
                "token.revoke",
                f"user:{row.user_name}",
                f"token {token_id}{children}",
            )

    def end_session(self, token: str) -> None:
        """Revoke the web session of this token (sign-out); nothing when it is gone already."""
        with self.store.write() as session:
            row = session.scalars(
                select(TokenRow).where(
                    TokenRow.digest == digest(token), TokenRow.kind == TokenKind.SESSION
                )
            ).one_or_none()
            if row is None:
                return
            self._delete_with_children(session, row.id)
            self.audit.record(
                session, Actor.user(row.user_name), "session.end", f"user:{row.user_name}", ""
            )

    @staticmethod
    def _delete_with_children(session: Session, token_id: int) -> list[int]:
        """Delete the token and its descendants, explicitly (the foreign key's cascade does
        it too; this does not depend on it) and say which went."""
        found, frontier = [token_id], [token_id]
        while frontier:
            frontier = list(
                session.scalars(select(TokenRow.id).where(TokenRow.parent_id.in_(frontier)))
            )
            found.extend(frontier)
        session.execute(delete(TokenRow).where(TokenRow.id.in_(found)))
        return found

    @staticmethod
    def _view(row: TokenRow) -> TokenView:
        return TokenView(
            id=row.id,
            user=row.user_name,
            label=row.label,
            created_at=datetime.fromtimestamp(row.created_at, UTC),
            expires_at=_when(row.expires_at),
            last_used_at=_when(row.last_used_at),
            kind=TokenKind(row.kind or TokenKind.API),
            parent=row.parent_id,
        )
