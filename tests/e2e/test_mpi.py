"""Issue 3, acceptance 2: 2-node MPI jobs through the auto prefix and rexec, without ssh.

A real pool of two virtual nodes runs ``python examples/mpi_test.py`` (an mpi4py allreduce
over 2 nodes x 2 ranks) as a plain command in ``mpi`` mode, once with Open MPI and once with
MPICH. The pool's PATH starts with an ``ssh`` (and ``rsh``) that records its call and fails,
so a job that reached for ssh would fail and leave a trace; a control job that asks mpirun for
ssh shows that it would.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mpi")]

ROOT = Path(__file__).resolve().parents[2]
MPI_TEST = "python examples/mpi_test.py"
SSH_SHIM = """#!/bin/sh
echo "$0 $*" >> "{calls}/job-$GPUYARD_JOB_ID"
echo "test pool: $0 was called ($*); gpuyard's MPI jobs must not use it" >&2
exit 255
"""


class MpiPool(ServerProcess):
    """A pool whose workers find the failing ssh first on PATH, then this Python's bin."""

    def __init__(self, home: Path, shims: Path) -> None:
        super().__init__(home, "--virtual-nodes", "2", "--gpus-per-node", "2")
        self.shims = shims

    @property
    def env(self) -> dict[str, str]:
        env = super().env
        python_bin = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([str(self.shims), python_bin, env.get("PATH", "")])
        # A network preset, to see that the pool passes it to every worker.
        env["GPUYARD_NETWORK"] = "ib"
        env["GPUYARD_NETWORK_IFACE"] = "lo"
        return env

    def ssh_calls(self, job_id: int) -> str:
        calls = self.shims / "calls" / f"job-{job_id}"
        return calls.read_text() if calls.exists() else ""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MpiPool]:
    base = tmp_path_factory.mktemp("mpi")
    shims = base / "shims"
    (shims / "calls").mkdir(parents=True)
    for name in ("ssh", "rsh"):
        (shims / name).write_text(SSH_SHIM.format(calls=shims / "calls"))
        (shims / name).chmod(0o755)
    pool = MpiPool(base / "home", shims)
    pool.start()
    yield pool
    pool.stop()


def submit(pool: MpiPool, *args: str, command: str = MPI_TEST) -> dict[str, object]:
    job: dict[str, object] = pool.cli_json(
        "submit",
        "--mode",
        "mpi",
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--workdir",
        str(ROOT),
        # A hung MPI job expires and the pool stops its workers, rather than outliving the test.
        "--max-runtime",
        "90s",
        "--graceful-shutdown",
        "5",
        *args,
        "--",
        command,
    )
    return job


def finish(pool: MpiPool, job: dict[str, object], timeout: float = 120) -> dict[str, object]:
    ended = {"succeeded", "failed", "stopped", "expired"}
    return pool.wait_status(int(str(job["id"])), ended, timeout)


def logs(pool: MpiPool, job_id: int, worker: int) -> str:
    return pool.cli("logs", str(job_id), "--worker", str(worker)).stdout


@pytest.mark.parametrize(
    ("implementation", "library", "daemon"),
    [("openmpi", "Open MPI", "prted"), ("mpich", "MPICH", "hydra_pmi_proxy")],
)
def test_a_plain_python_command_runs_on_2_nodes_by_2_ranks_without_ssh(
    pool: MpiPool, implementation: str, library: str, daemon: str
) -> None:
    job = submit(pool, "--mpi", implementation)
    job_id = int(str(job["id"]))
    done = finish(pool, job)
    launcher, target = logs(pool, job_id, 0), logs(pool, job_id, 1)
    assert done["status"] == "succeeded", (done, launcher[-3000:], target[-3000:])
    # Four ranks, two on each node, all in one allreduce with the right sum, in the MPI asked.
    assert f"mpi_test: 4 ranks on 2 nodes (node0: 0 1; node1: 2 3), {library}" in launcher
    assert "mpi_test: allreduce over 4 ranks: sums [10, 30]: ok" in launcher
    # node1's daemon was started by our agent through worker 1's `rexec serve`...
    assert "rexec: listening on 127.0.0.3:" in target
    assert re.search(rf"rexec: 127\.0\.0\.\d+:\d+ runs: .*{daemon}", target), target
    # ...and never through ssh.
    assert pool.ssh_calls(job_id) == ""
    workers = done["workers"]
    assert isinstance(workers, list)
    assert [w["node"] for w in workers] == ["node0", "node1"]


def test_the_ssh_trap_catches_an_mpirun_that_uses_ssh(pool: MpiPool) -> None:
    # The control for the test above: the same job, but the user's own mpirun asks for ssh.
    job = submit(
        pool,
        command="mpirun --allow-run-as-root --prtemca plm_ssh_agent ssh -np 4 "
        "python examples/mpi_test.py",
    )
    job_id = int(str(job["id"]))
    done = finish(pool, job)
    assert done["status"] == "failed"
    assert re.search(r"/ssh .*\bnode[01]\b", pool.ssh_calls(job_id)), pool.ssh_calls(job_id)


def test_the_pools_network_preset_reaches_every_worker(pool: MpiPool) -> None:
    job = pool.cli_json(
        "submit",
        "--nodes",
        "2",
        "--",
        "sh",
        "-c",
        "echo preset $NCCL_SOCKET_IFNAME $NCCL_CROSS_NIC",
    )
    job_id = int(str(job["id"]))
    done = finish(pool, job, timeout=60)
    assert done["status"] == "succeeded"
    for worker in (0, 1):
        assert "preset lo 0" in logs(pool, job_id, worker)
