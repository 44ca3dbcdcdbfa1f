"""A worker's mount namespace: private /tmp, /var/tmp and /dev/shm, and hidden GPU devices.

Run by the supervisor's child between fork and exec, as root, after the workspace's bind
mounts (:class:`gpuyard.executors.local.supervisor.Binder`) and before it drops to the job's
account. What it sets up dies with the worker's last process (the namespace has no other
holder), so nothing the job left there outlives it: docs/security.md, "What is protected".

- Each private directory gets an empty tmpfs (mode 1777, ``nosuid``, ``nodev``). Its pages are
  charged to the memory cgroup of the process that writes them, the worker's, so they count in
  the worker's memory limit. Whatever the host's ``/tmp`` holds (another job's files, a link
  planted to trap this one) is out of reach.
- The host paths the worker needs below them (the pool's home, the working directory) are
  opened before the tmpfs covers them and mounted back at the same place.
- Each hidden file (another GPU's device file) is covered by an empty file of mode 0000 that
  no account but root may open. (Root is stopped by the devices cgroup on v1 only.)

Builtin modules only, like the supervisor (it starts on the path of every launch).
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PATH_FLAGS = os.O_PATH | os.O_CLOEXEC


class SandboxError(OSError):
    """A step of the sandbox failed: ``filename`` says which path."""


class Sandbox:
    """The ``sandbox`` of a supervisor's spec (:class:`gpuyard.models.workerdir.SandboxSpec`)."""

    def __init__(self, spec: dict[str, Any], account: dict[str, Any] | None = None) -> None:
        self.account = account
        """Whose rights decide what is kept: a path the job's account cannot reach on the
        host is not mounted back (root opening it would give the account a way in)."""
        self.private: list[str] = list(spec.get("private") or [])
        self.keep: list[str] = list(spec.get("keep") or [])
        self.hide: list[str] = list(spec.get("hide") or [])
        self.mask: str = spec.get("mask") or ""
        import ctypes  # only for workers with a sandbox: it costs an import

        self.libc: Any = ctypes.CDLL(None, use_errno=True)

    def _mount(
        self, source: str | None, target: str, fstype: str | None, flags: int, data: str = ""
    ) -> None:  # pragma: no cover - child side
        def enc(text: str | None) -> bytes | None:
            return None if text is None else text.encode()

        if self.libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data or None)):
            import ctypes

            code = ctypes.get_errno() or errno.EPERM
            raise SandboxError(code, os.strerror(code), target)

    def apply(self, unshared: bool) -> None:  # pragma: no cover - child side
        """Set up the namespace; ``unshared``: the child already has one of its own."""
        if not unshared:
            if self.libc.unshare(CLONE_NEWNS) != 0:
                raise SandboxError(errno.EPERM, "cannot make a mount namespace", "unshare")
            self._mount(None, "/", None, MS_REC | MS_PRIVATE)
        kept = self._open_kept()
        mask = os.open(self.mask, PATH_FLAGS) if self.hide else -1
        try:
            for directory in self.private:
                if os.path.isdir(directory) and not os.path.islink(directory):
                    self._mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
            # The way to each kept path, made in the fresh tmpfs (nothing there to follow),
            # must let the job's account pass whatever umask the child has set for the job.
            umask = os.umask(0o022)
            try:
                for path, _ in kept:
                    os.makedirs(path, 0o755, exist_ok=True)
            finally:
                os.umask(umask)
            for path, fd in kept:
                self._mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            for path in self.hide:
                if os.path.lexists(path):
                    self._mount(f"/proc/self/fd/{mask}", path, None, MS_BIND)
        finally:
            for _, fd in kept:
                os.close(fd)
            if mask >= 0:
                os.close(mask)

    def _open_kept(self) -> list[tuple[str, int]]:  # pragma: no cover - child side
        """The kept paths that exist and the job's account can reach, opened (as the account,
        effective ids only) before a tmpfs covers them."""
        kept = []
        if self.account is not None:
            os.setgroups(self.account["groups"] or [self.account["gid"]])
            os.setegid(self.account["gid"])
            os.seteuid(self.account["uid"])
        try:
            for path in self.keep:
                try:
                    kept.append((path, os.open(path, PATH_FLAGS | os.O_DIRECTORY)))
                except OSError:  # missing, or out of the account's reach: not kept
                    continue
        finally:
            if self.account is not None:
                os.seteuid(0)
                os.setegid(0)
        return kept
