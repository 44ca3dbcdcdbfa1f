"""The node agent: one named, detached Ray actor per Ray node, which runs that node's workers.

It is the local executor, pinned to one node: every worker it launches runs under the same
crash-only supervisor (:mod:`gpuyard.executors.local.supervisor`), with the same worker
directory protocol, on the node's own disk (``<node home>/jobs/…`` and ``supervisors/…``). Logs
and control files stay on the node; the control plane reads them through this actor
(:meth:`NodeAgent.read_logs`, by offset) and keeps its own copy.

The agent holds no state the control plane needs: handles carry everything, so a control plane
that restarts finds the agent by its name and asks about the same handles (adoption), and an
agent that restarts finds the supervisors by their handles as the local executor would.

**Tied to the node's Ray membership.** Each supervisor is started under ``setpriv
--pdeathsig TERM`` from a thread of the agent that lives as long as the agent, so when the
agent's process dies (its raylet was killed, the node left the cluster, the actor was killed)
every supervisor of the node gets SIGTERM and stops its worker (SIGTERM, then SIGKILL of the
whole worker after its graceful period) and records the exit. The control plane has meanwhile
reported those workers lost and re-placed their jobs: a worker must not outlive the membership
that let the control plane account for it. Supervisors stay in sessions of their own (not the
actor's process group), so that Ray's own clean-up of a worker's process group does not kill
them before they have stopped their jobs.

This module is imported on the nodes by Ray; it imports ``ray`` only in what runs there.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.machine import Machine, detect_machine
from gpuyard.executors.local.node_images import ImagesConfig
from gpuyard.models.health import Finding
from gpuyard.models.usage import NodeUsage, WorkerUsage
from gpuyard.models.worker import (
    ControlState,
    Handle,
    Notice,
    SlurmStep,
    WorkerLaunch,
    WorkerStatus,
)

__all__ = ["NodeAgent", "agent_name"]

T = TypeVar("T")

PDEATHSIG = ("setpriv", "--pdeathsig", "TERM")


def agent_name(node_id: str) -> str:
    """The agent's actor name on the Ray node ``node_id`` (in the pool's namespace)."""
    return f"gpuyard-agent-{node_id}"


class _Spawner:
    """One thread, alive as long as the agent, that starts every supervisor: the parent
    death signal is sent when the thread that forked a process ends, not the process."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="gpuyard-spawner", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, future = self._work.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller, whatever it is
                future.set_exception(exc)

    def call(self, fn: Callable[[], T]) -> T:
        future: Future[T] = Future()
        self._work.put((fn, future))
        return future.result()


class NodeAgent:
    """What runs in the actor (``ray.remote(NodeAgent)`` with the node's affinity)."""

    def __init__(self, home: str, node_name: str, gpus: int, cpus: float, memory: int) -> None:
        machine = detect_machine()
        self.home = home
        self.node_name = node_name
        self.machine = Machine(
            hostname=node_name,
            cpus=machine.cpus,
            memory=machine.memory,
            gpus=machine.gpus,
            driver_version=machine.driver_version,
        )
        self._spawner = _Spawner()
        self.local = LocalExecutor(
            Path(home),
            machine=self.machine,
            gpus_per_node=gpus,
            cpus_per_node=cpus,
            memory_per_node=memory,
            supervisor_prefix=PDEATHSIG,
            # The control plane copies each log by offset as it grows (executors/ray/executor),
            # which a drop would break: Ray nodes' logs are not capped yet (docs/security.md).
            log_max=0,
        )
        self._lock = threading.Lock()
        self._images: ImagesConfig | None = None
        """The images config the agent's executor was last given (None: no images yet)."""

    def _use_images(self, config: ImagesConfig | None) -> None:
        """Run jobs' images as ``config`` says: each call that needs it brings it, since an
        agent may outlive the pool that started it."""
        with self._lock:
            if config is None or config == self._images:
                return
            old, self.local.images = self.local.images, config.node_images(Path(self.home))
            self._images = config
        if old is not None:
            old.close()

    # -- what the control plane learns once ------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Who this agent is: its node's facts that Ray does not give (GPU devices, their
        kind), where gpuyard's tools are here, and the base environment of its workers."""
        import ray

        node = self.local.nodes()[0]
        # The allowlist of models/environment.py (no RAY_*, no secrets of the agent's).
        env = dict(self.local.base_env(node.name))
        tools = self.local.tools()
        return {
            "node": self.node_name,
            "node_id": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "python": sys.executable,
            "gpu_model": node.gpu_model,
            "gpu_devices": list(node.gpu_devices),
            "labels": dict(node.labels),
            "env": env,
            "tools": {
                "python": tools.python,
                "rexec": tools.rexec,
                "slurm": tools.slurm,
                "check": tools.check,
            },
            "warnings": self.local.warnings(),
            "unreachable_home": self.local.unreachable_home(),
        }

    # -- workers ----------------------------------------------------------------------------

    def launch(self, request: WorkerLaunch, images: ImagesConfig | None = None) -> Handle:
        self._use_images(images)
        return self._spawner.call(lambda: self.local.launch(request))

    def holds_image(self, images: ImagesConfig, ref: str) -> bool:
        """Whether this node has the image ``ref`` already (no pull to announce)."""
        self._use_images(images)
        return self.local.holds_image(self.node_name, ref)

    def pull_image(self, images: ImagesConfig, ref: str) -> int:
        """Pull ``ref`` here unless it is here: the bytes pulled (0: it was here)."""
        self._use_images(images)
        return self.local.pull_image(self.node_name, ref, pulling=lambda: None)

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]:
        with self._lock:
            return self.local.status(handles)

    def terminate(self, handle: Handle, grace: float) -> None:
        self.local.terminate(handle, grace)

    def kill(self, handle: Handle) -> None:
        self.local.kill(handle)

    def notify(self, handle: Handle, notice: Notice) -> None:
        self.local.notify(handle, notice)

    def signal(self, handle: Handle, signum: int, steps: bool) -> None:
        self.local.signal(handle, signum, steps=steps)

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        return self.local.control(handles)

    def slurm_steps(self, handle: Handle) -> list[SlurmStep]:
        return self.local.slurm_steps(handle)

    def usage(self, handles: Sequence[Handle]) -> list[WorkerUsage | None]:
        with self._lock:
            return self.local.usage(handles)

    def node_usage(self) -> dict[str, NodeUsage]:
        return self.local.node_usage()

    def read_logs(self, requests: Sequence[tuple[Handle, int, int]]) -> list[tuple[bytes, int]]:
        """Chunks of several workers' logs at once: (handle, offset, limit) each."""
        return [self.local.read_log(h, offset, limit) for h, offset, limit in requests]

    def read_logs_one(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        return self.local.read_log(handle, offset, limit)

    def remove_job(self, job_id: int) -> None:
        self.local.remove_job(job_id)

    def memory_jobs(self) -> set[int]:
        return self.local.memory_jobs()

    def drop_memory(self, job_id: int) -> None:
        self.local.drop_memory(job_id)

    def inspect(self) -> dict[str, list[Finding]]:
        return self.local.inspect()

    def ping(self) -> int:
        return os.getpid()
