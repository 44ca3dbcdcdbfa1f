"""A delegated cgroup from systemd for the pool, where systemd manages the machine's cgroups.

On a cgroup v2 host run by systemd, the cgroup ``gpuyard up`` starts in (a login session's
scope, a service without ``Delegate=``) is systemd's: the pool may neither enable controllers in
it nor move its processes around. systemd gives a process a cgroup of its own on request: a
transient scope with ``Delegate=yes`` (what ``systemd-run --scope -p Delegate=yes`` makes), whose
subtree is then the pool's, with the controllers systemd enables for delegated units (memory,
pids, cpu on current systemd). :func:`cgroups.detect` asks for one when its own cgroup cannot
delegate what workers need, before it falls back to moving processes into a leaf.

It talks to systemd with ``busctl`` (the system bus for root, the user's manager otherwise), so
gpuyard needs no D-Bus library; where there is no systemd or no ``busctl``, nothing happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence

__all__ = ["Systemd"]

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
SCOPE_WAIT = 5.0
"""Seconds to wait for systemd to move the process into the new scope."""


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


class Systemd:
    """systemd as PID 1, reached through ``busctl``; ``run`` is the seam tests replace."""

    def __init__(self, run: Runner = _run, *, root: str = "/run/systemd/system") -> None:
        self.run = run
        self.root = root

    def available(self) -> bool:
        """Whether systemd runs this machine (its runtime directory exists) and can be asked."""
        return os.path.isdir(self.root) and shutil.which("busctl") is not None

    def delegated_scope(self, unit: str, pid: int, cgroup_file: str) -> str:
        """Move process ``pid`` into a new transient scope ``unit`` with ``Delegate=yes``.
        Returns "" once ``cgroup_file`` (its /proc/PID/cgroup) names the scope, else why not."""
        bus = "--system" if os.geteuid() == 0 else "--user"
        argv = [
            "busctl",
            bus,
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            "ssa(sv)a(sa(sv))",
            unit,
            "fail",
            "3",
            "PIDs",
            "au",
            "1",
            str(pid),
            "Delegate",
            "b",
            "true",
            "CollectMode",
            "s",
            "inactive-or-failed",
            "0",
        ]
        try:
            result = self.run(argv)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"systemd: cannot run busctl: {exc}"
        if result.returncode != 0:
            return f"systemd: cannot start {unit}: {result.stderr.strip() or result.returncode}"
        deadline = time.monotonic() + SCOPE_WAIT
        while time.monotonic() < deadline:
            try:
                with open(cgroup_file, encoding="utf-8") as fh:
                    if f"/{unit}" in fh.read():
                        return ""
            except OSError as exc:
                return f"systemd: cannot read {cgroup_file}: {exc.strerror}"
            time.sleep(0.02)
        return f"systemd: {unit} was started but this process is not in it"
