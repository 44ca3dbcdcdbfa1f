"""Which OS account a job runs as: its owner's (docs/security.md, "Jobs run as their owner").

Pure: a gpuyard user name and the account an admin mapped it to (``users.os_user``, or None)
in, an account name out. Rules:

- an admin's mapping wins, as given, once it is a valid account name; ``root`` is refused
  (an account of another name with uid 0 is refused by the executor, which looks it up);
- otherwise the pool's own account ``gpy-<name>``: ``<name>`` is the user name when it is
  already made of ``[a-z0-9_-]`` and short enough (the whole name fits in 32 characters, the
  limit of ``useradd``); else the name lowercased, other characters replaced by ``_``,
  truncated, and followed by ``-`` and a hash of the user name, so that two users never get
  the same account. A user name that itself ends like such a hash is hashed too, so that no
  kept name can equal a hashed one.
"""

from __future__ import annotations

import hashlib
import re

from gpuyard.models.worker import POOL_ACCOUNT_PREFIX

__all__ = ["MAX_ACCOUNT", "AccountRefused", "os_account", "pool_account"]

MAX_ACCOUNT = 32
"""Characters of an account name (``useradd``'s limit on Linux)."""
HASH_CHARS = 10
"""Hex digits of the hash that sets apart names that had to be changed (40 bits)."""

_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]*\$?")
"""What ``useradd`` accepts by default (Debian's and shadow's rule)."""
_KEPT = re.compile(r"[a-z0-9_-]+")
_LOOKS_HASHED = re.compile(rf".*-[0-9a-f]{{{HASH_CHARS}}}")


class AccountRefused(ValueError):
    """A mapping no job may run under; the message says why and what to do."""


def os_account(user: str, mapped: str | None) -> str:
    """The OS account of ``user``'s jobs, given the account an admin mapped it to (or None)."""
    if mapped is None or mapped == "":
        return pool_account(user)
    how = f"`gpuyard users set {user} --os-user ACCOUNT`"
    if mapped == "root":
        raise AccountRefused(
            f"user {user!r} is mapped to the OS account 'root', and jobs never run as root; "
            f"an admin maps them to another account with {how}"
        )
    if len(mapped) > MAX_ACCOUNT or not _ACCOUNT.fullmatch(mapped):
        raise AccountRefused(
            f"user {user!r} is mapped to {mapped!r}, which is not a valid OS account name "
            f"([a-z_][a-z0-9_-]*, at most {MAX_ACCOUNT} characters); an admin fixes it with "
            f"{how}"
        )
    return mapped


def pool_account(user: str) -> str:
    """``gpy-<name>``, the account the pool makes for a user nobody mapped."""
    room = MAX_ACCOUNT - len(POOL_ACCOUNT_PREFIX)
    if _KEPT.fullmatch(user) and len(user) <= room and not _LOOKS_HASHED.fullmatch(user):
        return POOL_ACCOUNT_PREFIX + user
    digest = hashlib.sha256(user.encode()).hexdigest()[:HASH_CHARS]
    clean = re.sub(r"[^a-z0-9_-]", "_", user.lower())[: room - HASH_CHARS - 1] or "_"
    return f"{POOL_ACCOUNT_PREFIX}{clean}-{digest}"
