"""The executor conformance suite's harness (tests/integration/executors/conformance/).

A :class:`Harness` is an executor, the nodes to place workers on, and what only the harness
knows how to do on that executor: start the control plane again over the same workers, and make
a node disappear. A third executor (Kubernetes, docs/kubernetes.md) passes the suite by
providing one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

from gpuyard.executors.base import Executor
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState, WorkerStatus

__all__ = ["Harness", "cleanup", "gone", "pid_from"]

_JOB_IDS = itertools.count(int(time.time()) % 100_000 * 100)
"""Job ids unique in the session: the Ray agents' node home is shared by the tests."""


@dataclass
class Harness:
    kind: str
    executor: Executor
    nodes: list[str]
    reopen: Callable[[], Executor]
    """A new executor over the same workers: the control plane started again."""
    lose: Callable[[str], None]
    """Make a node disappear as a crash would (the local executor: its worker's supervisor;
    Ray: the node's raylet)."""
    launched: list[Handle] = field(default_factory=list)

    def request(
        self,
        script: str,
        *,
        job: int | None = None,
        rank: int = 0,
        node: str | None = None,
        grace: float = 2.0,
    ) -> WorkerLaunch:
        node = node or self.nodes[rank % len(self.nodes)]
        env = {**self.executor.base_env(node), "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        return WorkerLaunch(
            key=WorkerKey(next(_JOB_IDS) if job is None else job, 0, rank),
            node=node,
            argv=["bash", "-c", script],
            env=env,
            cwd="/",
            grace=grace,
        )

    def launch(self, request: WorkerLaunch, executor: Executor | None = None) -> Handle:
        handle = (executor or self.executor).launch(request)
        self.launched.append(handle)
        return handle

    def wait(
        self, handle: Handle, timeout: float = 30.0, executor: Executor | None = None
    ) -> WorkerStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = (executor or self.executor).status([handle])[0]
            if status.state is not WorkerState.RUNNING or time.monotonic() > deadline:
                return status
            time.sleep(0.1)

    def log(self, handle: Handle) -> str:
        data, _size = self.executor.read_log(handle, 0, 1 << 20)
        return data.decode(errors="replace")

    def wait_log(self, handle: Handle, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            log = self.log(handle)
            if text in log or time.monotonic() > deadline:
                return log
            time.sleep(0.05)


def pid_from(log: str, word: str) -> int:
    """The pid a test's script printed as ``WORD <pid>``."""
    for line in log.splitlines():
        if line.startswith(word + " "):
            return int(line.split()[1])
    raise AssertionError(f"no {word!r} line in the log: {log!r}")


def gone(pid: int, timeout: float = 15.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def cleanup(executor: Executor, handles: Sequence[Handle]) -> None:
    for handle in handles:
        with contextlib.suppress(Exception):
            executor.kill(handle)
    deadline = time.monotonic() + 10
    for handle in handles:
        with contextlib.suppress(Exception):
            while (
                executor.status([handle])[0].state is WorkerState.RUNNING
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
