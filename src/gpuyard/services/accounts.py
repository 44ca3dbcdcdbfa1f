"""Who may do what: users, groups, quotas, pool policies and node labels.

Reading is open to signed-in users (the list of users to admins); every write here is for admins,
as the policy table says (gpuyard.models.access), and a refusal names the role that may.
The job rules that depend on the submitter (which tiers they may use, their group's limit on
urgent jobs) are here too, called by :class:`~gpuyard.services.jobs.JobService` inside
its own transaction, so that a refused submission or priority change stores nothing.

Bootstrap: :meth:`AccountService.ensure_admins` runs when the app is built; it creates the
``default`` group and makes the pool's own user and ``GPUYARD_ADMINS`` admins, so a one-person
pool needs no set-up at all. Everyone else is created by an admin, who gives them a token
(:mod:`gpuyard.services.auth`); :meth:`AccountService.register` remains for callers inside the
server that act for a user the store has not seen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from gpuyard.models import (
    GroupSpec,
    GroupUpdate,
    GroupView,
    LabelsUpdate,
    NodeLabels,
    PoolPreemption,
    PoolSpec,
    PoolUpdate,
    PoolView,
    Priority,
    QuotaKind,
    QuotaSpec,
    QuotaView,
    Role,
    UserSpec,
    UserUpdate,
    UserView,
)
from gpuyard.models.access import Action
from gpuyard.models.accounts import OFF
from gpuyard.models.actor import Actor
from gpuyard.models.states import HOLDING, LIVE, JobState
from gpuyard.scheduler.snapshot import (
    DEFAULT_POOL,
    TIME_SHARING_AGE_HALFLIFE,
    TIME_SHARING_MIN_RUN,
)
from gpuyard.services.auth import Audit, Policy
from gpuyard.services.nodes import cordon_node, uncordon_node
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.suspension import begin_suspension
from gpuyard.store.engine import Store
from gpuyard.store.tables import GroupRow, JobRow, NodeRow, PoolRow, QuotaRow, UserRow

__all__ = ["DEFAULT_GROUP", "AccountService", "parse_tiers"]

CACHE_AGE = 5.0
"""Seconds a cache of users' groups serves at most (writes by other processes)."""
DEFAULT_GROUP = "default"
"""The group of users created without one; it cannot be deleted."""

DEFAULT_USER_TIERS = (Priority.LOW, Priority.NORMAL, Priority.HIGH)

_LIVE = LIVE
"""Running or queued, as the urgent limit counts them (docs/jobs.md, "Priority tiers")."""
_HOLDING = HOLDING


def parse_tiers(values: Iterable[str], setting: str) -> list[Priority]:
    """Tier names from a setting; an unknown one is a start-up error that names the setting."""
    tiers = []
    for value in values:
        try:
            tiers.append(Priority(value.strip().lower()))
        except ValueError:
            raise InvalidSpec(
                f"{setting}: unknown priority tier {value!r}; tiers are "
                f"{', '.join(p.value for p in Priority)}"
            ) from None
    return tiers


def _insert_user(session: Session, name: str, role: Role, now: float) -> None:
    """Register ``name`` with ``role`` in the default group, unless it exists already."""
    _insert_ignore(session, GroupRow, name=DEFAULT_GROUP, created_at=now)
    _insert_ignore(
        session,
        UserRow,
        name=name,
        group_name=DEFAULT_GROUP,
        role=role.value,
        share=1.0,
        created_at=now,
    )


def _insert_ignore(session: Session, table: Any, **values: Any) -> None:
    """INSERT unless the primary key exists: two first submissions of a new user, or two
    servers starting on one database, must not fail on each other."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        session.execute(pg_insert(table).values(**values).on_conflict_do_nothing())
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        session.execute(sqlite_insert(table).values(**values).on_conflict_do_nothing())


class AccountService:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        user_tiers: Sequence[Priority] = DEFAULT_USER_TIERS,
        urgent_tier: Priority = Priority.HIGH,
        notify: Notify = nobody,
        policy: Policy | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy or Policy(store, clock, Audit(clock))
        self.audit = self.policy.audit
        self.user_tiers = [p for p in Priority if p in user_tiers]
        self.urgent_tier = urgent_tier
        self.notify = notify
        self._groups: dict[str, str] = {}
        self._groups_at: tuple[tuple[int, ...], float] = ((), 0.0)
        """What :meth:`register_all` cached: users' groups, and the generation and time."""

    @contextmanager
    def _audited(
        self,
        actor: str,
        action: Action,
        doing: str,
        verb: str,
        target: str,
        detail: str = "",
        *,
        notify: bool = True,
    ) -> Iterator[Session]:
        """The write of every admin change: one transaction in which ``actor`` must be allowed
        ``action`` (``doing`` names it in the refusal) and the change is audited as ``verb`` on
        ``target`` with ``detail``; a refusal or error in the body rolls the audit record back
        with the rest. Once committed, the controller is told (``notify``: the change can
        affect scheduling)."""
        with self.store.write() as session:
            self.policy.require(session, actor, action, doing)
            self.audit.record(session, Actor.user(actor), verb, target, detail)
            yield session
        if notify:
            self.notify()

    # -- bootstrap and identity -----------------------------------------------------------

    def ensure_admins(self, names: Iterable[str]) -> None:
        """Create the default group; make each named user an admin (registering it if new)."""
        wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
        for name in wanted:
            if len(name) > 64:
                raise InvalidSpec(f"admin name {name[:20]!r}… is longer than 64 characters")
        now = self.clock.now()
        with self.store.write() as session:
            for name in wanted:
                _insert_user(session, name, Role.ADMIN, now)
                session.execute(
                    update(UserRow)
                    .where(UserRow.name == name, UserRow.role != Role.ADMIN.value)
                    .values(role=Role.ADMIN.value)
                )

    def register(self, session: Session, name: str) -> UserRow:
        """The user ``name``, registered as a plain user of the default group if new."""
        row: UserRow | None = session.get(UserRow, name)
        if row is not None:
            return row
        now = self.clock.now()
        _insert_user(session, name, Role.USER, now)
        found: UserRow | None = session.get(UserRow, name)
        if found is None:  # pragma: no cover - the row was just inserted or already existed
            raise Conflict(f"could not register user {name}; try again")
        return found

    def role_of(self, session: Session, name: str) -> Role:
        row = session.get(UserRow, name)
        return Role(row.role) if row is not None else Role.USER

    def tiers_for(self, role: Role) -> list[Priority]:
        return list(Priority) if role is Role.ADMIN else list(self.user_tiers)

    def check_tier(self, session: Session, name: str, tier: Priority) -> None:
        """PermissionDenied unless ``name`` may use ``tier``."""
        role = self.role_of(session, name)
        if tier in self.tiers_for(role):
            return
        mine = ", ".join(p.value for p in self.user_tiers) or "none"
        others = ", ".join(p.value for p in Priority if p not in self.user_tiers)
        raise PermissionDenied(
            f"priority {tier.value} is not open to {name}: users may choose {mine}; admins "
            f"may also use {others} (ask an admin)"
        )

    def register_all(self, session: Session, names: Iterable[str]) -> dict[str, str]:
        """Each user's group ("" for none), registering those never seen. Known users' groups
        are cached while no user or group changes (see Store.generation)."""
        wanted = set(names)
        generation = self.store.generation("users", "groups")
        now = self.clock.monotonic()
        if self._groups_at[0] != generation or now - self._groups_at[1] > CACHE_AGE:
            self._groups, self._groups_at = {}, (generation, now)
        cached = self._groups
        if wanted <= cached.keys():
            return {name: cached[name] for name in wanted}
        groups = {
            name: group or ""
            for name, group in session.execute(
                select(UserRow.name, UserRow.group_name).where(UserRow.name.in_(wanted))
            )
        }
        cached.update(groups)  # only what was read: a registration may yet roll back
        for name in wanted - groups.keys():
            groups[name] = self.register(session, name).group_name or ""
        return groups

    def check_urgent_limit(
        self, session: Session, group: str, tier: Priority, *, lock: bool = True, adding: int = 1
    ) -> None:
        """Conflict if ``adding`` more jobs at ``tier`` would take ``group`` past its urgent
        limit.

        Locks the group's row (FOR UPDATE on PostgreSQL; SQLite's writers are serial
        already), so that two submissions cannot both take the last place; a dry run reads
        without the lock."""
        if tier is not self.urgent_tier or not group:
            return
        query = select(GroupRow).where(GroupRow.name == group)
        row = session.scalars(query.with_for_update() if lock else query).one_or_none()
        if row is None or row.urgent_limit is None:
            return
        count = self._urgent_count(session, group)
        if count + adding > row.urgent_limit:
            more = f"; these {adding} would pass it" if adding > 1 else ""
            raise Conflict(
                f"group {group} has {count} running or queued {tier.value} job(s) and its "
                f"limit is {row.urgent_limit}{more}; wait until one ends, choose a lower priority, "
                f"or ask an admin to raise the limit (`gpuyard groups set {group} "
                "--urgent-limit N`)",
                extra={"count": count, "limit": row.urgent_limit},
            )

    def _urgent_count(self, session: Session, group: str) -> int:
        return (
            session.scalar(
                select(func.count())
                .select_from(JobRow)
                .where(
                    JobRow.group_name == group,
                    JobRow.priority == self.urgent_tier.value,
                    JobRow.state.in_(_LIVE),
                )
            )
            or 0
        )

    # -- users ----------------------------------------------------------------------------

    def list_users(self, *, actor: str) -> list[UserView]:
        with self.store.read() as session:
            self.policy.require(
                session,
                actor,
                Action.READ_USERS,
                "list users (you may read your own: GET /users/me)",
            )
            rows = session.scalars(select(UserRow).order_by(UserRow.name)).all()
            return [self._user_view(r) for r in rows]

    def get_user(self, name: str, *, actor: str) -> UserView:
        with self.store.read() as session:
            if name in ("me", actor):
                name = actor
            else:
                self.policy.require(session, actor, Action.READ_USERS, "read other users")
            return self._user_view(self._user(session, name))

    def create_user(self, spec: UserSpec, *, actor: str) -> UserView:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "create users",
            "user.create",
            f"user:{spec.name}",
            spec.model_dump_json(exclude_none=True),
        ) as session:
            if session.get(UserRow, spec.name) is not None:
                raise Conflict(
                    f"user {spec.name} exists already; change it with `gpuyard users set "
                    f"{spec.name} …`"
                )
            self._existing_group(session, spec.group)
            row = UserRow(
                name=spec.name,
                group_name=spec.group,
                role=spec.role.value,
                share=spec.share,
                os_user=spec.os_user,
                created_at=self.clock.now(),
            )
            session.add(row)
            session.flush()
            view = self._user_view(row)
        return view

    def update_user(self, name: str, change: UserUpdate, *, actor: str) -> UserView:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "change users",
            "user.update",
            f"user:{name}",
            change.model_dump_json(exclude_unset=True),
        ) as session:
            row = self._user(session, name)
            if change.group is not None:
                self._existing_group(session, change.group)
                row.group_name = change.group
            if change.role is not None:
                if change.role is Role.USER and row.role == Role.ADMIN.value:
                    others = session.scalar(
                        select(func.count())
                        .select_from(UserRow)
                        .where(UserRow.role == Role.ADMIN.value, UserRow.name != name)
                    )
                    if not others:
                        raise Conflict(
                            f"{name} is the last admin; make another user an admin first"
                        )
                row.role = change.role.value
            if change.share is not None:
                row.share = change.share
            if "os_user" in change.model_fields_set:
                row.os_user = change.os_user or None
            session.flush()
            view = self._user_view(row)
        return view

    def _user(self, session: Session, name: str) -> UserRow:
        row: UserRow | None = session.get(UserRow, name)
        if row is None:
            raise NotFound(
                f"user {name} does not exist (an admin creates users with `gpuyard users add`)"
            )
        return row

    def _user_view(self, row: UserRow) -> UserView:
        role = Role(row.role)
        return UserView(
            name=row.name,
            group=row.group_name,
            role=role,
            share=row.share,
            tiers=self.tiers_for(role),
            os_user=row.os_user,
            created_at=datetime.fromtimestamp(row.created_at, UTC),
        )

    # -- groups ---------------------------------------------------------------------------

    def list_groups(self) -> list[GroupView]:
        with self.store.read() as session:
            rows = session.scalars(select(GroupRow).order_by(GroupRow.name)).all()
            members: dict[str, list[str]] = defaultdict(list)
            for user, group in session.execute(
                select(UserRow.name, UserRow.group_name).order_by(UserRow.name)
            ):
                members[group or ""].append(user)
            counted = session.execute(
                select(JobRow.group_name, func.count())
                .where(JobRow.priority == self.urgent_tier.value, JobRow.state.in_(_LIVE))
                .group_by(JobRow.group_name)
            )
            urgent: dict[str, int] = {str(group): int(count) for group, count in counted}
            return [self._group_view(r, members[r.name], urgent.get(r.name, 0)) for r in rows]

    def get_group(self, name: str) -> GroupView:
        with self.store.read() as session:
            return self._group_view_of(session, self._existing_group(session, name, found=404))

    def create_group(self, spec: GroupSpec, *, actor: str) -> GroupView:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "create groups",
            "group.create",
            f"group:{spec.name}",
            spec.model_dump_json(exclude_none=True),
            notify=False,
        ) as session:
            if self.group_row(session, spec.name) is not None:
                raise Conflict(f"group {spec.name} exists already")
            row = GroupRow(
                name=spec.name, urgent_limit=spec.urgent_limit, created_at=self.clock.now()
            )
            session.add(row)
            session.flush()
            return self._group_view(row, [], 0)

    def update_group(self, name: str, change: GroupUpdate, *, actor: str) -> GroupView:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "change groups",
            "group.update",
            f"group:{name}",
            change.model_dump_json(),
            notify=False,
        ) as session:
            row = self._existing_group(session, name, found=404)
            row.urgent_limit = change.urgent_limit
            session.flush()
            return self._group_view_of(session, row)

    def delete_group(self, name: str, *, actor: str) -> None:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "delete groups",
            "group.delete",
            f"group:{name}",
            "",
            notify=False,
        ) as session:
            row = self._existing_group(session, name, found=404)
            if name == DEFAULT_GROUP:
                raise Conflict(
                    f"the {DEFAULT_GROUP} group cannot be deleted: it is where new users go "
                    "unless given a group"
                )
            members = session.scalars(
                select(UserRow.name).where(UserRow.group_name == name).order_by(UserRow.name)
            ).all()
            if members:
                shown = ", ".join(members[:10]) + (", …" if len(members) > 10 else "")
                raise Conflict(
                    f"group {name} still has {len(members)} member(s) ({shown}); move them to "
                    "another group first (`gpuyard users set NAME --group OTHER`)"
                )
            session.execute(
                delete(QuotaRow).where(
                    QuotaRow.kind == QuotaKind.GROUP.value, QuotaRow.subject == name
                )
            )
            session.delete(row)

    def _existing_group(self, session: Session, name: str, *, found: int = 422) -> GroupRow:
        row = self.group_row(session, name)
        if row is not None:
            return row
        names = session.scalars(select(GroupRow.name).order_by(GroupRow.name)).all()
        message = (
            f"group {name} does not exist (groups: {', '.join(names) or 'none'}); an admin "
            f"creates it with `gpuyard groups add {name}`"
        )
        raise NotFound(message) if found == 404 else InvalidSpec(message)

    @staticmethod
    def group_row(session: Session, name: str) -> GroupRow | None:
        """The group of this name now (its id is what jobs' access refers to)."""
        return session.scalars(select(GroupRow).where(GroupRow.name == name)).one_or_none()

    def _group_view_of(self, session: Session, row: GroupRow) -> GroupView:
        members = session.scalars(
            select(UserRow.name).where(UserRow.group_name == row.name).order_by(UserRow.name)
        ).all()
        return self._group_view(row, list(members), self._urgent_count(session, row.name))

    @staticmethod
    def _group_view(row: GroupRow, members: list[str], urgent: int) -> GroupView:
        return GroupView(
            name=row.name,
            urgent_limit=row.urgent_limit,
            urgent_jobs=urgent,
            members=members,
            created_at=datetime.fromtimestamp(row.created_at, UTC),
        )

    # -- quotas ---------------------------------------------------------------------------

    def list_quotas(
        self, *, kind: QuotaKind | None = None, subject: str | None = None
    ) -> list[QuotaView]:
        query = select(QuotaRow)
        if kind is not None:
            query = query.where(QuotaRow.kind == kind.value)
        if subject is not None:
            query = query.where(QuotaRow.subject == subject)
        with self.store.read() as session:
            rows = session.scalars(query).all()
            used = self._usage(session) if rows else {}
        order = {p.value: p.rank for p in Priority}
        rows = sorted(rows, key=lambda r: (r.kind, r.subject, order.get(r.tier, 0)))
        return [self._quota_view(r, used) for r in rows]

    def set_quota(self, spec: QuotaSpec, *, actor: str) -> QuotaView:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "set quotas",
            "quota.set",
            f"quota:{spec.kind.value}:{spec.subject}:{spec.tier.value}",
            spec.model_dump_json(include={"nodes", "gpus"}),
        ) as session:
            self._check_subject(session, spec.kind, spec.subject)
            row = session.scalars(
                select(QuotaRow).where(
                    QuotaRow.kind == spec.kind.value,
                    QuotaRow.subject == spec.subject,
                    QuotaRow.tier == spec.tier.value,
                )
            ).one_or_none()
            if row is None:
                row = QuotaRow(kind=spec.kind.value, subject=spec.subject, tier=spec.tier.value)
                session.add(row)
            row.nodes = spec.nodes
            row.gpus = spec.gpus
            session.flush()
            view = self._quota_view(row, self._usage(session))
        return view

    def clear_quota(self, kind: QuotaKind, subject: str, tier: Priority, *, actor: str) -> None:
        with self._audited(
            actor,
            Action.MANAGE_ACCOUNTS,
            "clear quotas",
            "quota.clear",
            f"quota:{kind.value}:{subject}:{tier.value}",
            "",
        ) as session:
            result = session.execute(
                delete(QuotaRow).where(
                    QuotaRow.kind == kind.value,
                    QuotaRow.subject == subject,
                    QuotaRow.tier == tier.value,
                )
            )
            if not result.rowcount:  # type: ignore[attr-defined]
                raise NotFound(f"{kind.value} {subject} has no quota at {tier.value}")

    def _check_subject(self, session: Session, kind: QuotaKind, subject: str) -> None:
        if kind is QuotaKind.GROUP:
            self._existing_group(session, subject)
        elif session.get(UserRow, subject) is None:
            raise InvalidSpec(
                f"user {subject} does not exist; an admin creates it with `gpuyard users add "
                f"{subject}`"
            )

    def _usage(self, session: Session) -> dict[tuple[str, str, str], tuple[int, int]]:
        """(kind, subject, tier) -> (nodes, GPUs) that running jobs hold, as quotas count."""
        used: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
        for owner, group, tier, placement in session.execute(
            select(JobRow.owner, JobRow.group_name, JobRow.priority, JobRow.placement).where(
                JobRow.state.in_(_HOLDING)
            )
        ):
            slots = placement or []
            gpus = sum(len(s.get("gpus") or ()) for s in slots)
            keys = [(QuotaKind.USER.value, owner, tier)]
            if group:
                keys.append((QuotaKind.GROUP.value, group, tier))
            for key in keys:
                used[key][0] += len(slots)
                used[key][1] += gpus
        return {k: (v[0], v[1]) for k, v in used.items()}

    @staticmethod
    def _quota_view(row: QuotaRow, used: dict[tuple[str, str, str], tuple[int, int]]) -> QuotaView:
        nodes, gpus = used.get((row.kind, row.subject, row.tier), (0, 0))
        return QuotaView(
            kind=QuotaKind(row.kind),
            subject=row.subject,
            tier=Priority(row.tier),
            nodes=row.nodes,
            gpus=row.gpus,
            used_nodes=nodes,
            used_gpus=gpus,
        )

    # -- pools ----------------------------------------------------------------------------

    def list_pools(self) -> list[PoolView]:
        with self.store.read() as session:
            rows = {r.name: r for r in session.scalars(select(PoolRow))}
            members = self._pool_members(session)
        names = sorted(set(rows) | set(members))
        return [self._pool_view(name, rows.get(name), members.get(name, [])) for name in names]

    def get_pool(self, name: str) -> PoolView:
        with self.store.read() as session:
            row = session.get(PoolRow, name)
            members = self._pool_members(session)
            if row is None and name not in members:
                raise NotFound(self._no_pool(name, session))
            return self._pool_view(name, row, members.get(name, []))

    def pool_names(self, session: Session) -> set[str]:
        """Every pool a job may name: declared ones and those nodes carry as a label."""
        declared = set(session.scalars(select(PoolRow.name)))
        return declared | set(self._pool_members(session)) | {DEFAULT_POOL}

    def create_pool(self, spec: PoolSpec, *, actor: str) -> PoolView:
        with self._audited(
            actor,
            Action.MANAGE_POOL,
            "create pools",
            "pool.create",
            f"pool:{spec.name}",
            spec.model_dump_json(),
        ) as session:
            if session.get(PoolRow, spec.name) is not None:
                raise Conflict(
                    f"pool {spec.name} exists already; change it with `gpuyard pools set "
                    f"{spec.name} …`"
                )
            row = PoolRow(
                name=spec.name,
                preemption=spec.preemption.value,
                same_zone=spec.same_zone,
                notice=spec.notice,
                grow_after=spec.grow_after,
                slices=list(spec.slices),
                allreduce_floor=spec.allreduce_floor,
                idle_timeout=spec.idle_timeout,
                description=spec.description,
            )
            _set_tail_guards(row, spec, slicing_before=False)
            session.add(row)
            session.flush()
            view = self._pool_view(row.name, row, self._pool_members(session).get(row.name, []))
        return view

    def update_pool(self, name: str, change: PoolUpdate, *, actor: str) -> PoolView:
        with self._audited(
            actor,
            Action.MANAGE_POOL,
            "change pools",
            "pool.update",
            f"pool:{name}",
            change.model_dump_json(exclude_none=True),
        ) as session:
            row = session.get(PoolRow, name)
            members = self._pool_members(session)
            if row is None:
                if name not in members:
                    raise NotFound(self._no_pool(name, session))
                # A pool that so far exists only as node labels gets a policy of its own.
                row = PoolRow(
                    name=name, **PoolSpec(name=name).model_dump(mode="json", exclude={"name"})
                )
                session.add(row)
            slicing_before = bool(row.slices)
            for key, value in change.model_dump(
                exclude_none=True, exclude=set(_TAIL_GUARDS)
            ).items():
                setattr(row, key, value.value if isinstance(value, PoolPreemption) else value)
            _set_tail_guards(row, change, slicing_before=slicing_before)
            if change.allreduce_floor == 0:
                row.allreduce_floor = None
            if change.idle_timeout == 0:
                row.idle_timeout = None
            session.flush()
            view = self._pool_view(name, row, members.get(name, []))
        return view

    def _no_pool(self, name: str, session: Session) -> str:
        known = sorted(self.pool_names(session))
        return (
            f"there is no pool {name} (pools: {', '.join(known)}); an admin creates one with "
            f"`gpuyard pools add {name}` or by labelling nodes (`gpuyard label NODE pool={name}`)"
        )

    @staticmethod
    def _pool_members(session: Session) -> dict[str, list[str]]:
        members: dict[str, list[str]] = defaultdict(list)
        for node in session.scalars(select(NodeRow).order_by(NodeRow.name)):
            members[node.effective_labels().get("pool") or DEFAULT_POOL].append(node.name)
        return dict(members)

    @staticmethod
    def _pool_view(name: str, row: PoolRow | None, nodes: list[str]) -> PoolView:
        policy = row if row is not None else PoolRow(**PoolSpec(name=name).model_dump(mode="json"))
        return PoolView(
            name=name,
            preemption=PoolPreemption(policy.preemption),
            same_zone=policy.same_zone,
            notice=policy.notice,
            grow_after=policy.grow_after,
            slices=list(policy.slices or []),
            age_halflife=policy.age_halflife,
            min_run=policy.min_run,
            allreduce_floor=policy.allreduce_floor,
            idle_timeout=policy.idle_timeout,
            description=policy.description,
            declared=row is not None,
            nodes=nodes,
        )

    # -- node labels ----------------------------------------------------------------------

    def node_labels(self, node: str) -> NodeLabels:
        with self.store.read() as session:
            return self._labels_view(self._node(session, node))

    def set_labels(self, node: str, change: LabelsUpdate, *, actor: str) -> NodeLabels:
        with self._audited(
            actor,
            Action.MANAGE_POOL,
            "label nodes",
            "node.labels",
            f"node:{node}",
            change.model_dump_json(),
        ) as session:
            row = self._node(session, node)
            extra = {str(k): str(v) for k, v in (row.extra_labels or {}).items()}
            absent = [k for k in change.remove if k not in extra]
            if absent:
                raise InvalidSpec(
                    f"node {node} has no admin label {', '.join(absent)} to remove (admin "
                    f"labels: {', '.join(sorted(extra)) or 'none'}); labels the executor "
                    "reports cannot be removed, only overridden by setting them"
                )
            for key in change.remove:
                del extra[key]
            extra.update(change.set)
            row.extra_labels = extra  # a new dict, so that the JSON column is written
            session.flush()
            view = self._labels_view(row)
        return view

    def cordon(self, node: str, reason: str, *, actor: str, drain: bool = False) -> list[int]:
        """Keep ``node`` out of scheduling; with ``drain``, also suspend the jobs running on
        it, so that they resume elsewhere. Returns the ids of the jobs suspended."""
        now = self.clock.now()
        suspended: list[int] = []
        verb = "node.drain" if drain else "node.cordon"
        with self._audited(
            actor, Action.MANAGE_POOL, "cordon nodes", verb, f"node:{node}", reason
        ) as session:
            self._node(session, node)
            cordon_node(session, node, reason=reason, by=Actor.user(actor), now=now)
            if drain:
                for job in session.scalars(
                    select(JobRow).where(JobRow.state == JobState.RUNNING).order_by(JobRow.id)
                ):
                    if any(slot.get("node") == node for slot in job.placement or []):
                        begin_suspension(
                            session,
                            job,
                            actor=Actor.user(actor),
                            why=f"node {node} is drained by {actor}: {reason}",
                            now=now,
                        )
                        suspended.append(job.id)
        return suspended

    def uncordon(self, node: str, *, actor: str) -> None:
        with self._audited(
            actor, Action.MANAGE_POOL, "uncordon nodes", "node.uncordon", f"node:{node}"
        ) as session:
            self._node(session, node)
            if not uncordon_node(session, node):
                raise Conflict(f"node {node} is not cordoned")

    @staticmethod
    def _node(session: Session, name: str) -> NodeRow:
        row: NodeRow | None = session.get(NodeRow, name)
        if row is None:
            raise NotFound(f"node {name} does not exist (see `gpuyard nodes`)")
        return row

    @staticmethod
    def _labels_view(row: NodeRow) -> NodeLabels:
        return NodeLabels(
            node=row.name,
            labels={str(k): str(v) for k, v in (row.labels or {}).items()},
            extra_labels={str(k): str(v) for k, v in (row.extra_labels or {}).items()},
            effective=row.effective_labels(),
        )


_TAIL_GUARDS = {"age_halflife": TIME_SHARING_AGE_HALFLIFE, "min_run": TIME_SHARING_MIN_RUN}
"""Time-slicing's tail guards (docs/scheduling.md) and what a pool gets when it starts
slicing: the values the trace replays chose."""


def _set_tail_guards(row: PoolRow, given: PoolSpec | PoolUpdate, *, slicing_before: bool) -> None:
    """Set ``row``'s aging and quantum as given (``off``: None). One not given stays, unless
    the pool has just been given slices (a new pool with slices, or an update that turns
    slicing on): then it gets the time-sharing value where it has none, since
    least-attained-service without them lets long jobs wait behind every newer one. Without
    slices neither does anything, so pools that do not slice are left as they were."""
    starts_slicing = bool(row.slices) and not slicing_before
    for name, default in _TAIL_GUARDS.items():
        value = getattr(given, name)
        if value is not None:
            setattr(row, name, None if value == OFF else float(value))
        elif starts_slicing and getattr(row, name) is None:
            setattr(row, name, default)
