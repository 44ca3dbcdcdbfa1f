"""The Ray head's GCS as a single point of failure, and the Redis-backed GCS that removes it.

A Ray cluster whose GCS keeps its tables in Redis (``RAY_REDIS_ADDRESS`` on the head) survives a
GCS crash: the raylets wait for it (60 s by default) and the jobs keep running. Here a pool runs
a job on such a cluster (its own, apart from the session's: one head, one node), the GCS is
killed with SIGKILL and started again with its own command line a few seconds later, and the
job is still running, the pool still drives it (it stops it), and nothing of it is left.

Redis comes from Debian (``apt-get install redis-server``, 7.0 on Debian 12). The test is
opt-in: it starts a second Ray cluster and waits out a GCS outage (about 35 s on 2 cores), past
the 90 s the Ray tests may take in ``make test``. Run it with ``GPYTEST_RAY_GCS_FT=1`` where
redis-server is installed; otherwise it skips, saying which is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.testing.process import ServerProcess
from gpuyard.testing.raycluster import RayCluster, ray_cluster, unavailable_reason

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


def _free_port() -> int:
    for port in range(29500, 29900):
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    raise RuntimeError("no free port for redis")


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[str]:
    if os.environ.get("GPYTEST_RAY_GCS_FT") != "1":
        pytest.skip("opt-in (about 35 s): GPYTEST_RAY_GCS_FT=1 runs the Redis-backed GCS test")
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(server).exists():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    port = _free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def ft_cluster(redis: str, tmp_path: Path) -> Iterator[RayCluster]:
    with ray_cluster(
        1,
        base_port=28000,
        log=tmp_path / "ray-start.log",
        head_env={"RAY_REDIS_ADDRESS": redis},  # the head's GCS keeps its tables there
    ) as cluster:
        yield cluster


def _gcs(cluster: RayCluster) -> psutil.Process:
    for proc in cluster._processes():
        with contextlib.suppress(psutil.Error):
            if proc.cmdline() and proc.cmdline()[0].endswith("gcs_server"):
                return proc
    raise AssertionError("no gcs_server in the cluster")


def test_a_job_outlives_a_gcs_crash_with_redis(ft_cluster: RayCluster, tmp_path: Path) -> None:
    pool = ServerProcess(
        tmp_path / "home",
        "--executor",
        "ray",
        "--ray-address",
        ft_cluster.address,
        settings={"GPUYARD_RAY_INTERFACE": "lo", "GPUYARD_INSPECT_INTERVAL": "0"},
    ).start(timeout=90)
    try:
        job = pool.cli_json("submit", "--cpus", "0.5", "--", "bash", "-c", "echo up; sleep 600")
        deadline = time.monotonic() + 60
        while pool.job(job["id"])["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        gcs = _gcs(ft_cluster)
        argv, env, cwd = gcs.cmdline(), gcs.environ(), gcs.cwd()
        gcs.kill()
        gcs.wait(10)
        time.sleep(3)  # the cluster without its GCS
        with open(tmp_path / "gcs-restart.log", "ab") as log:
            subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=log, start_new_session=True)
        time.sleep(6)  # raylets and the pool's driver reconnect
        shown = pool.cli_json("show", str(job["id"]))
        assert shown["status"] == "running", shown
        assert shown["workers"][0]["state"] == "running"
        assert "up" in pool.cli("logs", str(job["id"])).stdout
        pool.cli("stop", str(job["id"]))
        done = pool.wait_status(job["id"], {"stopped", "failed", "succeeded"}, 60)
        assert done["status"] == "stopped", done
    finally:
        pool.crash()
