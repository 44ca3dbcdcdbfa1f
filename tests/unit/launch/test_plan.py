"""Each worker's env, argv, files and workspace, per mode (the env contract, tested)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuyard.hostlist import compress_hostlist
from gpuyard.launch.network import Network, NetworkPreset
from gpuyard.launch.plan import MPIRUN_SHIM, JobContext, MpiInstall, plan_worker
from gpuyard.launch.topology import seats
from gpuyard.models import JobSpec, MpiImplementation, Slot
from gpuyard.models.worker import IMAGE_LIBRARY, Bind, File, Tools, WorkerImage

TOOLS = Tools(python="/pool/bin/python", rexec="/pool/rexec.py")


def slot(i: int, gpus: int = 2, port: int | None = None) -> Slot:
    return Slot(
        node=f"node{i}",
        address=f"127.0.0.{i + 2}",
        gpus=tuple(range(gpus)),
        cpus=4,
        port=port or 20000 + i,
    )


def ctx(spec: JobSpec, **overrides: Any) -> JobContext:
    n = len(seats(spec))
    base: dict[str, Any] = {
        "job_id": 42,
        "name": "train",
        "attempt": 1,
        "placement": [slot(i, spec.resources.gpus) for i in range(n)],
        "job_dir": "/pool/jobs/42",
        "control_url": "http://127.0.0.1:8470",
        "token": "s3cret",
        "tools": TOOLS,
    }
    base.update(overrides)
    return JobContext(**base)


def plan(
    spec: JobSpec, rank: int = 0, *, base_env: dict[str, str] | None = None, **overrides: Any
) -> Any:
    return plan_worker(spec, ctx(spec, **overrides), rank, base_env=base_env or {"PATH": "/bin"})


def test_contract_variables() -> None:
    spec = JobSpec(command="python x.py", nodes=2)
    env = plan(spec, 1).env
    assert {k: v for k, v in env.items() if k.startswith("GPUYARD_")} == {
        "GPUYARD_JOB_ID": "42",
        "GPUYARD_JOB_NAME": "train",
        "GPUYARD_ATTEMPT": "1",
        "GPUYARD_RESUME": "1",
        "GPUYARD_NODE_RANK": "1",
        "GPUYARD_NUM_NODES": "2",
        "GPUYARD_ROLE": "worker",
        "GPUYARD_NODE_NAME": "node1",
        "GPUYARD_NODE_ADDRESS": "127.0.0.3",
        "GPUYARD_JOB_DIR": "/pool/jobs/42",
        "GPUYARD_WORKSPACE": "/pool/jobs/42/attempts/1/worker-1/workspace",
        "GPUYARD_OUTPUT_DIR": "/pool/jobs/42/outputs",
        "GPUYARD_CHECKPOINT_DIR": "/pool/jobs/42/checkpoints",
        "GPUYARD_CONTROL_DIR": "/pool/jobs/42/attempts/1/worker-1/control",
        "GPUYARD_PREEMPT_SIGNAL": "SIGUSR1",
        "GPUYARD_GPUS": "0",
        "GPUYARD_URL": "http://127.0.0.1:8470",
        "GPUYARD_JOB_TOKEN": "s3cret",
    }
    assert env["PYTHONUNBUFFERED"] == "1"
    assert plan(spec, 1, resume=False).env["GPUYARD_RESUME"] == "0"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"]) == (
        "127.0.0.2",
        "20000",
        "2",
        "1",
    )
    launch = plan(spec, 1)
    assert launch.cwd == "/pool/jobs/42/attempts/1/worker-1/workspace"
    assert launch.argv == ["python", "x.py"]  # single mode: the command as given
    assert (launch.role, launch.task, launch.primary) == ("worker", 0, True)


def test_cuda_visible_devices_maps_local_indices_to_the_nodes_devices() -> None:
    spec = JobSpec(command="x", resources={"gpus": 2})
    placement = [Slot(node="node0", address="a", gpus=(1, 3))]
    env = plan(spec, placement=placement, gpu_devices={"node0": ["4", "5", "6", "7"]}).env
    assert env["CUDA_VISIBLE_DEVICES"] == "5,7"
    no_gpus = JobSpec(command="x")
    assert plan(no_gpus, placement=[Slot(node="n", address="a")]).env["CUDA_VISIBLE_DEVICES"] == ""


def test_precedence_base_defaults_preset_user_mode_contract() -> None:
    spec = JobSpec(
        command="x",
        env={
            "PATH": "/opt/bin",
            "NCCL_DEBUG": "WARN",
            "MASTER_PORT": "1",
            "GPUYARD_JOB_ID": "1",
            "PYTHONUNBUFFERED": "",
        },
    )
    env = plan(
        spec, base_env={"PATH": "/bin", "HOME": "/root"}, network=NetworkPreset(Network.ROCE)
    ).env
    assert (env["PATH"], env["HOME"], env["PYTHONUNBUFFERED"]) == ("/opt/bin", "/root", "")
    assert env["NCCL_DEBUG"] == "WARN"  # the job overrides the pool's preset
    assert env["NCCL_IB_TC"] == "106"  # the rest of the preset stays
    assert env["MASTER_PORT"] == "20000" and env["GPUYARD_JOB_ID"] == "42"


def test_argv_expands_variables_from_the_final_env() -> None:
    spec = JobSpec(
        command='python x.py --rank $RANK --tag "$TAG" $ARGS',
        env={"TAG": "a b", "ARGS": "--lr 0.1"},
        nodes=2,
    )
    assert plan(spec, 1).argv == ["python", "x.py", "--rank", "1", "--tag", "a b", "--lr", "0.1"]


def test_workdir_wins_over_the_workspace() -> None:
    spec = JobSpec(command="x", workdir="/home/alice/project", graceful_shutdown="2m")
    launch = plan(spec)
    assert (launch.cwd, launch.grace) == ("/home/alice/project", 120.0)
    assert launch.env["SLURM_SUBMIT_DIR"] == "/home/alice/project"


# -- pytorch --------------------------------------------------------------------------------


def test_pytorch_env_and_wrapping() -> None:
    spec = JobSpec(
        command="python train.py --lr 0.1", mode="pytorch", nodes=2, resources={"gpus": 2}
    )
    master, worker = plan(spec, 0), plan(spec, 1)
    assert {
        k: worker.env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "SLOTS")
    } == {
        "MASTER_ADDR": "127.0.0.2",
        "MASTER_PORT": "20000",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "SLOTS": "2",
    }
    launcher = "-m torch.distributed.run --nproc_per_node=2 --nnodes=2"
    assert " ".join(master.argv) == (
        f"python {launcher} --node_rank=0 --master_addr=localhost --master_port=20000 "
        "train.py --lr 0.1"
    )
    assert " ".join(worker.argv) == (
        f"python {launcher} --node_rank=1 --master_addr=127.0.0.2 --master_port=20000 "
        "train.py --lr 0.1"
    )
    # Two processes per node: no per-process SLURM variables (Lightning then uses torch's).
    assert "SLURM_PROCID" not in worker.env and "SLURM_NTASKS" not in worker.env
    assert (worker.env["SLURM_NODEID"], worker.env["SLURM_NNODES"]) == ("1", "2")


def test_pytorch_cpu_slots_are_one_and_torchrun_is_left_alone() -> None:
    spec = JobSpec(
        command="torchrun --nnodes $WORLD_SIZE --nproc_per_node $SLOTS --node_rank $RANK t.py",
        mode="pytorch",
        nodes=2,
    )
    launch = plan(spec, 1)
    assert launch.argv == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "--node_rank",
        "1",
        "t.py",
    ]
    assert (launch.env["SLURM_NTASKS"], launch.env["SLURM_PROCID"]) == ("2", "1")


def test_deepspeed_hostfile_and_launcher() -> None:
    spec = JobSpec(
        command="deepspeed train.py --deepspeed --deepspeed_config ds.json",
        mode="pytorch-deepspeed",
        nodes=2,
        resources={"gpus": 4},
    )
    launch = plan(spec, 1)
    hostfile = "/pool/jobs/42/attempts/1/task-0/hostfile"
    assert launch.files == {hostfile: File("node0 slots=4\nnode1 slots=4\n")}
    assert (launch.env["DLTS_HOSTFILE"], launch.env["GPUYARD_HOSTFILE"]) == (hostfile, hostfile)
    assert launch.env["MASTER_ADDR"] == "127.0.0.2"
    assert launch.argv == [
        "deepspeed",
        f"--hostfile={hostfile}",
        "--no_ssh",
        "--node_rank=1",
        "--master_addr=127.0.0.2",
        "--master_port=20000",
        "train.py",
        "--deepspeed",
        "--deepspeed_config",
        "ds.json",
    ]


# -- mpi -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["mpi", "horovod"])
def test_openmpi_launcher_and_targets(mode: str) -> None:
    spec = JobSpec(command="python mpi_test.py", mode=mode, nodes=2, resources={"gpus": 2})
    install = MpiInstall(
        bin_dir="/opt/ompi/bin", lib_dir="/opt/ompi/lib", env={"MPI4PY_LIBMPI": "/opt/ompi/lib"}
    )
    launcher = plan(spec, 0, mpi={MpiImplementation.OPENMPI: install})
    target = plan(spec, 1, mpi={MpiImplementation.OPENMPI: install})
    files = "/pool/jobs/42/attempts/1/task-0"
    assert launcher.argv[:4] == ["mpirun", "--allow-run-as-root", "-np", "4"]
    assert launcher.argv[-2:] == ["python", "mpi_test.py"]
    assert (launcher.role, launcher.primary, target.role, target.primary) == (
        "launcher",
        True,
        "mpi-target",
        False,
    )
    assert target.argv == ["/pool/bin/python", "-I", "-S", "/pool/rexec.py", "serve"]
    assert launcher.files[f"{files}/hostfile"] == File("node0 slots=2\nnode1 slots=2\n")
    assert launcher.files[f"{files}/mpich_hostfile"] == File("node0:2\nnode1:2\n")
    agent = launcher.files[f"{files}/rsh-agent"]
    assert agent.mode == 0o755
    assert agent.content == '#!/bin/sh\nexec /pool/bin/python -I -S /pool/rexec.py agent "$@"\n'
    assert json.loads(launcher.files[f"{files}/rexec-hosts.json"].content) == {
        "node0": {"address": "127.0.0.2", "port": 20000},
        "node1": {"address": "127.0.0.3", "port": 20001},
    }
    env = launcher.env
    # The reference's variables (Open MPI <= 4), and Open MPI 5's (PRRTE) beside them.
    assert env["OMPI_MCA_orte_default_hostfile"] == f"{files}/hostfile"
    assert env["OMPI_MCA_plm_rsh_agent"] == f"{files}/rsh-agent"
    assert env["PRTE_MCA_prte_default_hostfile"] == f"{files}/hostfile"
    assert env["PRTE_MCA_plm_ssh_agent"] == f"{files}/rsh-agent"
    # The job's SLURM_* variables must not make Open MPI launch with srun.
    assert "SLURM_JOB_ID" in env
    assert env["PRTE_MCA_plm"] == env["PRTE_MCA_ras"] == "^slurm"
    assert env["MPI4PY_LIBMPI"] == "/opt/ompi/lib"
    # The launcher finds our mpirun shim first, then the pool's Open MPI.
    assert env["PATH"] == f"{files}/bin:/opt/ompi/bin:/bin"
    assert target.env["PATH"] == "/opt/ompi/bin:/bin"
    assert launcher.files[f"{files}/bin/mpirun"] == File(MPIRUN_SHIM, 0o755)
    assert env["LD_LIBRARY_PATH"] == "/opt/ompi/lib"
    assert (env["GPUYARD_REXEC_SELF"], target.env["GPUYARD_REXEC_SELF"]) == ("node0", "node1")
    assert (target.env["GPUYARD_REXEC_ADDRESS"], target.env["GPUYARD_REXEC_PORT"]) == (
        "127.0.0.3",
        "20001",
    )
    assert target.env["GPUYARD_JOB_TOKEN"] == env["GPUYARD_JOB_TOKEN"] == "s3cret"
    assert "MASTER_ADDR" not in env and "RANK" not in env  # mpirun's ranks are not node ranks
    # On real nodes, nothing about host names; MPI's transports and daemons are told the pool's
    # interface (issue 24, point 8: not every interface).
    assert "GPUYARD_REXEC_HOSTNAME" not in env
    assert env["OMPI_MCA_btl_tcp_if_include"] == env["PRTE_MCA_prte_if_include"] == "eth0"
    assert env["OMPI_MCA_oob_tcp_if_include"] == env["UCX_NET_DEVICES"] == "eth0"


def test_mpi_on_virtual_nodes_of_one_host() -> None:
    # Nodes on loopback share a host: each worker's daemons take their node's host name, and
    # Open MPI's TCP transport is told to use loopback.
    spec = JobSpec(command="python mpi_test.py", mode="mpi", nodes=2)
    launcher, target = (plan(spec, rank, mpi_interface="lo") for rank in (0, 1))
    assert (launcher.env["GPUYARD_REXEC_HOSTNAME"], target.env["GPUYARD_REXEC_HOSTNAME"]) == (
        "node0",
        "node1",
    )
    assert launcher.env["OMPI_MCA_btl_tcp_if_include"] == "lo"
    assert launcher.env["HYDRA_IFACE"] == "lo"
    # PRRTE finds no interface for its daemons when told "lo": it is left to its default.
    assert "PRTE_MCA_prte_if_include" not in launcher.env


def test_every_job_gets_the_pools_interface_for_its_listeners() -> None:
    # Issue 24, point 8: the libraries a job uses to talk between nodes publish, connect and
    # (where they can) listen on the pool's interface; the job's env, or an InfiniBand pool's
    # preset, still decides for itself.
    torch_job = plan(JobSpec(command="python t.py", mode="pytorch", nodes=2), 0)
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "FI_TCP_IFACE", "UCX_NET_DEVICES"):
        assert torch_job.env[name] == "eth0", name
    own = JobSpec(command="python t.py", mode="mpi", nodes=2, env={"UCX_NET_DEVICES": "mlx5_0:1"})
    assert plan(own, 0).env["UCX_NET_DEVICES"] == "mlx5_0:1"
    ib = plan(
        JobSpec(command="python t.py", mode="mpi", nodes=2),
        0,
        network=NetworkPreset(network=Network.IB, interface="ib0"),
    )
    assert "UCX_NET_DEVICES" not in ib.env  # the fabric's devices, not a socket interface
    assert ib.env["NCCL_SOCKET_IFNAME"] == "ib0"  # the preset's


def test_the_agent_script_quotes_its_paths() -> None:
    spec = JobSpec(command="python t.py", mode="mpi", nodes=2)
    tools = Tools(python="/opt/my python/bin/python", rexec="/pool/rexec.py")
    launch = plan(spec, 0, tools=tools)
    agent = launch.files["/pool/jobs/42/attempts/1/task-0/rsh-agent"].content
    assert "exec '/opt/my python/bin/python' -I -S /pool/rexec.py agent" in agent


def test_mpich_launcher() -> None:
    spec = JobSpec(
        command="python mpi_test.py", mode="mpi", mpi="mpich", nodes=2, resources={"gpus": 2}
    )
    install = MpiInstall(bin_dir="/opt/mpich/bin", lib_dir="/opt/mpich/lib")
    launch = plan(spec, 0, mpi_interface="lo", mpi={MpiImplementation.MPICH: install})
    assert launch.argv == ["mpirun", "-np", "4", "python", "mpi_test.py"]
    files = "/pool/jobs/42/attempts/1/task-0"
    assert (launch.env["HYDRA_HOST_FILE"], launch.env["HYDRA_IFACE"]) == (
        f"{files}/mpich_hostfile",
        "lo",
    )
    assert (launch.env["HYDRA_LAUNCHER"], launch.env["HYDRA_LAUNCHER_EXEC"]) == (
        "ssh",
        f"{files}/rsh-agent",
    )
    assert launch.env["GPUYARD_HOSTFILE"] == f"{files}/mpich_hostfile"
    assert launch.env["PATH"] == "/opt/mpich/bin:/bin"  # its mpirun, not Open MPI's


def test_a_user_mpirun_is_left_alone() -> None:
    spec = JobSpec(command="mpirun -np 2 python t.py", mode="mpi", nodes=2)
    assert plan(spec, 0).argv == ["mpirun", "-np", "2", "python", "t.py"]


# -- tensorflow -------------------------------------------------------------------------------


def test_tensorflow_parameter_servers() -> None:
    spec = JobSpec(
        command="python tf.py",
        mode="tensorflow",
        nodes=2,
        parameter_servers=1,
        resources={"gpus": 1},
    )
    assert [(s.role.value, s.role_index, s.member.cpus, s.member.memory) for s in seats(spec)] == [
        ("worker", 0, 1.0, 0),
        ("worker", 1, 1.0, 0),
        ("ps", 0, 1.0, 1 << 30),
    ]
    cluster = '"ps": ["127.0.0.4:20002"], "worker": ["127.0.0.2:20000", "127.0.0.3:20001"]'
    worker1, ps0 = plan(spec, 1), plan(spec, 2)
    assert worker1.env["TF_CONFIG"] == (
        f'{{ "cluster": {{ {cluster} }}, "task": {{ "type": "worker", "index": "1" }}, '
        '"environment": "cloud" }'
    )
    assert json.loads(ps0.env["TF_CONFIG"])["task"] == {"type": "ps", "index": "0"}
    assert (ps0.role, ps0.primary, ps0.argv) == ("ps", False, ["python", "tf.py"])
    assert ps0.env["GPUYARD_NODE_RANK"] == "2" and ps0.env["GPUYARD_NUM_NODES"] == "3"


def test_tensorflow_allreduce() -> None:
    spec = JobSpec(command="python tf.py", mode="tensorflow", nodes=2)
    assert json.loads(plan(spec, 0).env["TF_CONFIG"]) == {
        "cluster": {"worker": ["127.0.0.2:20000", "127.0.0.3:20001"]},
        "task": {"type": "worker", "index": "0"},
        "environment": "cloud",
    }


# -- batch, workspace, network, slurm --------------------------------------------------------------


def test_batch_sub_tasks_have_their_own_gang_and_output_dir() -> None:
    spec = JobSpec(
        type="batch",
        mode="pytorch",
        nodes=2,
        tasks=[{"command": "python a.py"}, {"command": "python b.py", "algorithm": "/code/b"}],
        mounts={"algorithm": "/code/a", "outputs": "/results"},
    )
    task1_rank0, task1_rank1 = plan(spec, 2), plan(spec, 3)
    assert task1_rank0.env["GPUYARD_OUTPUT_DIR"] == "/results/train-1"
    assert (task1_rank0.env["GPUYARD_TASK_INDEX"], task1_rank0.env["GPUYARD_NUM_TASKS"]) == (
        "1",
        "2",
    )
    assert task1_rank1.env["MASTER_ADDR"] == "127.0.0.4"  # the sub-task's own rank 0
    assert task1_rank1.env["RANK"] == "1" and task1_rank1.argv[-1] == "b.py"
    binds = {b.target.rsplit("/", 1)[-1]: b for b in task1_rank0.binds}
    assert binds["algorithm"].source == "/code/b"
    assert binds["outputs"] == Bind(
        "/pool/jobs/42/attempts/1/worker-2/workspace/outputs", "/results/train-1", False
    )
    assert plan(spec, 0).env["GPUYARD_OUTPUT_DIR"] == "/results/train-0"


def test_workspace_binds() -> None:
    spec = JobSpec(
        command="x",
        mounts={
            "algorithm": "/code",
            "algorithm_readonly": False,
            "datasets": [
                {"name": "imagenet", "path": "/data/in"},
                {"name": "scratch", "path": "/data/s", "readonly": False},
            ],
            "models": [{"name": "bert", "path": "/models/bert", "readonly": False}],
            "volumes": [{"name": "cache", "path": "/vol/c", "readonly": True}],
        },
    )
    ws = "/pool/jobs/42/attempts/1/worker-0/workspace"
    assert list(plan(spec).binds) == [
        Bind(f"{ws}/algorithm", "/code", False),
        Bind(f"{ws}/dataset/imagenet", "/data/in", True),
        Bind(f"{ws}/dataset/scratch", "/data/s", False),
        Bind(f"{ws}/model/bert", "/models/bert", True),  # models are always read-only
        Bind(f"{ws}/outputs", "/pool/jobs/42/outputs", False),
        Bind(f"{ws}/volume/cache", "/vol/c", False),  # volumes are always writable
    ]


def test_only_a_catalogue_mount_at_a_path_the_pool_holds_is_opened_by_the_pool() -> None:
    """A bind is ``held`` (opened as root, not as the job's account) only for a pinned
    catalogue version at one of the paths the launch says the pool holds: a plain mount
    naming the same path is opened as the account, like any other."""
    spec = JobSpec(
        command="x",
        mounts={
            "datasets": [
                {"name": "up", "dataset": "a/up@1", "dataset_version": 7, "path": "/pool/v/k"},
                {"name": "plain", "path": "/pool/v/k"},
                {"name": "other", "dataset": "a/o@1", "dataset_version": 8, "path": "/share/o"},
            ]
        },
    )
    binds = {
        b.target.rsplit("/", 1)[1]: b.held for b in plan(spec, held=frozenset({"/pool/v/k"})).binds
    }
    assert binds == {"up": True, "plain": False, "other": False, "outputs": False}


@pytest.mark.parametrize(
    ("network", "gpus", "mode", "expected"),
    [
        # No preset: only the pool's interface for NCCL's sockets (listener_env, issue 24).
        (Network.NONE, 8, "pytorch", {"NCCL_SOCKET_IFNAME": "eth0"}),
        (
            Network.ROCE,
            8,
            "pytorch",
            {
                "NCCL_DEBUG": "INFO",
                "NCCL_IB_TC": "106",
                "NCCL_IB_GID_INDEX": "3",
                "NCCL_SOCKET_IFNAME": "eth0",
                "NCCL_CROSS_NIC": "0",
            },
        ),
        (
            Network.IB,
            8,
            "pytorch",
            {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_CROSS_NIC": "0"},
        ),
        (
            Network.IB,
            512,
            "pytorch",
            {
                "NCCL_DEBUG": "INFO",
                "NCCL_SOCKET_IFNAME": "eth0",
                "NCCL_CROSS_NIC": "0",
                "NCCL_ALGO": "TREE",
            },
        ),
        (
            Network.IB,
            512,
            "mpi",
            {
                "NCCL_DEBUG": "INFO",
                "NCCL_SOCKET_IFNAME": "eth0",
                "NCCL_CROSS_NIC": "0",
                "NCCL_ALGO": "RING",
            },
        ),
    ],
)
def test_network_presets(network: Network, gpus: int, mode: str, expected: dict[str, str]) -> None:
    spec = JobSpec(command="python t.py", mode=mode, nodes=2, resources={"gpus": gpus // 2})
    env = plan(spec, 0, network=NetworkPreset(network, large_scale_gpus=512)).env
    assert {k: v for k, v in env.items() if k.startswith("NCCL_")} == expected


def test_slurm_variables_for_one_process_per_node() -> None:
    spec = JobSpec(command="python t.py", nodes=3, name="bert")
    env = plan(spec, 2).env
    assert {k: v for k, v in env.items() if k.startswith("SLURM")} == {
        "SLURM_JOB_ID": "42",
        "SLURM_JOBID": "42",
        "SLURM_JOB_NAME": "train",
        "SLURM_CLUSTER_NAME": "gpuyard",
        "SLURM_JOB_NODELIST": "node[0-2]",
        "SLURM_NODELIST": "node[0-2]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NNODES": "3",
        "SLURM_NODEID": "2",
        "SLURMD_NODENAME": "node2",
        "SLURM_CPUS_ON_NODE": "4",
        "SLURM_GPUS_ON_NODE": "0",
        "SLURM_SUBMIT_DIR": env["GPUYARD_WORKSPACE"],
        "SLURM_RESTART_COUNT": "1",
        "SLURM_NTASKS": "3",
        "SLURM_NPROCS": "3",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_TASKS_PER_NODE": "1(x3)",
        "SLURM_PROCID": "2",
        "SLURM_LOCALID": "0",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_STEP_NUM_NODES": "3",
    }


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (["node0"], "node0"),
        (["node0", "node1", "node2", "node5"], "node[0-2,5]"),
        (["gpu01", "gpu02", "gpu10"], "gpu[01-02,10]"),
        (["a", "node3", "b"], "a,node3,b"),
        (["x1", "y1", "x2"], "x[1-2],y1"),
    ],
)
def test_hostlist_compression(hosts: list[str], expected: str) -> None:
    assert compress_hostlist(hosts) == expected


def test_the_mpirun_shim_gives_open_mpi_5_the_options_it_reads(tmp_path: Path) -> None:
    """Run the shim for real, in front of an ``mpirun`` that prints what it was given."""
    shim_dir, real_dir = tmp_path / "shim", tmp_path / "real"
    shim_dir.mkdir()
    real_dir.mkdir()
    (shim_dir / "mpirun").write_text(MPIRUN_SHIM)
    (shim_dir / "mpirun").chmod(0o755)
    (real_dir / "mpirun").write_text(
        '#!/bin/sh\nprintf "%s\\n" "PATH=$PATH"; for a; do printf "[%s]\\n" "$a"; done\n'
    )
    (real_dir / "mpirun").chmod(0o755)
    argv = ["-np", "4", "-bind-to", "none", "-map-by", "slot", "-x", "A B", "python", "t.py"]
    result = subprocess.run(
        ["mpirun", *argv],
        env={"PATH": f"{shim_dir}:{real_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0] == f"PATH={real_dir}:/usr/bin:/bin"  # the shim left PATH
    assert lines[1:] == [
        f"[{a}]"
        for a in [
            "-np",
            "4",
            "--bind-to",
            "none",
            "--map-by",
            "slot",
            "-x",
            "A B",
            "python",
            "t.py",
        ]
    ]


def test_a_job_in_an_image_keeps_its_image_and_not_the_nodes_paths() -> None:
    digest = "sha256:" + "ab" * 32
    spec = JobSpec(command="python x.py", image=f"team/train:3@{digest}", shm_size="2G")
    launch = plan(spec, base_env={"PATH": "/pool/bin", "VIRTUAL_ENV": "/pool", "LANG": "C"})
    assert launch.image == WorkerImage(f"team/train:3@{digest}", shm_size=2 << 30, workdir=None)
    # The image's own PATH and Python: not the node's; what else the pool passes stays.
    assert "PATH" not in launch.env and "VIRTUAL_ENV" not in launch.env
    assert launch.env["LANG"] == "C"
    assert launch.argv == ["python", "x.py"]  # the image's ENTRYPOINT goes in front on the node
    # The job may still set them, and name its working directory inside the image.
    spec = JobSpec(command="x", image="team/train:3", env={"PATH": "/opt/bin"}, workdir="/srv")
    launch = plan(spec)
    assert launch.env["PATH"] == "/opt/bin" and launch.image.workdir == "/srv"
    assert plan(JobSpec(command="x")).image is None


def test_an_mpi_job_in_an_image_runs_the_pools_tools_with_the_images_python_and_mpi() -> None:
    """docs/images.md, "Launch modes in an image": the node's MPI and Python are not in the
    image; the pool's package is, at IMAGE_LIBRARY, and the mpirun shim goes before the
    image's PATH (which only the node knows), not instead of it."""
    spec = JobSpec(
        command="python t.py", mode="mpi", nodes=2, resources={"gpus": 2}, image="team/mpi:1"
    )
    install = MpiInstall(bin_dir="/opt/ompi/bin", lib_dir="/opt/ompi/lib", env={"X_MPI": "1"})
    launcher = plan(spec, 0, mpi={MpiImplementation.OPENMPI: install})
    target = plan(spec, 1, mpi={MpiImplementation.OPENMPI: install})
    tool = f"{IMAGE_LIBRARY}/gpuyard/injob/rexec.py"
    assert target.argv == ["python3", "-I", "-S", tool, "serve"]
    files = "/pool/jobs/42/attempts/1/task-0"
    agent = launcher.files[f"{files}/rsh-agent"].content
    assert agent == f'#!/bin/sh\nexec python3 -I -S {tool} agent "$@"\n'
    for launch in (launcher, target):
        assert "PATH" not in launch.env and "LD_LIBRARY_PATH" not in launch.env
        assert "X_MPI" not in launch.env  # the node's installation stays out
    assert launcher.image.path == (f"{files}/bin",)  # the shim's directory, for the node
    assert target.image.path == ()
    # A job that sets PATH keeps it whole, the shim first.
    spec = spec.model_copy(update={"env": {"PATH": "/opt/bin"}})
    launcher = plan(spec, 0)
    assert launcher.env["PATH"] == f"{files}/bin:/opt/bin" and launcher.image.path == ()


def test_a_jobs_container_mounts_and_the_variables_that_give_way_to_the_images() -> None:
    spec = JobSpec(
        command="x",
        image="team/train:3",
        env={"PATH": "/host/bin", "WANDB_MODE": "offline"},
        container_mounts=[{"source": "/data", "target": "/mnt/data", "readonly": True}],
        env_over_image=["WANDB_MODE"],
    )
    image = plan(spec).image
    assert image is not None
    assert image.mounts == (Bind("/mnt/data", "/data", True),)
    # The image's PATH wins over the submitter's; the name given overrides the image's.
    assert image.weak_env == frozenset({"PATH"})
    everything = plan(spec.model_copy(update={"env_over_image": None})).image
    assert everything is not None and everything.weak_env == frozenset()


def test_a_slurm_script_in_an_image_gets_its_working_and_output_directories() -> None:
    from gpuyard.models.slurm import SlurmBatch

    slurm = SlurmBatch(
        script="#!/bin/sh\n",
        job_name="j",
        ntasks=1,
        submit_dir="/home/a/p",
        work_dir="/home/a/p",
        output="logs/%j/out.txt",
        error="/scratch/a/err-%j",
    )
    spec = JobSpec(mode="slurm", command="sbatch j.sh", slurm=slurm, image="t/x:1")
    launch = plan(spec)
    assert launch.image is not None
    assert [(b.target, b.source) for b in launch.image.mounts] == [
        ("/home/a/p", "/home/a/p"),  # the output's directory is below it
        ("/scratch/a", "/scratch/a"),
    ]
    # The batch step opens them wherever the script starts in the image.
    assert launch.env["GPUYARD_SLURM_OUTPUT"] == "/home/a/p/logs/%j/out.txt"
    assert launch.env["GPUYARD_SLURM_ERROR"] == "/scratch/a/err-%j"
