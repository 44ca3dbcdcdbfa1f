"""Users and their tokens for tests and benchmarks, made through the server's own services
(the same digests and expiry as `gpuyard tokens create`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx
from sqlalchemy import select, update

from gpuyard.client import Client
from gpuyard.clock import SystemClock
from gpuyard.models import Role
from gpuyard.services.accounts import AccountService
from gpuyard.store.engine import Store
from gpuyard.store.tables import GroupRow, UserRow

__all__ = ["OPS", "AsUser", "Call", "TokenFor", "api_caller", "ensure_ops", "user_token"]

OPS = "ops"
"""An admin that tests calling the services directly act as (see :func:`ensure_ops`)."""

AsUser = Callable[..., Client]
"""The ``as_user`` fixture: ``as_user(name, admin=False, group=None)`` -> a signed-in Client."""
TokenFor = Callable[..., str]
"""The ``token_for`` fixture: ``token_for(name, admin=False, group=None)`` -> a token."""

Call = Callable[..., httpx.Response]
"""``call(who, method, path, **kwargs)``: an HTTP request to ``/api/v1<path>`` as ``who`` (None:
nobody signed in); ``kwargs`` go to :func:`httpx.request`. Made by :func:`api_caller`."""

TEST_TOKEN_LIFE = 366 * 86400.0


def user_token(app: Any, name: str, *, admin: bool = False, group: str | None = None) -> str:
    """A token of ``name`` for ``app`` (made by ``create_app``), creating the user (a plain
    user of the default group unless told) and its group when they do not exist."""
    services = app.state.services
    store = services.accounts.store
    now = services.accounts.clock.now()
    if admin:
        services.accounts.ensure_admins([name])
    with store.write() as session:
        services.accounts.register(session, name)
        if group is not None:
            if session.scalars(select(GroupRow).where(GroupRow.name == group)).first() is None:
                session.add(GroupRow(name=group, urgent_limit=None, created_at=now))
                session.flush()
            session.execute(update(UserRow).where(UserRow.name == name).values(group_name=group))
        if admin:
            session.execute(
                update(UserRow).where(UserRow.name == name).values(role=Role.ADMIN.value)
            )
    issued = services.tokens.issue_for_owner(name, "test", TEST_TOKEN_LIFE)
    return str(issued.token)


def ensure_ops(store: Store) -> None:
    """Make :data:`OPS` an admin of ``store`` (idempotent)."""
    AccountService(store, clock=SystemClock()).ensure_admins([OPS])


def api_caller(api_url: str, tokens: Mapping[str, str]) -> Call:
    """A :data:`Call` to the API at ``api_url`` with the bearer token ``tokens`` maps each
    user to (made with the ``token_for`` fixture)."""

    def send(who: str | None, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {tokens[who]}"} if who else {}
        return httpx.request(method, f"{api_url}/api/v1{path}", headers=headers, **kwargs)

    return send
