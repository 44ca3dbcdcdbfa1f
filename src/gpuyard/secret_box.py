"""The pool's secret key, and what it seals: secrets the pool keeps for its users (a
registry login's password), encrypted in the database with Fernet (AES-128-CBC and
HMAC-SHA256, from ``cryptography``; docs/images.md#registry-logins).

The key is one file (``GPUYARD_SECRETS_KEY_FILE``, default ``<home>/secrets.key``), made the
first time a secret is sealed: written whole under a temporary name, mode ``0600`` from the
start, then linked into place, which fails when another process made it meanwhile (then its
key is used), so two servers starting at once never hold different keys and no reader sees a
half-written one. It is read at each use and never made by a read: a server whose key is
missing or different from the one that sealed a secret cannot read it, and says that the
secret must be saved again, never what it held. Servers sharing one database need the same
key file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["SecretBox", "Unreadable"]

_MAX_KEY_FILE = 4096


class Unreadable(Exception):
    """A sealed secret this key cannot open (or no key at all); the message names the key
    file, never the secret."""


class SecretBox:
    """Seals and opens short secrets with the key in ``key_file``."""

    def __init__(self, key_file: Path) -> None:
        self.key_file = key_file

    def __repr__(self) -> str:
        return f"SecretBox({str(self.key_file)!r})"

    def seal(self, secret: str) -> str:
        """``secret`` encrypted and authenticated (ASCII text); makes the key if missing."""
        return self._fernet(create=True).encrypt(secret.encode()).decode("ascii")

    def open(self, sealed: str) -> str:
        """The secret :meth:`seal` returned ``sealed`` for, with this key."""
        try:
            return self._fernet(create=False).decrypt(sealed.encode("ascii")).decode()
        except (InvalidToken, UnicodeError):
            raise Unreadable(
                f"it was sealed with another key than {self.key_file} (the pool's key file "
                "was replaced, or servers sharing the database have different ones)"
            ) from None

    def _fernet(self, *, create: bool) -> Fernet:
        try:
            key = self._read()
        except FileNotFoundError:
            if not create:
                raise Unreadable(f"the pool's key file {self.key_file} is missing") from None
            key = self._make()
        try:
            return Fernet(key)
        except ValueError:
            raise Unreadable(
                f"the pool's key file {self.key_file} does not hold a key (32 bytes, url-safe "
                "base64, as Fernet.generate_key() writes)"
            ) from None

    def _read(self) -> bytes:
        fd = os.open(self.key_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as data:
            return data.read(_MAX_KEY_FILE).strip()

    def _make(self) -> bytes:
        """A new key in ``key_file``, unless another process made one first (then that)."""
        self.key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = Fernet.generate_key()
        fd, temporary = tempfile.mkstemp(dir=self.key_file.parent, prefix=".secrets-key.")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(key + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.link(temporary, self.key_file)  # fails if it exists: never replaces a key
        except FileExistsError:
            return self._read()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return key
