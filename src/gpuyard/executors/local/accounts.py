"""The OS accounts workers run as: looked up, made when they are the pool's, never root.

A launch names its account (``WorkerLaunch.run_as``, docs/security.md). Here that name
becomes the ids the supervisor switches to:

- an account that exists is used, unless it has uid 0 or primary group 0 (an admin mapping
  to ``toor`` is refused like one to ``root``);
- a missing account named ``gpy-…`` is the pool's own: it is made with ``useradd --system``
  (no home, no login shell, a group of its own), one at a time: a lock in this process, a
  lock file beside the pool's data for other processes of the same pool, and for anyone else
  ``useradd``'s own lock (its "already exists" means someone else made it: it is looked up
  again);
- a missing account of any other name was mapped by an admin, who has to make it: the
  launch fails saying so.

Every failure is an :class:`AccountError` whose message is one readable sentence.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuyard.models.worker import POOL_ACCOUNT_PREFIX

__all__ = ["USERADD", "Account", "AccountError", "Accounts"]

USERADD = (
    "useradd",
    "--system",
    "--no-create-home",
    "--home-dir",
    "/nonexistent",
    "--shell",
    "/usr/sbin/nologin",
    "--user-group",
)
"""How a pool account is made; the name follows."""
USERADD_LOCKED = 10
"""useradd's exit status when another process holds /etc/passwd's lock."""
USERADD_TRIES = 20


class AccountError(Exception):
    """An account no job can run as, or one that could not be made; the message says why."""


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    """Every group it is in (its primary group included), as ``initgroups`` would set."""


class Accounts:
    def __init__(self, lock_file: Path) -> None:
        self.lock_file = lock_file
        self._lock = threading.Lock()

    def resolve(self, name: str) -> Account:
        """The account ``name``; made first when it is a missing pool account."""
        entry = _lookup(name)
        if entry is None:
            if not name.startswith(POOL_ACCOUNT_PREFIX):
                raise AccountError(
                    f"the OS account {name!r} that the job's owner is mapped to does not "
                    "exist; an admin creates it (or maps the user to another account)"
                )
            entry = self._make(name)
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise AccountError(
                f"refusing to run the job as the OS account {name!r}: it has "
                f"{'uid' if entry.pw_uid == 0 else 'primary group'} 0 (root's); an admin maps "
                "the user to an unprivileged account"
            )
        try:
            groups = tuple(os.getgrouplist(name, entry.pw_gid))
        except OSError as exc:
            raise AccountError(f"cannot read the groups of {name!r}: {exc.strerror}") from None
        return Account(name, entry.pw_uid, entry.pw_gid, groups)

    def _make(self, name: str) -> pwd.struct_passwd:
        with self._lock, _FileLock(self.lock_file):
            entry = _lookup(name)  # made meanwhile by another thread or process
            if entry is not None:
                return entry
            problem = _useradd(name)
            entry = _lookup(name)  # useradd may have failed because someone made it first
            if entry is None:
                raise AccountError(f"cannot create the OS account {name!r}: {problem}")
            return entry


class _FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *_exc: object) -> None:
        os.close(self.fd)  # releases the lock


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _useradd(name: str) -> str:
    """Run useradd (retried while /etc/passwd is locked); what went wrong, or ""."""
    problem = ""
    for _ in range(USERADD_TRIES):
        try:
            done = subprocess.run(
                [*USERADD, name],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return "useradd is not installed (the passwd package)"
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"useradd failed: {exc}"
        if done.returncode == 0:
            return ""
        lines = (done.stderr or done.stdout).strip().splitlines()
        problem = lines[-1] if lines else f"useradd exited with status {done.returncode}"
        if done.returncode != USERADD_LOCKED:
            return problem
        time.sleep(0.1)
    return problem
