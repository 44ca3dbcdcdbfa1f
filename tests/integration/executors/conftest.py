"""Executors with real processes and real cgroups, and a teardown that leaves neither behind.

Every worker a test starts carries ``GPUYARD_CONTROL_DIR=<the test's home>/…`` in its
environment (the local executor sets it), which is how the teardown, and tests that check that
nothing of a worker survived, find its processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.executors.local import cgroups, procfs
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.worker import Handle, WorkerLaunch

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}


class TrackedExecutor(LocalExecutor):
    """A LocalExecutor that remembers what it launched, for the teardown."""

    launched: list[Handle]

    def launch(self, request: WorkerLaunch) -> Handle:
        handle = super().launch(request)
        self.launched.append(handle)
        return handle


MakeExecutor = Callable[..., TrackedExecutor]


@pytest.fixture
def make_executor(tmp_path: Path) -> Iterator[MakeExecutor]:
    made: list[TrackedExecutor] = []

    def make(home: Path | None = None, **kwargs: object) -> TrackedExecutor:
        ex = TrackedExecutor(home or tmp_path / "home", **kwargs)  # type: ignore[arg-type]
        ex.launched = []
        made.append(ex)
        return ex

    yield make
    for ex in made:
        cleanup(ex)
    kill_processes_under(tmp_path)


@pytest.fixture
def executor(make_executor: MakeExecutor) -> TrackedExecutor:
    """An executor with this machine's isolation (cgroup v1 or v2 where writable)."""
    return make_executor()


def cleanup(ex: TrackedExecutor) -> None:
    for handle in ex.launched:
        with contextlib.suppress(Exception):
            ex.kill(handle)
        identity = procfs.Identity.from_handle(handle)
        if identity is not None:
            deadline = time.monotonic() + 5
            while identity.alive(procfs.boot_id()) and time.monotonic() < deadline:
                time.sleep(0.01)
            identity.send(signal.SIGKILL, procfs.boot_id())
        with contextlib.suppress(Exception):
            ex.status([handle])  # removes the cgroup of a lost worker
        cgroup = cgroups.Cgroup.from_json(handle.get("cgroup"))
        if cgroup is not None:
            cgroup.kill()
            cgroup.remove()
    ex.close()


def processes_under(root: Path) -> list[psutil.Process]:
    """Live processes started with a control directory below ``root`` (workers' processes)."""
    found = []
    prefix = f"GPUYARD_CONTROL_DIR={root}"
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(f"{k}={v}".startswith(prefix) for k, v in proc.environ().items()):
                found.append(proc)
    # A process killed a moment ago can turn into a zombie (dead, awaiting its reaper) after
    # its environment was read: it has not outlived anything.
    return [p for p in found if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def worker_processes() -> Callable[[Path], list[psutil.Process]]:
    """``processes_under``: the live processes of the workers whose control dirs lie below a
    path (a worker's dir: that worker's)."""
    return processes_under


def kill_processes_under(root: Path) -> None:
    for proc in processes_under(root):
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.fixture(scope="session")
def isolation_reason() -> str:
    """Why cgroup tests cannot run here ("" when they can)."""
    found = cgroups.detect(f"gpuyard-probe-{uuid.uuid4().hex[:8]}")
    found.remove_parents()
    return "; ".join(found.warnings) if found.mode == cgroups.NONE else ""


@pytest.fixture
def needs_cgroup(isolation_reason: str) -> None:
    if isolation_reason:
        pytest.skip(f"no writable cgroup on this machine: {isolation_reason}")


@pytest.fixture
def unified_isolation() -> Iterator[cgroups.Isolation]:
    """cgroup v2 on the unified hierarchy, whatever controllers it has (maybe none): enough to
    test joining and killing where the machine's v2 cannot limit anything (a hybrid host)."""
    own = next(
        (
            line.split(":", 2)[2].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        ),
        None,
    )
    mounts = [m for m in cgroups._mounts("/proc/self/mountinfo") if m[2] == "cgroup2"]
    if own is None or not mounts:
        pytest.skip("no cgroup v2 hierarchy on this machine")
    base = cgroups._own_dir(mounts[0][1], mounts[0][0], own)
    if base is None:
        pytest.skip("our cgroup v2 directory is not visible")
    found = cgroups.Isolation.unified(os.path.join(base, f"gpuyard-test-{uuid.uuid4().hex[:8]}"))
    if isinstance(found, str):
        pytest.skip(found)
    yield found
    found.remove_parents()
