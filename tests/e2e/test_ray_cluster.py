"""Issue 13 acceptance, end to end: `gpuyard up --executor ray` on the session's Ray test cluster.

A real pool process drives the cluster's nodes (node1..node3 on 127.0.0.2..4, 2 fake GPUs and
1 CPU each) through their node agents: the nodes appear with their labels, a 2-node DDP job
trains with identical weights on every rank with MASTER_ADDR a node's own address, `gpuyard
logs -f` follows a worker on a non-head node, a `kill -9` of the pool loses and duplicates
nothing, and a node whose raylet is killed under a running job has the job running again on
the nodes left, with nothing of the old attempt left running.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuyard.models.image import ImageRef
from gpuyard.testing.process import ServerProcess
from gpuyard.testing.registry import NODE_ARCH, TestRegistry, busybox_layer, write_layout

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DDP = ROOT / "examples" / "ddp_train.py"
ENDED = {"succeeded", "failed", "stopped", "expired"}


@pytest.fixture(scope="module")
def ray_pool(
    ray_cluster: Any,
    ray_agents: tuple[str, Path],
    registry: TestRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    ray_cluster.ensure_nodes()
    home = tmp_path_factory.mktemp("raypool") / "home"
    namespace, node_home = ray_agents
    pool = ServerProcess(
        home,
        "--executor",
        "ray",
        "--ray-address",
        ray_cluster.address,
        settings={
            "GPUYARD_RAY_NAMESPACE": namespace,
            "GPUYARD_RAY_NODE_HOME": str(node_home),
            "GPUYARD_RAY_INTERFACE": "lo",
            "GPUYARD_INSPECT_INTERVAL": "0",
            "GPUYARD_REGISTRY": registry.url,
            "GPUYARD_REGISTRY_CA": str(registry.ca_file),
            "GPUYARD_REGISTRY_USER": "alice",
            "GPUYARD_REGISTRY_PASSWORD": registry.users["alice"],
        },
    ).start(timeout=90)
    yield pool
    pool.crash()  # its workers are stopped by the tests; the agents are the session's


def nodes(pool: ServerProcess) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in pool.cli_json("nodes")}


def wait_running(pool: ServerProcess, job_id: int, attempt: int = 0, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        job = pool.job(job_id)
        if job["status"] == "running" and job.get("attempt", 0) >= attempt:
            workers = job["workers"]
            if workers and all(w["state"] == "running" for w in workers):
                return job
        assert job["status"] not in ENDED, job
        assert time.monotonic() < deadline, job
        time.sleep(0.3)


def test_ray_nodes_are_pool_nodes_with_their_labels(
    ray_pool: ServerProcess, ray_cluster: Any
) -> None:
    found = nodes(ray_pool)
    assert set(ray_cluster.nodes) <= set(found), found
    node = found["node1"]
    assert node["address"] == "127.0.0.2" and node["gpus"] == 2 and node["cpus"] == 1
    assert node["labels"]["executor"] == "ray" and node["labels"]["zone"] == "z1"
    assert node["labels"]["ray.resource/gpuyard_slot"] == "2"
    assert all(n["labels"].get("executor") == "ray" for n in found.values())  # not the head


def test_ddp_across_ray_nodes_and_logs_follow_a_non_head_worker(ray_pool: ServerProcess) -> None:
    job = ray_pool.cli_json(
        "submit", "--mode", "pytorch", "--nodes", "2", "--gpus", "1", "--cpus", "1",
        "--", PYTHON, str(DDP), "--steps", "10",
    )  # fmt: skip
    followed = subprocess.run(
        [PYTHON, "-m", "gpuyard", "logs", "-f", str(job["id"]), "--worker", "0"],
        env=ray_pool.env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    done = ray_pool.wait_status(job["id"], ENDED, 180)
    log0 = ray_pool.cli("logs", str(job["id"])).stdout
    assert done["status"] == "succeeded", (done, log0[-3000:], followed.stdout[-2000:])
    workers = done["workers"]
    assert len({w["node"] for w in workers}) == 2
    assert "2 ranks on 2 nodes: weights identical" in log0
    outputs = Path(ray_pool.env["GPUYARD_RAY_NODE_HOME"]) / "jobs" / str(job["id"]) / "outputs"
    digests = {json.loads((outputs / f"rank-{r}.json").read_text())["digest"] for r in range(2)}
    assert len(digests) == 1
    # Worker 0 runs on a node other than the head (which joins no pool); its log was followed
    # through its node's agent while it ran, and is whole.
    assert followed.returncode == 0, followed.stderr
    assert "step   0" in followed.stdout and "weights identical" in followed.stdout, followed
    assert followed.stdout == log0
    assert workers[0]["node"] in {"node1", "node2", "node3"}


def _job_processes(pool: ServerProcess, job_id: int) -> list[psutil.Process]:
    """Processes of the job's workers (their control directories are under the pool's node
    home: every Ray node of the test cluster is this machine)."""
    node_home = Path(pool.env["GPUYARD_RAY_NODE_HOME"])
    mark = f"GPUYARD_CONTROL_DIR={node_home / 'jobs' / str(job_id)}/"
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(f"{k}={v}".startswith(mark) for k, v in proc.environ().items()):
                found.append(proc)
    return found


def test_kill_9_of_the_pool_loses_and_duplicates_nothing(ray_pool: ServerProcess) -> None:
    job = ray_pool.cli_json(
        "submit", "--nodes", "2", "--gpus", "1", "--cpus", "0.5", "--",
        "bash", "-c", "echo started $GPUYARD_NODE_RANK; sleep 600",
    )  # fmt: skip
    before = wait_running(ray_pool, job["id"])
    pids = sorted(p.pid for p in _job_processes(ray_pool, job["id"]))
    assert pids
    ray_pool.crash()
    ray_pool.start(timeout=90)
    time.sleep(1.5)  # a few passes of the new controller (0.5 s each)
    after = ray_pool.cli_json("show", str(job["id"]))
    assert after["status"] == "running" and after.get("attempt") == before.get("attempt")
    assert [w["state"] for w in after["workers"]] == ["running", "running"]
    assert sorted(p.pid for p in _job_processes(ray_pool, job["id"])) == pids  # 0 lost, 0 new
    for rank in (0, 1):
        log = ray_pool.cli("logs", str(job["id"]), "--worker", str(rank)).stdout
        assert log.count("started") == 1, log
    ray_pool.cli("stop", str(job["id"]))
    ray_pool.wait_status(job["id"], ENDED, 60)
    deadline = time.monotonic() + 30
    while _job_processes(ray_pool, job["id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _job_processes(ray_pool, job["id"])


@pytest.mark.parametrize("implementation", ["openmpi", "mpich"])
def test_an_mpi_job_across_ray_nodes_through_rexec(
    ray_pool: ServerProcess, implementation: str
) -> None:
    """Open MPI's and MPICH's daemons reach the other node through gpuyard's rexec agent (no
    ssh), on the Ray nodes' addresses."""
    job = ray_pool.cli_json(
        "submit", "--mode", "mpi", "--mpi", implementation, "--nodes", "2", "--gpus", "1",
        "--cpus", "0.5", "--workdir", str(ROOT), "--max-runtime", "90s",
        "--", f"{PYTHON} examples/mpi_test.py",
    )  # fmt: skip
    done = ray_pool.wait_status(job["id"], ENDED, 120)
    launcher = ray_pool.cli("logs", str(job["id"])).stdout
    target = ray_pool.cli("logs", str(job["id"]), "--worker", "1").stdout
    assert done["status"] == "succeeded", (done, launcher[-3000:], target[-3000:])
    assert "mpi_test: allreduce over 2 ranks: sums [3, 5]: ok" in launcher
    address = {n: a["address"] for n, a in nodes(ray_pool).items()}[done["workers"][1]["node"]]
    assert f"rexec: listening on {address}:" in target


def test_a_deepspeed_job_gets_its_hostfile_and_master_on_ray_nodes(ray_pool: ServerProcess) -> None:
    """The DeepSpeed mode's hostfile names the gang's Ray nodes with their slots, and
    MASTER_ADDR is the first node's own address (DeepSpeed itself is not installed here: the
    command shows what a `deepspeed` launcher would be given)."""
    job = ray_pool.cli_json(
        "submit", "--mode", "pytorch-deepspeed", "--nodes", "2", "--gpus", "2", "--cpus", "0.5",
        "--", "bash", "-c", "cat $GPUYARD_HOSTFILE; echo master $MASTER_ADDR",
    )  # fmt: skip
    done = ray_pool.wait_status(job["id"], ENDED, 60)
    log = ray_pool.cli("logs", str(job["id"])).stdout
    assert done["status"] == "succeeded", (done, log)
    placed = [w["node"] for w in done["workers"]]
    address = {n: a["address"] for n, a in nodes(ray_pool).items()}
    assert [line for line in log.splitlines() if "slots=" in line] == [
        f"{node} slots=2" for node in placed
    ]
    assert f"master {address[placed[0]]}" in log and address[placed[0]].startswith("127.0.0.")


def test_a_killed_raylet_under_a_job_restarts_it_on_the_nodes_left(
    ray_pool: ServerProcess, ray_cluster: Any
) -> None:
    job = ray_pool.cli_json(
        "submit", "--nodes", "2", "--gpus", "1", "--cpus", "0.5", "--max-restarts", "2",
        "--no-preflight", "--", "bash", "-c", "echo attempt $GPUYARD_ATTEMPT; sleep 600",
    )  # fmt: skip
    first = wait_running(ray_pool, job["id"])
    old = {p.pid for p in _job_processes(ray_pool, job["id"])}
    victim = first["workers"][1]["node"]
    killed_at = time.monotonic()
    ray_cluster.kill_node(victim)
    try:
        again = wait_running(ray_pool, job["id"], attempt=1, timeout=60)
        took = time.monotonic() - killed_at
        assert took < 60, took
        assert victim not in {w["node"] for w in again["workers"]}
        deadline = time.monotonic() + 20
        while old & {p.pid for p in _job_processes(ray_pool, job["id"])}:
            assert time.monotonic() < deadline, "a process of the old attempt still runs"
            time.sleep(0.2)
        assert nodes(ray_pool)[victim]["state"] == "gone"
        events = json.dumps(ray_pool.cli_json("events", str(job["id"])))
        assert "worker_lost" in events and f"node {victim} left the Ray cluster" in events
    finally:
        ray_pool.cli("stop", str(job["id"]), check=False)
    # The next test that needs every node starts it again (ray_nodes_up, ensure_nodes).


def test_a_tensorflow_job_on_ray_nodes_names_their_addresses_in_tf_config(
    ray_pool: ServerProcess,
) -> None:
    """TF_CONFIG's cluster lists each worker at its own Ray node's address; each task knows
    its index."""
    job = ray_pool.cli_json(
        "submit", "--mode", "tensorflow", "--nodes", "2", "--gpus", "1", "--cpus", "0.5",
        "--", "bash", "-c", "echo TF_CONFIG=$TF_CONFIG",
    )  # fmt: skip
    done = ray_pool.wait_status(job["id"], ENDED, 60)
    address = {n: a["address"] for n, a in nodes(ray_pool).items()}
    configs = []
    for rank, worker in enumerate(done["workers"]):
        log = ray_pool.cli("logs", str(job["id"]), "--worker", str(rank)).stdout
        [line] = [x for x in log.splitlines() if x.startswith("TF_CONFIG=")]
        configs.append((worker["node"], json.loads(line.removeprefix("TF_CONFIG="))))
    assert done["status"] == "succeeded", done
    cluster = configs[0][1]["cluster"]["worker"]
    assert [c["cluster"]["worker"] for _, c in configs] == [cluster, cluster]
    assert [h.rsplit(":", 1)[0] for h in cluster] == [address[node] for node, _ in configs]
    assert [c["task"] for _, c in configs] == [
        {"type": "worker", "index": "0"},
        {"type": "worker", "index": "1"},
    ]


def test_a_batch_job_runs_its_sub_tasks_on_ray_nodes(
    ray_pool: ServerProcess, tmp_path: Path
) -> None:
    """A batch job's sub-tasks run side by side, each on a Ray node, each with its own log."""
    tasks = "\n".join(f"  - command: sh -c 'echo task {i} on $GPUYARD_NODE_NAME'" for i in range(2))
    job_file = tmp_path / "sweep.yaml"
    job_file.write_text(f"name: sweep\ntype: batch\nresources: {{cpus: 0.5}}\ntasks:\n{tasks}\n")
    job = ray_pool.cli_json("submit", "-f", str(job_file))
    done = ray_pool.wait_status(job["id"], ENDED, 60)
    assert done["status"] == "succeeded", done
    assert len(done["workers"]) == 2
    for rank, worker in enumerate(done["workers"]):
        log = ray_pool.cli("logs", str(job["id"]), "--worker", str(rank)).stdout
        assert f"task {rank} on {worker['node']}" in log, log


def test_a_job_in_an_image_runs_on_ray_nodes_pulled_by_their_agents(
    ray_pool: ServerProcess, registry: TestRegistry, tmp_path: Path
) -> None:
    write_layout(tmp_path, [busybox_layer()], architecture=NODE_ARCH)
    with registry.client("alice") as client:
        client.push(tmp_path, ImageRef.parse("alice/ray-busybox:1"))
    job = ray_pool.cli_json(
        "submit", "--image", "alice/ray-busybox:1", "--nodes", "2", "--gpus", "1", "--cpus", "1",
        "--", "sh -c 'cat /etc/os-release; echo rank $GPUYARD_NODE_RANK'",
    )  # fmt: skip
    done = ray_pool.wait_status(job["id"], ENDED, 120)
    assert done["status"] == "succeeded", done
    assert len({w["node"] for w in done["workers"]}) == 2
    for worker in range(2):
        log = ray_pool.cli("logs", str(job["id"]), "--worker", str(worker)).stdout
        assert log.splitlines()[0] == "ID=gpuyard-test"  # the image's, on a Ray node
        assert log.splitlines()[-1] == f"rank {worker}"
    pulls = [
        e["reason"] for e in ray_pool.cli_json("events", str(job["id"])) if e["kind"] == "image"
    ]
    assert any(p.startswith("pulled image alice/ray-busybox:1@sha256:") for p in pulls), pulls
