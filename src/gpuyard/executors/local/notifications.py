"""The executor's notification socket: supervisors poke it on start and exit, naming their
worker, and the controller is woken up for that worker.

An abstract unix datagram socket (``\\0gpuyard-<digest of home>``): nothing on disk, and it
vanishes with the process. Anyone on the machine can send to it, so a poke is believed only
from the worker's supervisor: the kernel tells the sender's pid (``SO_PASSCRED``), which must
be the supervisor the executor knows for that worker (pid and start time), or, for a worker
it has not seen yet (after a restart), a process running that worker's supervisor command.
Anything else is dropped.

A supervisor pokes "exited" just before it exits; the callback waits for that exit (a pidfd
becomes readable), so that a ``status`` call made at once sees the supervisor gone and
believes its exit record.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from gpuyard.models.worker import WorkerKey
from gpuyard.models.workerdir import Poke

__all__ = ["Listener"]

log = logging.getLogger(__name__)

EXIT_WAIT = 2.0
"""Seconds to wait for a supervisor to exit after its "exited" poke before calling back anyway."""
_CREDENTIALS = struct.Struct("3i")


class Listener:
    """Receives pokes on a thread of its own and calls ``callback(key)`` for each believed one:
    ``is_supervisor(pid, key)`` says whether the sender is that worker's supervisor;
    ``on_exit(pid)`` is called once a supervisor that said it exits has."""

    def __init__(
        self,
        address: str,
        callback: Callable[[WorkerKey | None], None],
        *,
        is_supervisor: Callable[[int, WorkerKey], bool],
        on_exit: Callable[[int], None],
    ) -> None:
        self.callback = callback
        self.is_supervisor = is_supervisor
        self.on_exit = on_exit
        self.dropped = 0
        """Pokes not believed (not from the worker's supervisor, or not a poke)."""
        self._closing = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self.sock.bind("\0" + address)
        except OSError:
            self.sock.close()
            raise
        self._thread = threading.Thread(
            target=self._run, name="gpuyard-executor-notify", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self.sock.close()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        waiting: dict[int, _Exiting] = {}  # by pidfd
        try:
            while not self._closing:
                timeout = None
                if waiting:
                    soonest = min(e.deadline for e in waiting.values())
                    timeout = max(0, int((soonest - time.monotonic()) * 1000) + 1)
                for fd, _ in poller.poll(timeout):
                    if fd == self.sock.fileno():
                        if not self._receive(poller, waiting):
                            return
                    elif fd in waiting:
                        self._done(poller, waiting, fd)
                now = time.monotonic()
                for fd in [fd for fd, e in waiting.items() if e.deadline <= now]:
                    self._done(poller, waiting, fd)
        finally:
            for fd in waiting:
                os.close(fd)

    def _receive(self, poller: select.poll, waiting: dict[int, _Exiting]) -> bool:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(1024, socket.CMSG_SPACE(_CREDENTIALS.size))
        except OSError:
            return False
        if not data:
            return not self._closing
        sender = _sender(ancillary)
        poke = self._believed(data, sender)
        if poke is None or sender is None:
            self.dropped += 1
            return True
        key = WorkerKey(poke.job, poke.attempt, poke.rank)
        if poke.event == "exited":
            try:
                pidfd = os.pidfd_open(sender)
            except (AttributeError, OSError):  # already reaped, or an old kernel
                self.on_exit(sender)
            else:
                poller.register(pidfd, select.POLLIN)
                waiting[pidfd] = _Exiting(key, sender, time.monotonic() + EXIT_WAIT)
                return True
        self._call(key)
        return True

    def _done(self, poller: select.poll, waiting: dict[int, _Exiting], fd: int) -> None:
        exiting = waiting.pop(fd)
        poller.unregister(fd)
        os.close(fd)
        self.on_exit(exiting.pid)
        self._call(exiting.key)

    def _call(self, key: WorkerKey) -> None:
        try:
            self.callback(key)
        except Exception:  # one failing callback must not end the listener
            log.exception("the wake-up callback failed for %s", key)

    def _believed(self, data: bytes, sender: int | None) -> Poke | None:
        if sender is None:
            return None
        try:
            poke = Poke.model_validate_json(data)
        except ValidationError:
            return None
        key = WorkerKey(poke.job, poke.attempt, poke.rank)
        return poke if self.is_supervisor(sender, key) else None


@dataclass(frozen=True, slots=True)
class _Exiting:
    """A supervisor that said it exits: wait for its pidfd, then call back for its worker."""

    key: WorkerKey
    pid: int
    deadline: float


def _sender(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _uid, _gid = _CREDENTIALS.unpack(data[: _CREDENTIALS.size])
            return int(pid)
    return None
