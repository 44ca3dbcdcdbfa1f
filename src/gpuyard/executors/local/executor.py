"""The local executor: runs workers on this machine, each under its own supervisor.

Worker files live under ``<home>/jobs/<job>/attempts/<attempt>/worker-<rank>/`` (see
:mod:`gpuyard.executors.local.supervisor`); the truth about a worker is in those files and in
the supervisor's lock, never in this process's memory, so a restarted control plane sees
exactly what the one before it saw.

With ``virtual_nodes=N`` the machine is presented as N nodes ``node0 … node{N-1}``, each with its
own loopback address (127.0.0.2, 127.0.0.3, …) and its own slice of GPUs, CPUs and memory, so
that multi-node jobs and gang logic run for real on one machine. When the machine has fewer
GPUs than N x gpus_per_node, the nodes present virtual GPUs (labelled ``gpu.kind=virtual``):
they are scheduled like real ones but no device stands behind them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import marshal
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from gpuyard.executors import rexec as rexec_module
from gpuyard.executors.base import LaunchError
from gpuyard.executors.local import supervisor as supervisor_module
from gpuyard.executors.local.machine import Machine, detect_machine
from gpuyard.models.worker import (
    PREEMPT_SIGNAL,
    ControlState,
    Handle,
    NodeInfo,
    Notice,
    Tools,
    WorkerKey,
    WorkerLaunch,
    WorkerState,
    WorkerStatus,
)

__all__ = ["LocalExecutor"]

SUPERVISOR = Path(supervisor_module.__file__).resolve()
REXEC = Path(rexec_module.__file__).resolve()
_STARTUP_GRACE = 15.0
"""Seconds a supervisor may take to write state.json before it counts as lost."""
_FIRST_VIRTUAL_ADDRESS = ipaddress.IPv4Address("127.0.0.2")


class LocalExecutor:
    name = "local"

    def __init__(
        self,
        home: Path,
        *,
        virtual_nodes: int = 0,
        gpus_per_node: int | None = None,
        cpus_per_node: float | None = None,
        memory_per_node: int | None = None,
        machine: Machine | None = None,
    ) -> None:
        self.home = home
        self.jobs_root = home / "jobs"
        self.machine = machine or detect_machine()
        self._nodes = _layout(
            self.machine, virtual_nodes, gpus_per_node, cpus_per_node, memory_per_node
        )
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._children_lock = threading.Lock()
        digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:20]
        self._notify_name = f"gpuyard-{digest}"
        self._listener: socket.socket | None = None

    # -- nodes and paths ------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    @property
    def interface(self) -> str:
        # Virtual nodes live on loopback addresses; a single node reaches itself there too.
        return "lo"

    def tools(self) -> Tools:
        return Tools(python=sys.executable, rexec=str(REXEC))

    def base_env(self, node: str) -> Mapping[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return env

    def job_dir(self, job_id: int) -> str:
        return str(self.jobs_root / str(job_id))

    def worker_dir(self, job_id: int, attempt: int, rank: int) -> Path:
        return self.jobs_root / str(job_id) / "attempts" / str(attempt) / f"worker-{rank}"

    # -- lifecycle ------------------------------------------------------------------------

    def launch(self, request: WorkerLaunch) -> Handle:
        key = request.key
        wd = self.worker_dir(key.job_id, key.attempt, key.rank)
        handle: Handle = {"dir": str(wd), "log": str(wd / "log")}
        try:
            (wd / "control").mkdir(parents=True, exist_ok=True)
            job_dir = Path(self.job_dir(key.job_id))
            (job_dir / "outputs").mkdir(exist_ok=True)
            (job_dir / "checkpoints").mkdir(exist_ok=True)
            if _exists(wd, "exit.json") or _exists(wd, "state.json") or _locked(wd):
                return handle  # launched before (a retry after a crash): adopt, never duplicate
            spec = {
                "argv": list(request.argv),
                "env": dict(request.env),
                "cwd": request.cwd,
                "grace": request.grace,
                "log": str(wd / "log"),
                "files": {path: (f.content, f.mode) for path, f in request.files.items()},
                "binds": [(b.target, b.source, b.readonly) for b in request.binds],
                "notify": self._notify_name,
            }
            _write_marshal(wd / "spec.marshal", spec)
            with open(wd / "supervisor.err", "ab") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(SUPERVISOR), str(wd)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as exc:
            raise LaunchError(f"cannot launch {key} on {request.node}: {exc}") from exc
        with self._children_lock:
            self._children[str(wd)] = proc
        handle["pid"] = proc.pid
        handle["spawned_at"] = time.time()
        return handle

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]:
        self._reap()
        return [self._status(h) for h in handles]

    def _status(self, handle: Handle) -> WorkerStatus:
        wd = Path(handle["dir"])
        exit_info = _read_json(wd / "exit.json")
        if exit_info is not None:
            return WorkerStatus(
                WorkerState.EXITED,
                exit_code=int(exit_info["exit_code"]),
                signal=exit_info.get("signal"),
                escalated=bool(exit_info.get("escalated")),
                finished_at=exit_info.get("finished_at"),
                message=exit_info.get("message", ""),
            )
        if _locked(wd):
            return WorkerStatus(WorkerState.RUNNING)
        if _read_json(wd / "exit.json") is not None:  # it exited between the two reads
            return self._status(handle)
        if not _exists(wd, "state.json"):
            with self._children_lock:
                child = self._children.get(str(wd))
            if child is not None and child.poll() is None:
                return WorkerStatus(WorkerState.RUNNING)  # still starting
            if time.time() - float(handle.get("spawned_at", 0)) < _STARTUP_GRACE:
                return WorkerStatus(WorkerState.RUNNING)
        err = _tail(wd / "supervisor.err")
        return WorkerStatus(
            WorkerState.LOST,
            message="the worker's supervisor ended without recording an exit"
            + (f": {err}" if err else ""),
        )

    def terminate(self, handle: Handle, grace: float) -> None:
        wd = Path(handle["dir"])
        _write_json(wd / "terminate.json", {"grace": grace})
        state = _read_json(wd / "state.json") or {}
        pid = state.get("supervisor_pid") or handle.get("pid")
        if pid and _is_supervisor(int(pid), wd):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 15)
            return
        if "pgid" in state:  # no supervisor to escalate: signal the group directly
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(state["pgid"]), 15)

    def kill(self, handle: Handle) -> None:
        state = _read_json(Path(handle["dir"]) / "state.json") or {}
        if "pgid" in state:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(state["pgid"]), 9)

    def notify(self, handle: Handle, notice: Notice) -> None:
        control = Path(handle["dir"]) / "control"
        control.mkdir(parents=True, exist_ok=True)
        _write_json(
            control / "preempt.json",
            {
                "requested_at": notice.requested_at,
                "deadline": notice.deadline,
                "reason": notice.reason,
                "by": notice.by,
            },
        )
        state = _read_json(Path(handle["dir"]) / "state.json") or {}
        pgid = state.get("pgid")
        try:
            listeners = list((control / "listeners").iterdir())
        except FileNotFoundError:
            return
        for entry in listeners:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            # A listener file can outlive its process (os._exit), and pids are reused: signal
            # only a live process that is still in the worker's process group.
            try:
                if pgid is None or os.getpgid(pid) != int(pgid):
                    continue
                os.kill(pid, getattr(signal, PREEMPT_SIGNAL))
            except (ProcessLookupError, PermissionError):
                continue

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        return [_control_state(Path(h["dir"]) / "control") for h in handles]

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        try:
            with open(handle["log"], "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(offset)
                return fh.read(limit), size
        except FileNotFoundError:
            return b"", 0

    def remove_job(self, job_id: int) -> None:
        shutil.rmtree(self.jobs_root / str(job_id), ignore_errors=True)

    # -- notifications --------------------------------------------------------------------

    def set_wakeup(self, callback: Callable[[WorkerKey | None], None]) -> None:
        """Listen on an abstract unix socket that supervisors poke on start and exit."""
        if self._listener is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind("\0" + self._notify_name)
        except OSError:
            sock.close()
            return  # another process listens for this home; we fall back to polling
        self._listener = sock

        def listen() -> None:
            while True:
                try:
                    sock.recv(4096)
                except OSError:
                    return
                callback(None)

        threading.Thread(target=listen, name="gpuyard-executor-notify", daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None

    def _reap(self) -> None:
        with self._children_lock:
            for key, child in list(self._children.items()):
                if child.poll() is not None:
                    del self._children[key]


def _layout(
    machine: Machine,
    virtual_nodes: int,
    gpus_per_node: int | None,
    cpus_per_node: float | None,
    memory_per_node: int | None,
) -> list[NodeInfo]:
    real = machine.gpus
    count = max(virtual_nodes, 1)
    gpus = gpus_per_node if gpus_per_node is not None else len(real) // count
    virtual_gpus = gpus * count > len(real)
    kind = "virtual" if virtual_gpus and gpus else ("nvidia" if gpus else "none")
    model = "virtual" if kind == "virtual" else (real[0].name if real and gpus else "")
    cpus = cpus_per_node if cpus_per_node is not None else max(1.0, machine.cpus / count)
    memory = memory_per_node if memory_per_node is not None else machine.memory // count
    labels = {"executor": "local", "gpu.kind": kind}
    if machine.driver_version and kind == "nvidia":
        labels["driver"] = machine.driver_version
    if virtual_nodes == 0:
        devices = tuple(str(i) for i in range(gpus))
        return [
            NodeInfo(
                name=machine.hostname,
                address="127.0.0.1",
                gpus=gpus,
                cpus=cpus,
                memory=memory,
                gpu_model=model,
                gpu_devices=devices,
                labels=labels,
            )
        ]
    nodes = []
    for i in range(virtual_nodes):
        if virtual_gpus:
            devices = tuple(str(g) for g in range(gpus))
        else:
            devices = tuple(str(real[i * gpus + g].index) for g in range(gpus))
        nodes.append(
            NodeInfo(
                name=f"node{i}",
                address=str(_FIRST_VIRTUAL_ADDRESS + i),
                gpus=gpus,
                cpus=cpus,
                memory=memory,
                gpu_model=model,
                gpu_devices=devices,
                labels={**labels, "virtual": "true"},
            )
        )
    return nodes


def _control_state(control: Path) -> ControlState:
    ack = _read_json(control / "ack.json") or {}
    checkpoint = _read_json(control / "checkpoint.json") or {}
    progress = _read_json(control / "progress.json") or {}
    suspended = _read_json(control / "suspended.json") or {}
    return ControlState(
        acknowledged_at=_number(ack.get("time")),
        checkpoint_at=_number(checkpoint.get("time")),
        checkpoint_step=_integer(checkpoint.get("step")),
        progress_at=_number(progress.get("time")),
        step=_integer(progress.get("step")),
        suspended_at=_number(suspended.get("time")),
        listening=_any_entry(control / "listeners"),
    )


def _any_entry(directory: Path) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _exists(wd: Path, name: str) -> bool:
    return (wd / name).exists()


def _locked(wd: Path) -> bool:
    """True while a supervisor holds the worker's lock (i.e. is alive)."""
    try:
        fd = os.open(wd / "lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _is_supervisor(pid: int, wd: Path) -> bool:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return str(wd) in cmdline


def _write_marshal(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(marshal.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data: dict[str, Any] = json.load(fh)
            return data
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _tail(path: Path, limit: int = 500) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:].strip()
    except FileNotFoundError:
        return ""
