"""Processes as /proc shows them, read cheaply: who a pid is, and whether it is still the same
process.

A pid alone names a process only until it exits and the number is reused; a pid with the
process's start time (field 22 of ``/proc/<pid>/stat``, clock ticks after boot) and the boot id
names it for good. The executor learns its supervisors' identities when it starts them and
keeps them in the handles the controller stores, so it never needs a pid from a file a job can
write. Everything here is a read of one small /proc file: :meth:`Identity.alive` is what
``status`` costs per running worker.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Identity",
    "Watcher",
    "boot_id",
    "by_environ",
    "cmdline",
    "environ_has",
    "kill_with_environ",
    "listener_uid",
    "oldest_running",
    "start_time",
    "with_environ",
]

_ENDED_STATES = (b"Z", b"X")
"""A zombie has exited (only its exit status waits for its parent); X is dead."""


def _stat(pid: int) -> tuple[bytes, int] | None:
    """(state, start time) from /proc/<pid>/stat, or None when there is no such process."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    found = _stat(pid)
    return None if found is None else found[1]


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> list[str]:
    """The process's argv (empty for a zombie, a kernel thread, or no such process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            data = fh.read(1 << 16)
    except OSError:
        return []
    return [part.decode(errors="replace") for part in data.split(b"\0")[:-1]]


def environ_has(pid: int, entry: str) -> bool:
    """Whether the environment the process started with holds ``entry`` (``NAME=value``)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return False
    return entry.encode() in data.split(b"\0")


def oldest_running(argv_tail: list[str], boot: str) -> Identity | None:
    """The earliest-started live process whose argv ends with ``argv_tail`` (one scan of
    /proc). A process that copies another's command line necessarily started after it."""
    found: Identity | None = None
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        argv = cmdline(pid)
        if argv[-len(argv_tail) :] != argv_tail or len(argv) != len(argv_tail) + 1:
            continue
        identity = Identity.of(pid, boot)
        if identity is not None and (found is None or identity.start_time < found.start_time):
            found = identity
    return found


def with_environ(entry: str) -> list[int]:
    """Live processes that started with ``entry`` in their environment (one scan of /proc)."""
    return [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and int(name) != os.getpid() and environ_has(int(name), entry)
    ]


def by_environ(entries: Collection[str]) -> dict[str, list[int]]:
    """For each of ``entries`` (``NAME=value``), the live processes that started with it in
    their environment: one scan of /proc for all of them, each environment read once."""
    wanted = {entry.encode(): entry for entry in entries}
    found: dict[str, list[int]] = {entry: [] for entry in entries}
    if not wanted:
        return found
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                data = fh.read(1 << 20)
        except OSError:
            continue
        for item in data.split(b"\0"):
            entry = wanted.get(item)
            if entry is not None:
                found[entry].append(int(name))
                break
    return found


def kill_with_environ(entry: str, *, timeout: float, scans: int = 20) -> int:
    """SIGKILL every live process that started with ``entry`` in its environment, and wait
    (up to ``timeout`` seconds) until each one signalled has ended. How many were found.

    One scan of /proc misses a child forked while it ran (a daemon double-forking right then),
    so scan again until a scan finds none new: a killed process forks no more, and a dead
    one's environment reads empty. A SIGKILL is only delivered once its target next runs,
    which on a loaded machine can be a while after ``kill`` returned: whoever is told that
    the processes are gone must not find one still running, hence the wait."""
    boot = boot_id()
    seen: set[int] = set()
    signalled: list[Identity] = []
    for _ in range(scans):
        fresh = [pid for pid in with_environ(entry) if pid not in seen]
        if not fresh:
            break
        seen.update(fresh)
        for pid in fresh:
            identity = Identity.of(pid, boot)
            if identity is not None and identity.send(signal.SIGKILL, boot):
                signalled.append(identity)
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while signalled and time.monotonic() < deadline:
        signalled = [identity for identity in signalled if identity.alive(boot)]
        if signalled:
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    return len(seen)


@dataclass(frozen=True, slots=True)
class Identity:
    """One process, for good: its pid, start time and the boot it started in."""

    pid: int
    start_time: int
    boot_id: str

    @classmethod
    def of(cls, pid: int, boot: str) -> Identity | None:
        found = start_time(pid)
        return None if found is None else cls(pid, found, boot)

    @classmethod
    def from_handle(cls, handle: dict[str, Any]) -> Identity | None:
        pid, start, boot = handle.get("pid"), handle.get("start_time"), handle.get("boot_id")
        if not (isinstance(pid, int) and isinstance(start, int) and isinstance(boot, str)):
            return None
        return cls(pid, start, boot)

    def alive(self, current_boot: str) -> bool:
        """Whether this very process still runs (a zombie has ended)."""
        if self.boot_id != current_boot:
            return False
        return _running(self.pid, self.start_time)

    def send(self, signum: signal.Signals, current_boot: str) -> bool:
        """Signal this process if it still runs; whether it was signalled. With a pidfd, a pid
        reused between the check and the signal cannot be hit."""
        if self.boot_id != current_boot:
            return False
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            pidfd = -1
        try:
            if not self.alive(current_boot):
                return False
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(self.pid, signum)
            return True
        except (ProcessLookupError, PermissionError):
            return False
        finally:
            if pidfd >= 0:
                with contextlib.suppress(OSError):
                    os.close(pidfd)


class Watcher:
    """Whether many processes still run, for the price of one ``poll(2)``.

    Each process (pid and start time) is checked once in /proc when first asked about, then
    held by a pidfd, which becomes readable when it exits; :meth:`refresh` polls them all at
    once. pidfds are file descriptors, so at most a quarter of this process's descriptor limit
    is used for them (256 with the common soft limit of 1024); processes beyond that, or where
    the kernel has no pidfds (before Linux 5.3), are read from /proc each time.
    """

    def __init__(self) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.capacity = 4096 if soft == resource.RLIM_INFINITY else max(0, soft // 4)
        self._fds: dict[tuple[int, int], int] = {}
        self._exited: set[int] = set()
        self._poll = select.poll()
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Find out which watched processes have exited since the last refresh."""
        with self._lock:
            if self._fds:
                self._exited = {fd for fd, _ in self._poll.poll(0)}

    def running(self, pid: int, start: int) -> bool:
        """Whether the process is still running, as of the last :meth:`refresh` for one that
        was watched then, and now for the others."""
        key = (pid, start)
        with self._lock:
            fd = self._fds.get(key)
            if fd is not None:
                if fd not in self._exited:
                    return True
                self._forget(key, fd)
                return False
            if len(self._fds) >= self.capacity:
                return _running(pid, start)
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                return _running(pid, start)
            if not _running(pid, start):  # checked with the pidfd held: it is this process
                os.close(fd)
                return False
            self._fds[key] = fd
            self._poll.register(fd, select.POLLIN)
            return True

    def _forget(self, key: tuple[int, int], fd: int) -> None:
        del self._fds[key]
        self._exited.discard(fd)
        self._poll.unregister(fd)
        os.close(fd)

    def close(self) -> None:
        with self._lock:
            for key, fd in list(self._fds.items()):
                self._forget(key, fd)


def _running(pid: int, start: int) -> bool:
    found = _stat(pid)
    return found is not None and found[1] == start and found[0] not in _ENDED_STATES


_LISTEN = "0A"


def listener_uid(address: str, port: int) -> int | None:
    """The uid of the account whose socket listens on ``address:port`` (or on every address
    at ``port``) in this network namespace, from ``/proc/net/tcp`` and ``tcp6``; None when
    nothing listens there."""
    wanted = {_hex_address(address), _hex_address("0.0.0.0"), _hex_address("::")}  # noqa: S104
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    local, state, uid = fields[1], fields[3], fields[7]
                    host, _, hex_port = local.rpartition(":")
                    if state == _LISTEN and int(hex_port, 16) == port and host in wanted:
                        return int(uid)
        except OSError:
            continue
    return None


def _hex_address(address: str) -> str:
    """An address as /proc/net/tcp writes it: its bytes in host order, 32 bits at a time."""
    import ipaddress
    import struct

    packed = ipaddress.ip_address(address).packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words)
