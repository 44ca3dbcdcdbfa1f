"""Writes that fail because the disk is full, recognised whatever the driver said.

SQLite says ``SQLITE_FULL`` ("database or disk is full"), PostgreSQL SQLSTATE ``53100``
(``disk_full``), a file write ``ENOSPC`` or ``EDQUOT``; SQLAlchemy wraps the first two. The store
turns each into :class:`~gpuyard.errors.StorageFull` (503), so a full disk is a clear answer that
changes nothing, not a 500 (docs/security.md#logs-and-disk-space).
"""

from __future__ import annotations

import errno
import sqlite3

__all__ = ["FULL_ERRNOS", "is_storage_full"]

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_POSTGRES_DISK_FULL = "53100"


def is_storage_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it wraps or was raised from, says the disk is full."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        found = stack.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, OSError) and found.errno in FULL_ERRNOS:
            return True
        if isinstance(found, sqlite3.Error) and (
            getattr(found, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            or "database or disk is full" in str(found)
        ):
            return True
        if getattr(found, "sqlstate", None) == _POSTGRES_DISK_FULL:
            return True
        orig = getattr(found, "orig", None)
        stack.extend([orig if isinstance(orig, BaseException) else None])
        stack.extend([found.__cause__, found.__context__])
    return False
