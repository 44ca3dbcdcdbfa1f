"""The env contract and argv of a worker (mode single)."""

from __future__ import annotations

from gpuyard.launch.plan import JobContext, plan_worker
from gpuyard.models import JobSpec, Slot


def ctx(**overrides: object) -> JobContext:
    base: dict[str, object] = {
        "job_id": 42,
        "name": "train",
        "attempt": 1,
        "placement": [
            Slot(node="node0", address="127.0.0.2", gpus=(1, 3), cpus=2),
            Slot(node="node1", address="127.0.0.3", gpus=(), cpus=2),
        ],
        "job_dir": "/pool/jobs/42",
        "control_url": "http://127.0.0.1:8470",
        "gpu_devices": {"node0": ["4", "5", "6", "7"]},
    }
    base.update(overrides)
    return JobContext(**base)  # type: ignore[arg-type]


def test_contract_variables() -> None:
    launch = plan_worker(JobSpec(command="python x.py"), ctx(), 0, base_env={"PATH": "/bin"})
    env = launch.env
    assert {k: env[k] for k in env if k.startswith("GPUYARD_")} == {
        "GPUYARD_JOB_ID": "42",
        "GPUYARD_JOB_NAME": "train",
        "GPUYARD_ATTEMPT": "1",
        "GPUYARD_NODE_RANK": "0",
        "GPUYARD_NUM_NODES": "2",
        "GPUYARD_NODE_NAME": "node0",
        "GPUYARD_NODE_ADDRESS": "127.0.0.2",
        "GPUYARD_JOB_DIR": "/pool/jobs/42",
        "GPUYARD_OUTPUT_DIR": "/pool/jobs/42/outputs",
        "GPUYARD_CHECKPOINT_DIR": "/pool/jobs/42/checkpoints",
        "GPUYARD_GPUS": "2",
        "GPUYARD_URL": "http://127.0.0.1:8470",
    }
    assert env["PATH"] == "/bin"
    assert env["PYTHONUNBUFFERED"] == "1"  # logs reach `gpuyard logs -f` as they are printed
    assert launch.argv == ["python", "x.py"]
    assert launch.cwd == "/pool/jobs/42"
    assert launch.grace == 30.0
    assert (launch.key.job_id, launch.key.attempt, launch.key.rank) == (42, 1, 0)


def test_cuda_visible_devices_maps_local_indices_to_the_nodes_devices() -> None:
    assert (
        plan_worker(JobSpec(command="x"), ctx(), 0, base_env={}).env["CUDA_VISIBLE_DEVICES"]
        == "5,7"
    )
    # A worker that asked for no GPUs sees none, even on a GPU node.
    assert (
        plan_worker(JobSpec(command="x"), ctx(), 1, base_env={}).env["CUDA_VISIBLE_DEVICES"] == ""
    )


def test_user_env_overrides_base_env_but_not_the_contract() -> None:
    spec = JobSpec(
        command="x", env={"PATH": "/opt/bin", "GPUYARD_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "0"}
    )
    env = plan_worker(spec, ctx(), 0, base_env={"PATH": "/bin", "HOME": "/root"}).env
    assert env["PATH"] == "/opt/bin"
    assert env["HOME"] == "/root"
    assert env["GPUYARD_JOB_ID"] == "42"
    assert env["CUDA_VISIBLE_DEVICES"] == "5,7"


def test_argv_expands_variables_from_the_final_env() -> None:
    spec = JobSpec(
        command='python x.py --rank $GPUYARD_NODE_RANK --tag "$TAG" $ARGS',
        env={"TAG": "a b", "ARGS": "--lr 0.1"},
    )
    argv = plan_worker(spec, ctx(), 1, base_env={}).argv
    assert argv == ["python", "x.py", "--rank", "1", "--tag", "a b", "--lr", "0.1"]


def test_workdir_wins_over_the_job_dir() -> None:
    spec = JobSpec(command="x", workdir="/home/alice/project", graceful_shutdown="2m")
    launch = plan_worker(spec, ctx(), 0, base_env={})
    assert launch.cwd == "/home/alice/project"
    assert launch.grace == 120.0
