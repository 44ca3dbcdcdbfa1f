"""Users' logins at the registries images are copied from (docs/images.md, "Registry
logins"): saved only for a registry the admin listed (``GPUYARD_IMAGE_SOURCES``) and only once
the registry accepted them, kept with the password sealed by the pool's key
(``secret_box.py``), listed without it, and read back only for their owner's own copies.

Nothing here reads another user's login: every query is by the caller's name, and an admin
has no way in either. The sealed text holds the owner and host with the password, so a sealed
password moved to another row of the table opens for no one. No password reaches a log, an
error or an answer.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, GpuyardError, NotFound
from gpuyard.images.copy import check_source_host
from gpuyard.images.errors import Unauthorized
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.actor import Actor
from gpuyard.models.registry_login import RegistryLoginSave, RegistryLoginView
from gpuyard.secret_box import SecretBox, Unreadable
from gpuyard.services.auth import Policy
from gpuyard.store import Store
from gpuyard.store.tables import RegistryLoginRow

__all__ = ["RegistryLogins"]

log = logging.getLogger(__name__)


def _view(row: RegistryLoginRow) -> RegistryLoginView:
    saved_at = datetime.fromtimestamp(row.saved_at, UTC)
    return RegistryLoginView(host=row.host, username=row.username, saved_at=saved_at)


def _sealable(owner: str, host: str, password: str) -> str:
    return json.dumps({"owner": owner, "host": host, "password": password})


def _password(opened: str, owner: str, host: str) -> str:
    """The password of an opened login, if it was sealed for ``owner`` at ``host``."""
    try:
        found = json.loads(opened)
        if found["owner"] == owner and found["host"] == host:
            return str(found["password"])
    except (ValueError, KeyError, TypeError):
        pass
    raise Unreadable("it was sealed for another user or registry")


class RegistryLogins:
    """The logins of the pool's users at its image sources; see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        policy: Policy,
        box: SecretBox,
        sources: list[str],
        sources_ca: Path | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self.box = box
        self.sources = list(sources)
        self.sources_ca = sources_ca

    def _client(self, host: str, credentials: Credentials | None) -> RegistryClient:
        """A client of the listed registry ``host``."""
        check_source_host(host, self.sources)
        return RegistryClient(f"https://{host}", credentials=credentials, ca_file=self.sources_ca)

    def save(self, host: str, login: RegistryLoginSave, *, actor: str) -> RegistryLoginView:
        """Check ``login`` with the registry ``host`` (listed), then keep it as ``actor``'s
        (replacing theirs for that host)."""
        password = login.password.get_secret_value()
        with self._client(host, Credentials(login.username, password)) as client:
            try:
                client.check_access()
            except Unauthorized:
                raise Unauthorized(
                    f"registry {host} refused the login of {login.username}: check the user "
                    "name and password; nothing was saved"
                ) from None
        sealed = self._seal(_sealable(actor, host, password))
        try:
            return self._store(actor, host, login.username, sealed)
        except IntegrityError:  # a save of the same new login meanwhile: this one replaces it
            return self._store(actor, host, login.username, sealed)

    def _seal(self, text: str) -> str:
        try:
            return self.box.seal(text)
        except (Unreadable, OSError) as error:
            log.error("cannot seal a registry login: %s", error)
            raise GpuyardError(
                "the pool cannot keep logins now: its key file cannot be used (its server's "
                "log says why); ask an admin"
            ) from None

    def _store(self, actor: str, host: str, username: str, sealed: str) -> RegistryLoginView:
        with self.store.write() as session:
            row = session.get(RegistryLoginRow, (actor, host))
            if row is None:
                row = RegistryLoginRow(owner=actor, host=host)
                session.add(row)
            row.username, row.ciphertext, row.saved_at = username, sealed, self.clock.now()
            self.policy.audit.record(
                session, Actor.user(actor), "registry_login.save", f"registry:{host}", username
            )
            session.flush()
            return _view(row)

    def list_logins(self, *, actor: str) -> list[RegistryLoginView]:
        """``actor``'s own logins, by host."""
        query = (
            select(RegistryLoginRow)
            .where(RegistryLoginRow.owner == actor)
            .order_by(RegistryLoginRow.host)
        )
        with self.store.read() as session:
            return [_view(row) for row in session.scalars(query)]

    def delete(self, host: str, *, actor: str) -> None:
        """Forget ``actor``'s login at ``host``."""
        with self.store.write() as session:
            row = session.get(RegistryLoginRow, (actor, host))
            if row is None:
                raise NotFound(f"you have no saved login for registry {host}")
            session.delete(row)
            self.policy.audit.record(
                session, Actor.user(actor), "registry_login.delete", f"registry:{host}"
            )

    def credentials_for(self, owner: str, host: str) -> Credentials | None:
        """``owner``'s saved login at ``host``, for ``owner``'s own requests only."""
        with self.store.read() as session:
            row = session.get(RegistryLoginRow, (owner, host))
            if row is None:
                return None
            username, sealed = row.username, row.ciphertext
        try:
            return Credentials(username, _password(self.box.open(sealed), owner, host))
        except (Unreadable, OSError) as error:
            log.error(
                "the saved login of %s for registry %s cannot be read: %s", owner, host, error
            )
            raise Conflict(
                f"your saved login for registry {host} cannot be read with this server's key "
                f"(the pool's key file was replaced or differs between servers); save it again "
                f"with `gpuyard images login {host}`"
            ) from None
