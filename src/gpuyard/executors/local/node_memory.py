"""A job's node memory for the checkpoint service (docs/checkpoints.md).

On each node a job runs on, it gets one directory, ``<home>/memory/<node>/<job>``: a tmpfs of
its own of at most the pool's ``checkpoint_memory`` bytes (a share of the node's memory or a
size), owned by the job's account, mode 0700. It is made when the job's first worker there is
launched and kept across the job's restarts on that node (a restart in place loads from it),
and dropped (unmounted) once the job has ended: the controller's inspection asks which jobs
hold some (:meth:`NodeMemory.jobs`) and drops those that ended (:meth:`NodeMemory.drop`).

The tmpfs's size is the cap a job cannot pass, whatever it writes there; its pages are charged
to the memory cgroup of the worker that wrote them (they count in its memory limit). A pool not
run by root cannot mount one: its jobs get no node memory (the service then saves to storage).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import threading
from pathlib import Path

from gpuyard.executors.local import untrusted
from gpuyard.executors.local.accounts import Account

__all__ = ["MEMORY_DIR_VARIABLE", "MEMORY_LIMIT_VARIABLE", "NodeMemory"]

log = logging.getLogger(__name__)

MEMORY_DIR_VARIABLE = "GPUYARD_CHECKPOINT_MEMORY_DIR"
MEMORY_LIMIT_VARIABLE = "GPUYARD_CHECKPOINT_MEMORY_LIMIT"
_NODE_NAME = re.compile(r"^[\w.-]{1,253}$")


class NodeMemory:
    """The node memory of this executor's jobs, under ``root`` (``<home>/memory``)."""

    def __init__(self, root: Path, *, enabled: bool) -> None:
        self.root = root
        self.enabled = enabled
        """False: no node memory (a pool not run by root, or the setting is 0)."""
        self._lock = threading.Lock()

    def path(self, node: str, job_id: int) -> Path:
        return self.root / node / str(job_id)

    def ensure(self, node: str, job_id: int, size: int, account: Account | None) -> Path | None:
        """The job's node memory on ``node``, mounted if it is not yet; None without one."""
        if not self.enabled or size <= 0 or not _NODE_NAME.match(node) or node in (".", ".."):
            return None
        path = self.path(node, job_id)
        with self._lock:
            if os.path.ismount(path):
                return path
            try:
                self._make_mount_point(node, job_id)
                self._mount(path, size, account)
            except (OSError, untrusted.Unreadable, subprocess.SubprocessError) as exc:
                log.warning("job %s gets no checkpoint memory on %s: %s", job_id, node, exc)
                return None
        return path

    def _make_mount_point(self, node: str, job_id: int) -> None:
        """``root/node/job``, root's, each step opened without following a link."""
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        opened = [os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)]
        try:
            os.fchmod(opened[0], 0o711)
            opened.append(untrusted.make_dir(opened[0], node, 0o711, (os.geteuid(), os.getegid())))
            opened.append(untrusted.make_dir(opened[1], str(job_id), 0o700))
        finally:
            for fd in opened:
                os.close(fd)

    @staticmethod
    def _mount(path: Path, size: int, account: Account | None) -> None:
        uid, gid = (account.uid, account.gid) if account else (os.geteuid(), os.getegid())
        options = f"size={size},mode=0700,uid={uid},gid={gid},nosuid,nodev,noexec"
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "gpuyard-checkpoints", str(path)],
            check=True,
            capture_output=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )

    def jobs(self) -> set[int]:
        """The jobs holding node memory on any node."""
        held: set[int] = set()
        with contextlib.suppress(OSError):
            for node in self.root.iterdir():
                with contextlib.suppress(OSError):
                    held.update(int(p.name) for p in node.iterdir() if p.name.isdigit())
        return held

    def drop(self, job_id: int) -> None:
        """Unmount and remove the job's node memory on every node."""
        with self._lock, contextlib.suppress(OSError):
            for node in self.root.iterdir():
                path = node / str(job_id)
                if os.path.ismount(path):
                    subprocess.run(
                        ["umount", "--lazy", str(path)],
                        check=False,
                        capture_output=True,
                        timeout=30,
                        stdin=subprocess.DEVNULL,
                    )
                with contextlib.suppress(OSError):
                    path.rmdir()
