"""The reference's exact formats, byte for byte (reference 002: 分布式模式说明).

Each expected text is the reference's own example; where the reference shows a placeholder
(``${PS_HOST}``, ``${VK_TASK_INDEX}``, ``${进程数量}``, ``${master address}``), the test fills it
the way the reference describes, and says so.
"""

from __future__ import annotations

import json

import pytest

from gpuyard.launch.formats import deepspeed_hostfile, mpich_hostfile, openmpi_hostfile, tf_config
from gpuyard.launch.mpi import with_mpi_prefix
from gpuyard.launch.torchrun import wrap_python
from gpuyard.models import TorchLauncher
from gpuyard.models.command import parse_command
from gpuyard.models.job import MpiImplementation

TWO_BY_FOUR = [("server1", 4), ("server2", 4)]  # "2机4卡": two nodes, four GPUs each


def reference_text(text: str) -> str:
    """Join the reference's multi-line shell examples (``\\`` + newline) into one line."""
    return " ".join(text.replace("\\\n", " ").split())


def test_openmpi_hostfile() -> None:
    # "hostfile 的内容为：server1 slots=4 server2 slots=4", one host per line.
    assert openmpi_hostfile(TWO_BY_FOUR) == "server1 slots=4\nserver2 slots=4\n"


def test_mpich_hostfile() -> None:
    # "同样是2机4卡的训练，其内容为：server1:4 server2:4", one host per line.
    assert mpich_hostfile(TWO_BY_FOUR) == "server1:4\nserver2:4\n"


def test_deepspeed_hostfile() -> None:
    # "hostfile 的内容为：server1 slots=4 server2 slots=4" (PyTorch-DeepSpeed 模式)
    assert deepspeed_hostfile(TWO_BY_FOUR) == "server1 slots=4\nserver2 slots=4\n"


def test_hostfile_slots_are_one_on_cpu() -> None:
    # "如果是 CPU 规格，则为1": the caller passes slots=1 for CPU specs.
    assert openmpi_hostfile([("a", 1)]) == "a slots=1\n"


PS_REFERENCE = (
    '{ "cluster": { "ps": ["${PS_HOST}"], "worker": ["${WORKER_HOST}"] }, '
    '"task": { "type": "ps", "index": "${VK_TASK_INDEX}" }, "environment": "cloud" }'
)
WORKER_REFERENCE = (
    '{ "cluster": { "ps": ["${PS_HOST}"], "worker": ["${WORKER_HOST}"] }, '
    '"task":{ "type": "worker", "index": "${VK_TASK_INDEX}" }, "environment": "cloud" }'
)
ALLREDUCE_REFERENCE = """{
"cluster": {
"worker": ["${WORKER_HOST}"]
},
"task": {
"type": "worker",
"index": "${VK_TASK_INDEX}"
},
"environment": "cloud"
}"""


def fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("${" + key + "}", value)
    return template


def test_tf_config_parameter_server_task() -> None:
    expected = fill(PS_REFERENCE, PS_HOST="ps0:2222", WORKER_HOST="w0:2222", VK_TASK_INDEX="0")
    got = tf_config(workers=["w0:2222"], ps=["ps0:2222"], task_type="ps", task_index=0)
    assert got == expected


def test_tf_config_worker_task() -> None:
    # The reference writes `"task":{` without the space here, a typo of its own; everything else
    # is byte for byte the parameter-server example's spacing.
    expected = fill(WORKER_REFERENCE, PS_HOST="ps0:2222", WORKER_HOST="w1:2222", VK_TASK_INDEX="1")
    got = tf_config(workers=["w1:2222"], ps=["ps0:2222"], task_type="worker", task_index=1)
    assert got == expected.replace('"task":{', '"task": {')


def test_tf_config_allreduce() -> None:
    # The AllReduce example is laid out on lines; ours is the same text on one line.
    expected = fill(ALLREDUCE_REFERENCE, WORKER_HOST="w0:2222", VK_TASK_INDEX="0")
    got = tf_config(workers=["w0:2222"], ps=[], task_type="worker", task_index=0)
    assert got == " ".join(expected.split())
    assert json.loads(got) == json.loads(expected)


def test_tf_config_several_hosts_is_json_a_tf_cluster_reads() -> None:
    got = tf_config(workers=["a:1", "b:1"], ps=["c:1", "d:1"], task_type="ps", task_index=1)
    assert json.loads(got) == {
        "cluster": {"ps": ["c:1", "d:1"], "worker": ["a:1", "b:1"]},
        "task": {"type": "ps", "index": "1"},
        "environment": "cloud",
    }


PYTORCH_MASTER = """python \\
-m torch.distributed.launch \\
--nproc_per_node=4 --nnodes=2 \\
--node_rank=0 \\
--master_addr=localhost --master_port=2222 \\
/workspace/algorithm/train.py"""
PYTORCH_WORKER = """python \\
-m torch.distributed.launch \\
--nproc_per_node=4 --nnodes=2 \\
--node_rank=1 \\
--master_addr=${master address} --master_port=2222 \\
/workspace/algorithm/train.py"""


@pytest.mark.parametrize(
    ("node_rank", "master_addr", "reference"),
    [(0, "localhost", PYTORCH_MASTER), (1, "10.0.0.1", PYTORCH_WORKER)],
)
def test_pytorch_wrapping(node_rank: int, master_addr: str, reference: str) -> None:
    """The legacy launcher is reference 002's form, word for word; the default is the same with
    torch.distributed.run (torchrun), which passes no --local-rank."""
    expected = reference_text(reference.replace("${master address}", master_addr))
    for launcher, module in [
        (TorchLauncher.LEGACY, "torch.distributed.launch"),
        (TorchLauncher.TORCHRUN, "torch.distributed.run"),
    ]:
        wrapped = wrap_python(
            parse_command("python /workspace/algorithm/train.py"),
            nproc_per_node=4,
            nnodes=2,
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=2222,
            launcher=launcher,
        )
        assert wrapped is not None
        want = expected.replace("torch.distributed.launch", module)
        assert " ".join(wrapped.display_words()) == want


TORCHRUN = """torchrun \\
--nnodes ${WORLD_SIZE} \\
--nproc_per_node ${SLOTS} \\
--node_rank ${RANK} \\
--master_addr ${MASTER_ADDR} \\
--master_port ${MASTER_PORT} \\
/workspace/algorithm/train.py"""


@pytest.mark.parametrize(
    "command",
    [
        TORCHRUN,
        "python -m torch.distributed.launch --nproc_per_node 2 train.py",
        "python -m torch.distributed.run train.py",
        "bash run.sh",
        "python -c 'import x'",
    ],
)
def test_commands_the_pytorch_rules_leave_alone(command: str) -> None:
    parsed = parse_command(command)
    assert (
        wrap_python(
            parsed,
            nproc_per_node=4,
            nnodes=2,
            node_rank=0,
            master_addr="localhost",
            master_port=2222,
        )
        is None
    )


def test_torchrun_reference_form_expands_from_the_env() -> None:
    argv = parse_command(TORCHRUN).render(
        {
            "WORLD_SIZE": "2",
            "SLOTS": "4",
            "RANK": "1",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "2222",
        }
    )
    assert " ".join(argv) == (
        "torchrun --nnodes 2 --nproc_per_node 4 --node_rank 1 --master_addr 10.0.0.1 "
        "--master_port 2222 /workspace/algorithm/train.py"
    )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "python3 -u train.py --lr 0.1",
            "python3 -u -m torch.distributed.run {L} train.py --lr 0.1",
        ),
        ("python -m pkg.train --x", "python -m torch.distributed.run {L} -m pkg.train --x"),
        (
            "/opt/venv/bin/python3.11 t.py",
            "/opt/venv/bin/python3.11 -m torch.distributed.run {L} t.py",
        ),
        ("python -W ignore t.py", "python -W ignore -m torch.distributed.run {L} t.py"),
    ],
)
def test_pytorch_wrapping_keeps_interpreter_options_and_modules(
    command: str, expected: str
) -> None:
    launcher = (
        "--nproc_per_node=1 --nnodes=1 --node_rank=0 --master_addr=localhost --master_port=29500"
    )
    wrapped = wrap_python(
        parse_command(command),
        nproc_per_node=1,
        nnodes=1,
        node_rank=0,
        master_addr="localhost",
        master_port=29500,
    )
    assert wrapped is not None
    assert " ".join(wrapped.display_words()) == expected.format(L=launcher)


MPIRUN_REFERENCE = """mpirun \\
--allow-run-as-root \\
-np 16 \\
-bind-to none -map-by slot \\
-x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -x PATH \\
-mca pml ob1 -mca btl ^openib \\
python /workspace/test/train.py"""


def test_openmpi_prefix_for_a_command_without_mpirun() -> None:
    # "4机4卡 … 平台实际运行指令为" the example above (16 processes), word for word. (Open MPI
    # 5 reads it through the launcher's mpirun shim; see test_plan and tests/e2e/test_mpi.py.)
    prefixed = with_mpi_prefix(
        parse_command("python /workspace/test/train.py"), MpiImplementation.OPENMPI, 16
    )
    assert " ".join(prefixed.display_words()) == reference_text(MPIRUN_REFERENCE)


USER_MPIRUN = """mpirun -np 16 \\
-bind-to none -map-by slot \\
-x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -x PATH \\
-x NCCL_SOCKET_IFNAME=^lo,docker0 \\
-mca pml ob1 -mca btl ^openib \\
-mca btl_tcp_if_exclude lo,docker0 \\
python /workspace/algorithm/train.py"""


@pytest.mark.parametrize("implementation", list(MpiImplementation))
def test_a_command_with_mpirun_is_left_alone(implementation: MpiImplementation) -> None:
    parsed = parse_command(USER_MPIRUN)
    assert with_mpi_prefix(parsed, implementation, 16) is parsed
    assert " ".join(parsed.render({})) == reference_text(USER_MPIRUN)


def test_mpich_prefix_sets_only_the_process_count() -> None:
    prefixed = with_mpi_prefix(parse_command("python t.py"), MpiImplementation.MPICH, 4)
    assert prefixed.display_words() == ["mpirun", "-np", "4", "python", "t.py"]
