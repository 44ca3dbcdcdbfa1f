"""The planning of `gpuyard exec run` workers: the command in the context of the job's worker on
each node, in a directory of its own, at ranks of its own."""

from __future__ import annotations

from typing import Any

import pytest

from gpuyard.launch.check import CHECK_RANK_BASE, check_launches
from gpuyard.launch.exec_workers import (
    EXEC_RANK_BASE,
    EXEC_RANK_LIMIT,
    exec_launches,
    exec_ranks,
    host_ranks,
)
from gpuyard.launch.plan import JobContext, plan_worker
from gpuyard.launch.topology import seats
from gpuyard.models import JobSpec, Slot
from gpuyard.models.worker import Tools, WorkerKey

TOOLS = Tools(python="/pool/bin/python", rexec="/pool/rexec.py", check="/pool/nodecheck.py")
BASE = {"n0": {"PATH": "/bin", "BASE": "0"}, "n1": {"PATH": "/bin", "BASE": "1"}}


def slot(node: str, gpus: tuple[int, ...] = (0, 1), port: int = 20000) -> Slot:
    return Slot(node=node, address=f"10.0.0.{node[-1]}", gpus=gpus, cpus=4, port=port)


def ctx(spec: JobSpec, placement: list[Slot], **overrides: Any) -> JobContext:
    base: dict[str, Any] = {
        "job_id": 7,
        "name": "train",
        "attempt": 2,
        "placement": placement,
        "job_dir": "/pool/jobs/7",
        "control_url": "http://cp",
        "token": "s3cret",
        "tools": TOOLS,
        "run_as": "gpy-alice",
    }
    base.update(overrides)
    return JobContext(**base)


def test_an_exec_worker_runs_the_command_in_its_nodes_worker_context() -> None:
    spec = JobSpec(
        command="python train.py",
        mode="pytorch",
        nodes=2,
        resources={"gpus": 2, "cpus": 4, "memory": "8G"},
        env={"MINE": "1"},
        graceful_shutdown=7,
    )
    placement = [slot("n0", port=20001), slot("n1", gpus=(2, 3), port=20002)]
    context = ctx(spec, placement)
    ranks = exec_ranks(placement, EXEC_RANK_BASE)
    assert ranks == {EXEC_RANK_BASE: "n0", EXEC_RANK_BASE + 1: "n1"}
    launches = exec_launches(spec, context, argv=["hostname", "-f"], ranks=ranks, base_env=BASE)
    assert [launch.key for launch in launches] == [
        WorkerKey(7, 2, EXEC_RANK_BASE),
        WorkerKey(7, 2, EXEC_RANK_BASE + 1),
    ]
    for node_rank, (launch, node) in enumerate(zip(launches, ("n0", "n1"), strict=True)):
        own = plan_worker(spec, context, node_rank, base_env=BASE[node])
        assert launch.node == node
        assert launch.argv == ["hostname", "-f"]  # as given: no torchrun, no shell
        assert (launch.role, launch.primary) == ("exec", False)
        assert (launch.limits, launch.run_as, launch.grace) == (own.limits, "gpy-alice", 7.0)
        rank = EXEC_RANK_BASE + node_rank
        workspace = f"/pool/jobs/7/attempts/2/worker-{rank}/workspace"
        assert launch.cwd == workspace
        differs = {k for k in own.env if own.env[k] != launch.env.get(k)}
        # Where it runs is its own directory: its workspace (the default working directory).
        assert differs == {"GPUYARD_WORKSPACE", "GPUYARD_CONTROL_DIR", "SLURM_SUBMIT_DIR"}
        assert launch.env["GPUYARD_WORKSPACE"] == workspace
        assert launch.env["GPUYARD_CONTROL_DIR"] == f"/pool/jobs/7/attempts/2/worker-{rank}/control"
        assert launch.env["GPUYARD_EXEC_RANK"] == str(rank)
        assert launch.env["MINE"] == "1" and launch.env["BASE"] == str(node_rank)
        assert launch.env["RANK"] == str(node_rank)
        assert launch.binds and all(b.target.startswith(workspace) for b in launch.binds)
        assert [(b.source, b.readonly) for b in launch.binds] == [
            (b.source, b.readonly) for b in own.binds
        ]
    assert launches[1].env["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_a_node_runs_the_command_once_in_the_context_of_its_first_worker() -> None:
    # A tensorflow job with a parameter server beside worker 0 on n0, and a batch job with two
    # sub-tasks: one exec worker per node, as the first worker there.
    tf = JobSpec(command="python tf.py", mode="tensorflow", nodes=2, parameter_servers=1)
    placement = [slot("n0"), slot("n1"), slot("n0", gpus=())]
    assert [s.role.value for s in seats(tf)] == ["worker", "worker", "ps"]
    assert host_ranks(tf, placement) == {"n0": 0, "n1": 1}
    launches = exec_launches(
        tf, ctx(tf, placement), argv=["id"], ranks=exec_ranks(placement, 200_010), base_env=BASE
    )
    assert [(x.key.rank, x.node, x.env["GPUYARD_ROLE"]) for x in launches] == [
        (200_010, "n0", "worker"),
        (200_011, "n1", "worker"),
    ]


def test_exec_ranks_stay_in_their_own_range() -> None:
    placement = [slot("n0"), slot("n1")]
    assert CHECK_RANK_BASE < EXEC_RANK_BASE < EXEC_RANK_LIMIT <= 1 << 20
    assert exec_ranks(placement, EXEC_RANK_LIMIT - 2) == {
        EXEC_RANK_LIMIT - 2: "n0",
        EXEC_RANK_LIMIT - 1: "n1",
    }
    with pytest.raises(ValueError, match="outside the exec ranks"):
        exec_ranks(placement, EXEC_RANK_LIMIT - 1)
    with pytest.raises(ValueError, match="outside the exec ranks"):
        exec_ranks(placement, CHECK_RANK_BASE)
    spec = JobSpec(command="x", nodes=2)
    with pytest.raises(ValueError, match="not in the job's placement"):
        exec_launches(
            spec, ctx(spec, placement), argv=["id"], ranks={EXEC_RANK_BASE: "n9"}, base_env={}
        )


def test_a_held_jobs_checker_is_the_pre_flight_check_at_exec_ranks() -> None:
    placement = [slot("n0", port=20005), slot("n1")]
    common: dict[str, Any] = {
        "job_id": 7,
        "attempt": 2,
        "placement": placement,
        "tools": TOOLS,
        "base_env": BASE,
        "gpu_devices": None,
        "job_dir": "/pool/jobs/7",
        "run_as": "gpy-alice",
    }
    preflight = check_launches(**common)
    held = check_launches(**common, rank_base=EXEC_RANK_BASE + 4)
    assert [c.key.rank for c in preflight] == [CHECK_RANK_BASE, CHECK_RANK_BASE + 1]
    assert [c.key.rank for c in held] == [EXEC_RANK_BASE + 4, EXEC_RANK_BASE + 5]
    assert [(c.argv, c.env, c.node, c.role, c.run_as) for c in held] == [
        (c.argv, c.env, c.node, c.role, c.run_as) for c in preflight
    ]
    assert "127.0.0.1:20005" in held[0].argv
