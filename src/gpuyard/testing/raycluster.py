"""A Ray test cluster on one machine: a head on 127.0.0.1 and nodes on 127.0.0.2, .3, …

Each node is its own raylet, started with ``ray start --address HEAD --node-ip-address
127.0.0.N``, with labels (``gpuyard.node=nodeN``, ``pool``, ``zone``), a fake GPU count
(``--num-gpus``) and the least CPU and memory Ray accepts. The head carries no gpuyard node
(``gpuyard.join=false``): it is the cluster's control side, like a real head.

What trying Ray on the development machine found, and what this module does about it:

- nodes started in parallel race for ports (``bind: Address already in use``): they are started
  one after another, each with explicit ports of its own;
- ports 20001-21000 belong to this machine's slurmd processes, and 32768-60999 are the
  kernel's ephemeral ports (any client socket may take one): every port here lies between;
- ``--node-ip-address=127.0.0.1`` is silently replaced by the host's IP: nodes start at .2;
- ``ray stop`` stops *every* Ray process of the user on the machine (other people's clusters
  too): :meth:`RayCluster.stop` kills only the processes of this cluster (those whose command
  line names its temporary directory, and what runs under them);
- node death takes ~15 s to be noticed by default: the head's health check is tightened
  (``RAY_health_check_*``) so that a killed raylet is declared dead within a few seconds.

Used by the tests' session fixture and by ``make ray-cluster`` (``python -m
gpuyard.testing.raycluster up|down``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["RayCluster", "ray_cluster", "unavailable_reason"]

HEALTH_CHECK = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "1000",
}
"""The head declares a silent node dead after about 3-4 s (Ray's default: 15 s for a crash,
about 65 s for a hang)."""
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_IMPORT_WARNING": "1"}
OBJECT_STORE = 80_000_000
"""Bytes of object store per node: the least Ray accepts (we pass only small messages)."""
DEFAULT_BASE_PORT = 24000
PORTS_PER_NODE = 20


def _ray_bin() -> str:
    found = Path(sys.executable).with_name("ray")
    return str(found) if found.exists() else (shutil.which("ray") or "ray")


def unavailable_reason() -> str:
    """Why a Ray cluster cannot start here ("" when it can)."""
    try:
        import ray
    except ImportError:
        return "ray is not installed (pip install 'gpuyard[ray]')"
    if not Path(_ray_bin()).exists() and shutil.which("ray") is None:
        return f"the ray command of ray {ray.__version__} is not on PATH"
    return ""


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_base(start: int) -> int:
    """A block of ports for head and nodes nobody listens on (another cluster may run)."""
    for base in range(start, 32000, 1000):
        if all(_port_free(base + p) for p in (0, 1, 2, 10, 11, 100)):
            return base
    raise RuntimeError("no free block of ports for a Ray test cluster")


@dataclass
class RayCluster:
    """A running test cluster; ``nodes`` maps gpuyard node name -> its address."""

    base_port: int
    temp_dir: Path
    gpus_per_node: int
    nodes: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    head_env: dict[str, str] = field(default_factory=dict)
    """More environment of the head only (``RAY_REDIS_ADDRESS`` for a GCS kept in Redis)."""
    log: Path | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.base_port}"

    def _run(self, args: list[str], extra_env: Mapping[str, str] | None = None) -> None:
        env = {**os.environ, **QUIET, **self.env, **(extra_env or {})}
        out = subprocess.run(
            [_ray_bin(), "start", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(f"$ ray start {' '.join(args)}\n{out.stdout}\n{out.stderr}\n")
        if out.returncode != 0:
            raise RuntimeError(f"ray start {args[0]} failed: {out.stderr[-2000:]}")

    def _node_ports(self, index: int) -> list[str]:
        """Explicit ports of node ``index`` (0: the head), so that nodes never race."""
        p = self.base_port + 100 + PORTS_PER_NODE * index
        return [
            f"--node-manager-port={p}",
            f"--object-manager-port={p + 1}",
            f"--metrics-export-port={p + 2}",
            f"--dashboard-agent-grpc-port={p + 3}",
            f"--dashboard-agent-listen-port={p + 4}",
            f"--runtime-env-agent-port={p + 5}",
            f"--min-worker-port={p + 6}",
            f"--max-worker-port={p + PORTS_PER_NODE - 1}",
        ]

    def start_head(self) -> None:
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self._run(
            [
                "--head",
                f"--port={self.base_port}",
                "--node-ip-address=127.0.0.1",
                f"--dashboard-port={self.base_port + 2}",
                "--include-dashboard=false",
                "--num-cpus=1",
                "--num-gpus=0",
                f"--object-store-memory={OBJECT_STORE}",
                "--labels=gpuyard.join=false",
                f"--temp-dir={self.temp_dir}",
                *self._node_ports(0),
            ],
            {**HEALTH_CHECK, **self.head_env},
        )

    def add_node(self, index: int, labels: Mapping[str, str] | None = None) -> str:
        """Start node ``index`` (1, 2, …) at 127.0.0.<index+1>; its gpuyard name."""
        name = f"node{index}"
        address = f"127.0.0.{index + 1}"
        all_labels = {"gpuyard.node": name, "zone": f"z{(index + 1) // 2}", **(labels or {})}
        self._run(
            [
                f"--address={self.address}",
                f"--node-ip-address={address}",
                "--num-cpus=1",
                f"--num-gpus={self.gpus_per_node}",
                f"--object-store-memory={OBJECT_STORE}",
                f"--resources={json.dumps({'gpuyard_slot': self.gpus_per_node})}",
                "--labels=" + ",".join(f"{k}={v}" for k, v in all_labels.items()),
                f"--temp-dir={self.temp_dir}",
                *self._node_ports(index),
            ]
        )
        self.nodes[name] = address
        return name

    def ensure_nodes(self) -> list[str]:
        """Start again every node whose raylet is gone (a test killed it), as a new Ray node of
        the same name and address; the names of those started."""
        started = []
        for name in list(self.nodes):
            if self.raylet(name) is None:
                self.add_node(int(name.removeprefix("node")))
                started.append(name)
        return started

    def raylet(self, name: str) -> psutil.Process | None:
        """The raylet of node ``name``, while it runs."""
        address = self.nodes[name]
        for proc in self._processes():
            with contextlib.suppress(psutil.Error):
                cmd = proc.cmdline()
                if cmd and cmd[0].endswith("raylet") and f"--node_ip_address={address}" in cmd:
                    return proc
        return None

    def kill_node(self, name: str) -> None:
        """SIGKILL node ``name``'s raylet (a node that crashes); Ray's own processes of the
        node die with it."""
        proc = self.raylet(name)
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(psutil.Error):
                proc.wait(10)

    def _processes(self) -> list[psutil.Process]:
        """Every process of this cluster: those that name its temporary directory, and all
        that run under them (Ray's workers, and whatever they started)."""
        mark = str(self.temp_dir)
        me = psutil.Process()
        ours = {me.pid, *(p.pid for p in me.parents())}  # a command that names the dir
        roots = []
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if proc.pid not in ours and any(mark in part for part in cmd):
                roots.append(proc)
        found: dict[int, psutil.Process] = {p.pid: p for p in roots}
        for root in roots:
            with contextlib.suppress(psutil.Error):
                for child in root.children(recursive=True):
                    found[child.pid] = child
        return list(found.values())

    def stop(self) -> None:
        """Kill every process of this cluster (never another cluster's, unlike ``ray
        stop``), and remove its temporary directory."""
        for _ in range(3):
            procs = self._processes()
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGKILL)
            psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@contextlib.contextmanager
def ray_cluster(
    nodes: int = 2,
    *,
    gpus_per_node: int = 2,
    base_port: int | None = None,
    temp_dir: Path | None = None,
    log: Path | None = None,
    head_env: Mapping[str, str] | None = None,
) -> Iterator[RayCluster]:
    """A head and ``nodes`` nodes, stopped at the end whatever happens. When the head
    cannot start on a block of ports (another cluster took it meanwhile), the next block is
    tried."""
    base = base_port or DEFAULT_BASE_PORT
    for tries_left in range(2, -1, -1):
        base = _free_base(base)
        cluster = RayCluster(
            base_port=base,
            # Short: Ray puts Unix sockets under it (108 bytes at most per path).
            temp_dir=temp_dir or Path(f"/tmp/gpy-ray-{base}"),  # noqa: S108 - a test cluster's
            gpus_per_node=gpus_per_node,
            log=log,
            head_env=dict(head_env or {}),
        )
        try:
            cluster.start_head()
            break
        except RuntimeError:
            cluster.stop()
            if not tries_left:
                raise
            base += 1000
    try:
        for i in range(1, nodes + 1):
            cluster.add_node(i)
        yield cluster
    finally:
        cluster.stop()


def _main(argv: list[str]) -> int:
    """``up [N]``: start a cluster of N nodes (default 4) and wait until Ctrl-C; ``down
    TEMP_DIR``: stop a cluster left behind."""
    if argv[:1] == ["down"] and len(argv) == 2:
        RayCluster(base_port=0, temp_dir=Path(argv[1]), gpus_per_node=0).stop()
        return 0
    if argv[:1] != ["up"]:
        print("usage: python -m gpuyard.testing.raycluster up [NODES] | down TEMP_DIR")
        return 2
    count = int(argv[1]) if len(argv) > 1 else 4
    started = time.monotonic()
    with ray_cluster(count) as cluster:
        print(
            f"Ray test cluster up in {time.monotonic() - started:.1f} s: head {cluster.address}, "
            f"nodes {cluster.nodes}, temp dir {cluster.temp_dir}\n"
            f"  gpuyard up --executor ray --ray-address {cluster.address}\n"
            "Ctrl-C stops it.",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(_main(sys.argv[1:]))
