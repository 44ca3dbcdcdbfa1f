"""The node check's launches: one per node, the pool's tool and environment, none of the job's."""

from __future__ import annotations

from gpuyard.launch.check import CHECK_RANK_BASE, check_launches
from gpuyard.models.job import Slot
from gpuyard.models.worker import Tools, WorkerRole

TOOLS = Tools(python="/pool/bin/python", check="/pool/nodecheck.py")


def test_one_check_per_node_with_the_gpus_the_job_holds_there() -> None:
    placement = [
        Slot(node="a", address="10.0.0.1", gpus=(0, 1), cpus=4, memory=8, port=20001),
        Slot(node="a", address="10.0.0.1", gpus=(2,), cpus=2, memory=4, port=20002),
        Slot(node="b", address="10.0.0.2", gpus=(1,), cpus=1, memory=2, port=20003),
    ]
    launches = check_launches(
        job_id=7,
        attempt=2,
        placement=placement,
        tools=TOOLS,
        base_env={"a": {"PATH": "/bin", "SECRET_OF_JOB": "no"}, "b": {"PATH": "/bin"}},
        gpu_devices={"a": ["GPU-a0", "GPU-a1", "GPU-a2"], "b": ["GPU-b0", "GPU-b1"]},
        job_dir="/pool/jobs/7",
        run_as="gy-alice",
    )
    assert [(w.key.rank, w.node, w.role, w.primary) for w in launches] == [
        (CHECK_RANK_BASE, "a", WorkerRole.CHECK, False),
        (CHECK_RANK_BASE + 1, "b", WorkerRole.CHECK, False),
    ]
    first, second = launches
    assert first.env["CUDA_VISIBLE_DEVICES"] == "GPU-a0,GPU-a1,GPU-a2"
    assert second.env["CUDA_VISIBLE_DEVICES"] == "GPU-b1"
    assert (first.limits.gpus, first.limits.mcpus, first.limits.memory) == (3, 6000, 12)
    assert first.argv[:3] == ["/pool/bin/python", "-I", "/pool/nodecheck.py"]
    assert "--nodes" in first.argv and first.argv[first.argv.index("--nodes") + 1] == "a,b"
    assert second.argv[second.argv.index("--store") + 1] == "10.0.0.1:20001"
    assert first.run_as == second.run_as == "gy-alice"
    assert not any(k.startswith("GPUYARD_") for k in first.env)  # the pool's env only
