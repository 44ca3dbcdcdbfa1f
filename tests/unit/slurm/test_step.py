"""gpuyard.slurm.step.main, the batch step and ``srun`` inside a Slurm job: its pure parts.

The step runs as ``python -I -S entry.py`` and reads host lists through :mod:`gpuyard.hostlist`,
turning its errors into its own; the tests at the end hold its answers to gpuyard's.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuyard.hostlist import MAX_HOSTS, compress_hostlist, expand_hostlist
from gpuyard.slurm.step import main as step

# --- file name patterns ---------------------------------------------------------------------

VALUES = {
    "j": "42",
    "J": "42.3",
    "A": "40",
    "a": "2",
    "x": "train",
    "u": "alice",
    "N": "n0001",
    "n": "1",
    "t": "5",
    "s": "3",
}


@pytest.mark.parametrize(
    ("pattern", "expanded"),
    [
        ("slurm-%j.out", "slurm-42.out"),
        ("%J", "42.3"),
        ("slurm-%A_%a.out", "slurm-40_2.out"),
        ("%x-%u", "train-alice"),
        ("%N-%n-%t-%s", "n0001-1-5-3"),
        ("100%%", "100%"),
        ("%%j", "%j"),
        ("%5j", "00042"),
        ("%1j", "42"),
        ("%03t", "005"),
        ("%5x", "train"),  # not a number: no padding
        ("%10x", "train"),
        ("%q-%j", "%q-42"),  # unknown: kept as written
        ("%7q", "%7q"),
        ("end%", "end%"),
        ("end%5", "end%5"),
        ("plain.log", "plain.log"),
        ("", ""),
        ("\\%j", "%j"),  # a backslash: no replacement anywhere, backslashes dropped
        ("out-%j\\.log", "out-%j.log"),
        ("%j\\", "%j"),
    ],
)
def test_expand_pattern(pattern: str, expanded: str) -> None:
    assert step.expand_pattern(pattern, VALUES) == expanded


def test_pattern_values_from_the_environment() -> None:
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_ARRAY_JOB_ID": "40",
        "SLURM_ARRAY_TASK_ID": "2",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_NODELIST": "n[0003-0004],gpu7",
    }
    assert step._pattern_values(env, task="5", node_index="1", step="3") == {
        "j": "42",
        "J": "42.3",
        "A": "40",
        "a": "2",
        "x": "train",
        "u": "alice",
        "N": "n0003",
        "n": "1",
        "t": "5",
        "s": "3",
    }
    batch = step._pattern_values(
        {"SLURM_JOB_ID": "9", "USER": "bob"}, task="0", node_index="0", step="batch"
    )
    assert (batch["J"], batch["A"], batch["a"], batch["u"], batch["N"]) == (
        "9",
        "9",
        "4294967294",
        "bob",
        "",
    )


# --- srun's options -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "options", "command"),
    [
        (["hostname"], {}, ["hostname"]),
        (["-N2", "-n4", "hostname"], {"nodes": "2", "ntasks": "4"}, ["hostname"]),
        (["-N", "2", "--ntasks", "4", "hostname"], {"nodes": "2", "ntasks": "4"}, ["hostname"]),
        (["--nodes=2", "--ntasks=4", "hostname"], {"nodes": "2", "ntasks": "4"}, ["hostname"]),
        (["-wn1", "-c", "3", "x"], {"nodelist": "n1", "cpus_per_task": "3"}, ["x"]),
        (["--nodelist", "n[1-2]", "x"], {"nodelist": "n[1-2]"}, ["x"]),
        (["--ntasks-per-node=2", "x"], {"ntasks_per_node": "2"}, ["x"]),
        (["-l", "x"], {"label": "1"}, ["x"]),
        (["--label", "-u", "--exclusive", "x"], {"label": "1", "unbuffered": "1"}, ["x"]),
        (["-K", "x"], {"kill_on_bad_exit": "1"}, ["x"]),
        (["-K0", "x"], {"kill_on_bad_exit": "0"}, ["x"]),
        (["--kill-on-bad-exit", "x"], {"kill_on_bad_exit": "1"}, ["x"]),
        (["--kill-on-bad-exit=0", "x"], {"kill_on_bad_exit": "0"}, ["x"]),
        (["-K", "1"], {"kill_on_bad_exit": "1"}, ["1"]),  # -K's value must be attached
        (["-o", "out-%t.log", "--error=err"], {"output": "out-%t.log"}, None),
        (
            ["--export=NONE,A=1", "-J", "step", "x"],
            {"export": "NONE,A=1", "job_name": "step"},
            ["x"],
        ),
        (
            ["--open-mode", "append", "-D", "/tmp", "x"],
            {"open_mode": "append", "chdir": "/tmp"},
            ["x"],
        ),
        # Accepted without effect: the value is consumed, nothing is kept.
        (["--gres", "gpu:1", "--mpi=pmix", "-p", "gpu", "x"], {}, ["x"]),
        (["-n2", "--", "python", "-n", "3"], {"ntasks": "2"}, ["python", "-n", "3"]),
        (["--", "-x"], {}, ["-x"]),
        (["python", "-N", "2", "--bogus"], {}, ["python", "-N", "2", "--bogus"]),
    ],
)
def test_parse_srun(args: list[str], options: dict[str, str], command: list[str] | None) -> None:
    if command is None:  # the command after the options
        args = [*args, "cmd", "a"]
        command = ["cmd", "a"]
        options = {**options, "error": "err"}
    assert step.parse_srun(args) == (options, command)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "fatal: No command given to execute."),
        (["-n", "2"], "fatal: No command given to execute."),
        (["-l", "--"], "fatal: No command given to execute."),
        (["--bogus", "x"], "unrecognized option '--bogus'"),
        (["--bogus=1", "x"], "unrecognized option '--bogus=1'"),
        (["-Z", "x"], "unrecognized option '-Z'"),
        (["-n"], "option '-n' requires an argument"),
        (["--ntasks"], "option '--ntasks' requires an argument"),
        (["--label=1", "x"], "option '--label' doesn't allow an argument"),
    ],
)
def test_parse_srun_errors(args: list[str], message: str) -> None:
    with pytest.raises(step.SlurmError) as caught:
        step.parse_srun(args)
    assert str(caught.value) == message


# --- a step's layout ------------------------------------------------------------------------


def allocation(
    nodes: list[str], *, per_node: int = 1, ntasks: int | None = None, own: str | None = None
) -> Any:
    alloc = object.__new__(step._Allocation)
    alloc.job_id = "42"
    alloc.nodes = nodes
    alloc.hosts = {name: (f"10.0.0.{i + 1}", 7000 + i) for i, name in enumerate(nodes)}
    alloc.own = own or nodes[0]
    alloc.per_node = per_node
    alloc.ntasks = len(nodes) * per_node if ntasks is None else ntasks
    return alloc


TWO = ["node1", "node2"]


@pytest.mark.parametrize(
    ("options", "nodes", "counts"),
    [
        ({}, TWO, [2, 2]),  # the job's tasks over all its nodes
        ({"nodes": "1", "ntasks": "1", "nodelist": "node1"}, ["node1"], [1]),
        ({"nodes": "1", "ntasks": "1", "nodelist": "node2"}, ["node2"], [1]),
        ({"nodelist": "10.0.0.2"}, ["node2"], [2]),  # an address names its node
        ({"nodelist": "node2,node1"}, TWO, [2, 2]),  # in the allocation's order
        ({"nodelist": "node[1-2]"}, TWO, [2, 2]),
        ({"ntasks": "3"}, TWO, [2, 1]),
        ({"ntasks": "1"}, ["node1"], [1]),
        ({"ntasks": "5"}, TWO, [3, 2]),
        ({"nodes": "1"}, ["node1"], [2]),
        ({"nodes": "2", "ntasks": "3"}, TWO, [2, 1]),
        ({"ntasks_per_node": "1"}, TWO, [1, 1]),
        ({"ntasks_per_node": "3"}, TWO, [3, 3]),
        ({"nodes": "2-4"}, TWO, [2, 2]),  # the minimum
    ],
)
def test_layout(options: dict[str, str], nodes: list[str], counts: list[int]) -> None:
    assert step._layout(allocation(TWO, per_node=2), options) == (nodes, counts)


def test_layout_uses_the_jobs_task_count() -> None:
    # sbatch -N3 -n7: SLURM_NTASKS=7, SLURM_NTASKS_PER_NODE=3
    assert step._layout(allocation(["a1", "a2", "a3"], per_node=3, ntasks=7), {}) == (
        ["a1", "a2", "a3"],
        [3, 2, 2],
    )
    assert step._layout(allocation(["a1", "a2", "a3"]), {"ntasks": "7"}) == (
        ["a1", "a2", "a3"],
        [3, 2, 2],
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": "3"}, "Only allocated 2 nodes asked for 3"),
        (
            {"nodelist": "node9"},
            "Requested node configuration is not available: node9 is not in the job's "
            "allocation (node[1-2])",
        ),
        ({"nodes": "0"}, "invalid node count '0'"),
        ({"ntasks": "x"}, "invalid number of tasks 'x'"),
        ({"ntasks_per_node": "-1"}, "invalid ntasks-per-node '-1'"),
    ],
)
def test_layout_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(step.SlurmError) as caught:
        step._layout(allocation(TWO, per_node=2), options)
    assert str(caught.value) == message


def test_layout_nodelist_with_a_bracketed_list() -> None:
    alloc = allocation(["n1", "n2", "n3"])
    assert step._layout(alloc, {"nodelist": "n[1,3]"}) == (["n1", "n3"], [1, 1])


def test_allocation_from_the_environment(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.json"
    hosts.write_text(
        json.dumps(
            {
                "n0001": {"address": "10.0.0.1", "port": "7001"},
                "n0002": {"address": "10.0.0.2", "port": 7002},
                "junk": "not a dict",
            }
        )
    )
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n[0001-0002]",
        "GPUYARD_REXEC_HOSTS": str(hosts),
        "GPUYARD_REXEC_SELF": "n0001",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_NTASKS": "3",
    }
    alloc = step._Allocation(env)
    assert alloc.job_id == "42"
    assert alloc.nodes == ["n0001", "n0002"]
    assert alloc.hosts == {"n0001": ("10.0.0.1", 7001), "n0002": ("10.0.0.2", 7002)}
    assert (alloc.own, alloc.per_node, alloc.ntasks) == ("n0001", 2, 3)
    assert alloc.resolve("10.0.0.2") == "n0002"
    assert step._layout(alloc, {}) == (["n0001", "n0002"], [2, 1])

    with pytest.raises(step.SlurmError, match=r"^srun runs inside a job submitted with sbatch"):
        step._Allocation({"SLURM_JOB_ID": "42"})
    with pytest.raises(step.SlurmError, match=r"^cannot read the job's hosts: "):
        step._Allocation({**env, "GPUYARD_REXEC_HOSTS": str(tmp_path / "missing.json")})


# --- srun's --export and the task counts ----------------------------------------------------

ENV = {"A": "1", "B": "2", "PATH": "/bin", "SLURM_JOB_ID": "42", "GPUYARD_CONTROL_DIR": "/c"}
JOB_ONLY = {"SLURM_JOB_ID": "42", "GPUYARD_CONTROL_DIR": "/c"}


@pytest.mark.parametrize(
    ("export", "env"),
    [
        (None, ENV),
        ("ALL", ENV),
        ("all", ENV),
        ("ALL,C=3", {**ENV, "C": "3"}),
        ("ALL,A=9", {**ENV, "A": "9"}),
        ("NONE", JOB_ONLY),
        ("none", JOB_ONLY),
        ("NONE,A=1", {**JOB_ONLY, "A": "1"}),
        ("NONE,A=7,B", {**JOB_ONLY, "A": "7", "B": "2"}),
        ("B,PATH", {**JOB_ONLY, "B": "2", "PATH": "/bin"}),
        ("B,MISSING", {**JOB_ONLY, "B": "2"}),
    ],
)
def test_exported(export: str | None, env: dict[str, str]) -> None:
    assert step._exported(dict(ENV), export) == env


def test_exported_is_a_copy() -> None:
    env = dict(ENV)
    step._exported(env, "ALL,C=3")["A"] = "changed"
    assert env == ENV


@pytest.mark.parametrize(
    ("counts", "text"),
    [
        ([2, 2, 2, 1], "2(x3),1"),
        ([1], "1"),
        ([4, 4], "4(x2)"),
        ([1, 2, 2], "1,2(x2)"),
        ([3, 1, 3], "3,1,3"),
        ([], ""),
    ],
)
def test_tasks_text(counts: list[int], text: str) -> None:
    assert step.tasks_text(counts) == text


# --- the script's copy of the host-list code ------------------------------------------------


def _outcome(expand: Any, text: str) -> list[str] | str:
    try:
        return list(expand(text))
    except (ValueError, step.SlurmError):
        return "error"


def _generated_name_lists() -> list[list[str]]:
    rng = random.Random(20240501)
    fixed = [
        [f"n{i:04d}" for i in range(1, 121)],
        [f"n{i:04d}" for i in range(1, 121, 3)],
        ["gpu7"],
        ["gpu7", "gpu8", "gpu10"],
        ["x-3", "x-4", "x-03", "x-5"],
        ["n01", "n1"],
        ["n001", "n01", "n1", "n10", "n010"],
        ["gpu01", "gpu10", "gpu2", "gpu02"],
        ["n9", "n10", "n11", "n09"],
        ["n0001", "n0001", "n0002", "n0001"],
        ["login", "login", "n1", "login", "n0"],
        ["a1b2", "a1b3", "a2b2", "a1b02"],
        ["rack1-n1", "rack1-n2", "rack2-n1"],
        ["n00", "n0", "n000", "n1"],
        [],
    ]
    prefixes = ["n", "gpu", "x-", "node-a", "c1-", "login"]
    generated = []
    for _ in range(300):
        names = []
        for _ in range(rng.randint(1, 40)):
            prefix = rng.choice(prefixes)
            if prefix == "login" and rng.random() < 0.5:
                names.append("login")
                continue
            number = rng.randint(0, 130)
            width = rng.choice([0, 0, 1, 2, 3, 4])
            names.append(f"{prefix}{number:0{width}d}")
        names += rng.sample(names, k=rng.randint(0, len(names)))  # duplicates
        rng.shuffle(names)
        generated.append(names)
    return fixed + generated


NAME_LISTS = _generated_name_lists()


def test_compress_hostlist_agrees_with_gpuyard() -> None:
    differ = [
        (names, step.compress_hostlist(names), compress_hostlist(names))
        for names in NAME_LISTS
        if step.compress_hostlist(names) != compress_hostlist(names)
    ]
    assert differ == []


def test_expand_hostlist_agrees_with_gpuyard() -> None:
    texts = [compress_hostlist(names) for names in NAME_LISTS]
    texts += [",".join(names) for names in NAME_LISTS]
    differ = [
        (text, _outcome(step.expand_hostlist, text), _outcome(expand_hostlist, text))
        for text in texts
        if _outcome(step.expand_hostlist, text) != _outcome(expand_hostlist, text)
    ]
    assert differ == []


def test_compressed_lists_expand_back() -> None:
    for names in NAME_LISTS:
        text = step.compress_hostlist(names)
        assert sorted(step.expand_hostlist(text)) == sorted(set(names)), text


@pytest.mark.parametrize(
    "text",
    [
        "n[0001-0003,0010],gpu7",
        "n[9-11]",
        "n[08-10]",
        "n[5]",
        "n[1-010]",
        "n1,n1",
        "x",
        "",
        " n[1-2] ",
        "a,,b",
        "n[1-3],n[2-4]",
        # malformed: both refuse
        "n[3-1]",
        "n[1-2",
        "n1-2]",
        "n[a-b]",
        "n[[1-2]]",
        "n[]",
        "n[1,,2]",
        "n[1-2]b[3-4]",
        "n[-2]",
        # size: at the cap, and one past it
        f"n[1-{MAX_HOSTS}]",
        f"n[0-{MAX_HOSTS}]",
    ],
)
def test_expand_hostlist_agrees_on_written_lists(text: str) -> None:
    assert _outcome(step.expand_hostlist, text) == _outcome(expand_hostlist, text)


@pytest.mark.parametrize("text", ["a b,c", "n[1-2]x"])
def test_expand_hostlist_agrees_on_whitespace_and_suffixes(text: str) -> None:
    assert _outcome(step.expand_hostlist, text) == _outcome(expand_hostlist, text)


def test_compress_examples() -> None:
    assert step.compress_hostlist(["n0003", "n0001", "n0002", "x", "n0010"]) == (
        "n[0001-0003,0010],x"
    )
    assert step.compress_hostlist(["n9", "n10"]) == "n[9-10]"
    assert step.compress_hostlist(["gpu01", "gpu10"]) == "gpu[01,10]"
    assert step.compress_hostlist(["n01", "n1"]) == "n01,n1"
    assert step.compress_hostlist(["x", "x"]) == "x"
    assert step.compress_hostlist([]) == ""


# --- scontrol inside the job ----------------------------------------------------------------


def test_scontrol_show_hostnames(capsys: pytest.CaptureFixture[str]) -> None:
    assert step.main(["scontrol", "show", "hostnames", "n[0001-0002],gpu7"]) == 0
    assert capsys.readouterr().out == "n0001\nn0002\ngpu7\n"


def test_scontrol_requeuehold_inside_a_job_is_refused_not_a_plain_requeue(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("GPUYARD_CONTROL_DIR", str(tmp_path))
    assert step.main(["scontrol", "requeuehold", "9"]) != 0
    assert "cannot hold it" in capsys.readouterr().err
    assert not (tmp_path / "suspended.json").exists()
    assert step.main(["scontrol", "requeue", "9"]) == 0
    assert json.loads((tmp_path / "suspended.json").read_text())["requeue"] is True


def test_main_usage_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert step.main(["bogus"]) == step.EXIT_USAGE
    assert capsys.readouterr().err == "usage: slurmstep.py {batch|srun|scontrol} ...\n"
    assert step.main(["srun"]) == step.EXIT_USAGE
    assert capsys.readouterr().err == "srun: error: fatal: No command given to execute.\n"


# --- how srun relays a task's output ----------------------------------------------------------


def _relay(tmp_path: Path, prefix: bytes, unbuffered: bool, chunks: list[bytes]) -> list[bytes]:
    """The writes a task's output makes on srun's own stream, one list item per write."""
    import os
    import threading

    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    writes: list[bytes] = []
    output = step._TaskOutput(fd, prefix, unbuffered, threading.Lock())
    output._emit = writes.append
    for chunk in chunks:
        output.write(chunk)
    output.close()
    os.close(fd)
    return writes


def test_task_output_goes_out_in_whole_lines(tmp_path: Path) -> None:
    # print() without a buffer reaches the pipe as text, then newline: one write of the line.
    assert _relay(tmp_path, b"", False, [b"rank=0", b"\n", b"a\nb", b"\nc"]) == [
        b"rank=0\n",
        b"a\n",
        b"b\n",
        b"c",  # the rest, when the stream ends
    ]


def test_task_output_unbuffered_relays_bytes_as_they_come(tmp_path: Path) -> None:
    assert _relay(tmp_path, b"", True, [b"rank=0", b"\n"]) == [b"rank=0", b"\n"]


def test_task_output_labels_every_line(tmp_path: Path) -> None:
    assert _relay(tmp_path, b"3: ", False, [b"a\nb", b"b\n\nc"]) == [
        b"3: a\n",
        b"3: bb\n3: \n",
        b"3: c",
    ]


def test_task_output_a_line_without_end_goes_out_in_pieces(tmp_path: Path) -> None:
    limit = step._TaskOutput.LIMIT
    writes = _relay(tmp_path, b"", False, [b"x" * (limit - 1), b"yy", b"z\n"])
    assert writes == [b"x" * (limit - 1) + b"yy", b"z\n"]


def test_concurrent_tasks_never_split_each_others_lines(tmp_path: Path) -> None:
    import os
    import threading

    path = tmp_path / "shared"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    lock = threading.Lock()

    def task(rank: int) -> None:
        output = step._TaskOutput(fd, b"", False, lock)
        for i in range(300):
            output.write(f"rank={rank} i={i}".encode())
            output.write(b"\n")
        output.close()

    threads = [threading.Thread(target=task, args=(rank,)) for rank in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    os.close(fd)
    lines = path.read_text().splitlines()
    assert len(lines) == 1200
    assert all(line.count("rank=") == 1 for line in lines)


# --- heterogeneous steps (srun A : B) ---------------------------------------------------------

HET_ENV = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NODELIST": "n1",
    "SLURM_NTASKS": "2",
    "SLURM_HET_SIZE": "2",
    "SLURM_JOB_NAME": "a",
    "SLURM_JOB_ID_HET_GROUP_0": "42",
    "SLURM_JOB_ID_HET_GROUP_1": "43",
    "SLURM_JOB_NAME_HET_GROUP_0": "a",
    "SLURM_JOB_NAME_HET_GROUP_1": "b",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "n1",
    "SLURM_JOB_NODELIST_HET_GROUP_1": "n[2-3]",
    "SLURM_NTASKS_HET_GROUP_0": "2",
    "SLURM_NTASKS_HET_GROUP_1": "2",
    "SLURM_NTASKS_PER_NODE_HET_GROUP_0": "2",
    "SLURM_NTASKS_PER_NODE_HET_GROUP_1": "1",
    "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0": "2",
    "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "2(x2)",
}


def het_allocation() -> Any:
    alloc = allocation(["n1"], per_node=2)
    alloc.het_size = 2
    alloc._env = HET_ENV
    alloc.hosts = {"n1": ("10.0.0.1", 1), "n2": ("10.0.0.2", 2), "n3": ("10.0.0.3", 3)}
    return alloc


def test_a_heterogeneous_step_is_one_step_over_its_groups() -> None:
    groups = [step.parse_srun(g) for g in step._groups(["-l", "sh", ":", "-n2", "hostname"])]
    parts = step._plan(groups, het_allocation())
    assert [(p.component, p.nodes, p.counts, p.offset) for p in parts] == [
        (0, ["n1"], [2], 0),
        (1, ["n2", "n3"], [1, 1], 2),
    ]
    for part in parts:
        step._step_env(part, parts, 0, dict(HET_ENV))
    first, second = (p.forwarded for p in parts)
    # as Slurm 22.05 sets them (tests/data/slurm/cases/het_env_sizes.json)
    for env in (first, second):
        assert env["SLURM_JOB_NODELIST"] == env["SLURM_STEP_NODELIST"] == "n[1-3]"
        assert env["SLURM_NTASKS"] == env["SLURM_STEP_NUM_TASKS"] == "4"
        assert env["SLURM_TASKS_PER_NODE"] == "2,1(x2)"
        assert env["SLURM_JOB_CPUS_PER_NODE"] == "2(x3)"
        assert env["SLURM_JOB_NAME"] == "b"  # the last group's
        assert env["SLURM_JOB_ID"] == "42"
    assert (first["SLURM_DISTRIBUTION"], second["SLURM_DISTRIBUTION"]) == ("block", "cyclic")
    assert (first["SLURM_NTASKS_PER_NODE"], second["SLURM_NTASKS_PER_NODE"]) == ("2", "1")
    assert parts[1].gtids == {"n2": "2", "n3": "3"}


def test_one_component_is_the_steps_job() -> None:
    groups = [step.parse_srun(["--het-group=1", "hostname"])]
    [part] = step._plan(groups, het_allocation())
    step._step_env(part, [part], 3, dict(HET_ENV))
    env = part.forwarded
    assert (env["SLURM_JOB_ID"], env["SLURM_JOB_NAME"], env["SLURM_NODELIST"]) == (
        "43",
        "b",
        "n[2-3]",
    )
    assert env["SLURM_DISTRIBUTION"] == "block" and env["SLURM_STEP_ID"] == "3"
    # a plain srun runs on component 0
    [plain] = step._plan([step.parse_srun(["hostname"])], het_allocation())
    assert (plain.component, plain.nodes, plain.counts) == (0, ["n1"], [2])


@pytest.mark.parametrize(
    ("args", "het", "message"),
    [
        (["a", ":", "b"], False, "heterogeneous steps (srun ... : ... or --het-group) run inside"),
        (["--het-group=0", "a"], False, "heterogeneous steps"),
        (
            ["a", ":", "b", ":", "c"],
            True,
            "het group value of 2, but the job allocation has maximum value of 1",
        ),
        (["--het-group=0-5", "a"], True, "het group value of 2"),
        (["--het-group=x", "a"], True, "Invalid --het-group value: x"),
        (["--het-group=1-0", "a"], True, "Invalid --het-group value: 1-0"),
    ],
)
def test_heterogeneous_steps_refused_saying_why(args: list[str], het: bool, message: str) -> None:
    alloc = het_allocation() if het else allocation(TWO)
    if not het:
        alloc.het_size = 0
    groups = [step.parse_srun(g) for g in step._groups(args)]
    with pytest.raises(step.SlurmError, match=re.escape(message)):
        step._plan(groups, alloc)


def test_a_component_whose_nodes_are_not_the_jobs_is_refused() -> None:
    alloc = het_allocation()
    alloc._env = {**HET_ENV, "SLURM_JOB_NODELIST_HET_GROUP_1": "elsewhere"}
    with pytest.raises(step.SlurmError, match=r"^component 1 of the job has no nodes here"):
        step._plan([step.parse_srun(["--het-group=1", "true"])], alloc)


def test_a_count_the_script_garbled_is_refused_by_name() -> None:
    alloc = het_allocation()
    alloc._env = {**HET_ENV, "SLURM_NTASKS_PER_NODE_HET_GROUP_1": "two"}
    with pytest.raises(step.SlurmError, match=r"^SLURM_NTASKS_PER_NODE_HET_GROUP_1='two' in"):
        step._plan([step.parse_srun(["--het-group=1", "true"])], alloc)


# --- the batch step's output ----------------------------------------------------------------


def run_batch(tmp_path: Path, output: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hello from the batch step\n")
    script.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "6"}
    env |= {"SLURM_ARRAY_TASK_ID": "2", "GPUYARD_SLURM_OUTPUT": output}
    entry = Path(step.__file__).with_name("entry.py")
    return subprocess.run(
        [sys.executable, "-I", "-S", str(entry), "batch", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_batch_step_creates_the_missing_directory_of_its_output(tmp_path: Path) -> None:
    # submitit creates an array task's folder only after sbatch returned (docs/slurm.md).
    done = run_batch(tmp_path, str(tmp_path / "logs" / "%A_%a" / "%A_%a_0_log.out"))
    assert done.returncode == 0, done.stderr
    log = tmp_path / "logs" / "6_2" / "6_2_0_log.out"
    assert log.read_text() == "hello from the batch step\n"


def test_the_batch_step_fails_as_slurm_where_it_cannot_create_the_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("")  # a file where a directory would have to be
    done = run_batch(tmp_path, str(tmp_path / "file" / "logs" / "%j.out"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"slurmstepd: error: cannot open {tmp_path / 'file'}"), (
        done.stderr
    )
