"""sbatch's script and options become gpuyard job specs (mode ``slurm``) that validate.

Every good case goes through ``JobSpec.model_validate``: what ``build_specs`` makes is what the
server is sent, so a spec that does not validate is a bug here, not the server's.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuyard.models import JobSpec
from gpuyard.models.job import MAX_ENV, MAX_ENV_BYTES
from gpuyard.models.slurm import MAX_SCRIPT
from gpuyard.slurm.options import OptionError, parse_begin, parse_sbatch
from gpuyard.slurm.sbatch import build_specs, forwarded_environment, parse, read_script

SCRIPT = "#!/bin/bash\necho hello\n"
CWD = "/home/alice/project"
ENVIRON = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/alice",
    "LANG": "C.UTF-8",
    "SLURM_JOB_ID": "17",
    "SLURMD_NODENAME": "n1",
    "SBATCH_PARTITION": "gpu",
    "SRUN_CPUS_PER_TASK": "2",
    "SALLOC_X": "1",
    "GPUYARD_TOKEN": "secret",
    "GPUYARD_SERVER": "http://x",
    "BAD-NAME": "1",
    "1ST": "1",
}


def build(
    args: list[str],
    script: str = SCRIPT,
    *,
    script_name: str = "job.sh",
    environ: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The specs of ``sbatch ARGS`` (the script's directives read as well), each validated."""
    options = parse_sbatch(args, script)
    specs = build_specs(
        options,
        script,
        script_name=script_name,
        cwd=CWD,
        environ=ENVIRON if environ is None else environ,
        pools=["gpu", "cpu"],
        uid=1000,
        gid=1000,
    )
    for spec in specs:
        JobSpec.model_validate(spec)
    return specs


def one(args: list[str], script: str = SCRIPT, **kwargs: Any) -> dict[str, Any]:
    specs = build(args, script, **kwargs)
    assert len(specs) == 1
    return specs[0]


def refused(args: list[str], script: str = SCRIPT) -> str:
    with pytest.raises(OptionError) as caught:
        build(args, script)
    return str(caught.value)


# --- the environment ------------------------------------------------------------------------


def test_forwarded_environment_drops_slurm_gpuyard_and_invalid_names() -> None:
    assert forwarded_environment(ENVIRON, None) == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/alice",
        "LANG": "C.UTF-8",
    }
    assert forwarded_environment(ENVIRON, "ALL") == forwarded_environment(ENVIRON, None)


def test_forwarded_environment_drops_values_with_nul() -> None:
    assert forwarded_environment({"A": "x\0y", "B": "1"}, None) == {"B": "1"}


@pytest.mark.parametrize(
    ("export", "env"),
    [
        ("NONE", {}),
        ("none", {}),
        ("NONE,A=1", {"A": "1"}),
        ("NONE,A=1,PATH", {"A": "1", "PATH": "/usr/bin:/bin"}),
        ("ALL,B=2", {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "LANG": "C.UTF-8", "B": "2"}),
        ("ALL,B", {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "LANG": "C.UTF-8"}),
        ("PATH,HOME", {"PATH": "/usr/bin:/bin", "HOME": "/home/alice"}),
        ("PATH,MISSING", {"PATH": "/usr/bin:/bin"}),
        ("LANG,X=a=b", {"LANG": "C.UTF-8", "X": "a=b"}),
    ],
)
def test_forwarded_environment_export(export: str, env: dict[str, str]) -> None:
    assert forwarded_environment(ENVIRON, export) == env


def test_forwarded_environment_refuses_a_bad_name() -> None:
    with pytest.raises(OptionError, match=r"^--export: 'BAD-NAME' is not a variable name$"):
        forwarded_environment(ENVIRON, "NONE,BAD-NAME=1")


@pytest.mark.parametrize(
    "export", ["PATH,GPUYARD_TOKEN", "NONE,GPUYARD_TOKEN=x", "ALL,SLURM_JOB_ID=1", "SRUN_X"]
)
def test_forwarded_environment_refuses_what_the_pool_sets_or_a_token(export: str) -> None:
    # Named or given a value, a SLURM_*/GPUYARD_* variable never lands in a job's spec.
    with pytest.raises(OptionError, match=r"cannot be given to a job"):
        forwarded_environment(ENVIRON, export)


def test_an_oversized_environment_is_trimmed_keeping_path_and_home() -> None:
    many = {f"VAR_{i:04d}": "x" for i in range(MAX_ENV + 50)}
    environ = {"PATH": "/usr/bin", "HOME": "/home/alice", **many}
    env = forwarded_environment(environ, None)
    assert len(env) == MAX_ENV
    assert env["PATH"] == "/usr/bin"
    assert env["HOME"] == "/home/alice"
    assert set(env) <= set(environ)

    # Too many bytes: the biggest go first, the small and the protected stay.
    environ = {
        "PATH": "/p" * 20_000,
        "HOME": "/home/alice",
        "LS_COLORS": "x" * MAX_ENV_BYTES,
        "BASH_FUNC_f%%": "ignored",
        "SMALL": "1",
    }
    assert forwarded_environment(environ, None) == {
        "PATH": "/p" * 20_000,
        "HOME": "/home/alice",
        "SMALL": "1",
    }


def test_an_oversized_environment_still_gives_a_valid_spec() -> None:
    environ = {"PATH": "/usr/bin", "HOME": "/h"}
    environ |= {f"V{i}": "y" * 1000 for i in range(200)}  # 200 kB
    spec = one([], environ=environ)
    assert spec["env"]["PATH"] == "/usr/bin"
    assert spec["env"]["HOME"] == "/h"
    assert sum(len(k) + len(v) for k, v in spec["env"].items()) <= MAX_ENV_BYTES


def test_the_spec_carries_the_forwarded_environment() -> None:
    assert one([])["env"] == {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "LANG": "C.UTF-8"}
    assert one(["--export=NONE"])["env"] == {}
    assert one(["--export=NONE,A=1"])["env"] == {"A": "1"}


# --- the whole spec -------------------------------------------------------------------------


def test_a_plain_script_gives_one_spec() -> None:
    spec = one([])
    slurm = spec.pop("slurm")
    assert spec == {
        "name": "job.sh",
        "mode": "slurm",
        "command": "sbatch job.sh",
        "nodes": 1,
        "resources": {"gpus": 0, "cpus": 1.0},
        "env": {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "LANG": "C.UTF-8"},
    }
    submit_host = slurm.pop("submit_host")
    assert isinstance(submit_host, str) and submit_host
    assert slurm == {
        "script": SCRIPT,
        "job_name": "job.sh",
        "ntasks": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": None,
        "submit_dir": CWD,
        "work_dir": CWD,
        "output": "slurm-%j.out",
        "error": None,
        "open_mode": "truncate",
        "requeue": True,
        "signal": None,
        "partition": "default",
        "account": "",
        "qos": "normal",
        "comment": "",
        "options": {},
        "uid": 1000,
        "gid": 1000,
    }


def test_a_script_name_that_needs_quoting() -> None:
    spec = one([], script_name="my job.sh")
    assert spec["command"] == "sbatch 'my job.sh'"
    assert spec["name"] == "my-job.sh"
    assert spec["slurm"]["job_name"] == "my job.sh"


# --- nodes, tasks, CPUs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "nodes", "ntasks", "per_node", "cpus"),
    [
        ([], 1, 1, 1, 1.0),
        (["-N2"], 2, 2, 1, 1.0),
        (["-N2", "-n4"], 2, 4, 2, 2.0),
        (["-n3", "-N2"], 2, 3, 2, 2.0),
        (["-n4"], 1, 4, 4, 4.0),
        (["-N2", "--ntasks-per-node=3", "-c4"], 2, 6, 3, 12.0),
        (["--nodes=2", "--tasks-per-node=2"], 2, 4, 2, 2.0),
        (["-N2", "-n4", "--cpus-per-task=8"], 2, 4, 2, 16.0),
        (["--nodes=2-4"], 2, 2, 1, 1.0),  # the minimum
        (["--gpus-per-node=2", "--cpus-per-gpu=8"], 1, 1, 1, 16.0),
    ],
)
def test_layout(args: list[str], nodes: int, ntasks: int, per_node: int, cpus: float) -> None:
    spec = one(args)
    assert spec["nodes"] == nodes
    assert spec["slurm"]["ntasks"] == ntasks
    assert spec["slurm"]["ntasks_per_node"] == per_node
    assert spec["resources"]["cpus"] == cpus


def test_layout_from_the_script_and_the_command_line() -> None:
    script = "#!/bin/sh\n#SBATCH -N 4 --ntasks-per-node=2 -c 3\nsrun hostname\n"
    spec = one(["-N2"], script)
    assert (spec["nodes"], spec["slurm"]["ntasks"], spec["slurm"]["cpus_per_task"]) == (2, 4, 3)
    assert spec["resources"]["cpus"] == 6.0


def test_fewer_tasks_than_nodes_is_refused() -> None:
    assert refused(["--ntasks=1", "-N2"]) == (
        "--ntasks=1 is fewer than --nodes=2: every node runs a task"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-N0"], "invalid --nodes value '0': give a positive whole number"),
        (["-Nx"], "invalid --nodes value 'x': give a positive whole number"),
        (["-n", "-2"], "invalid --ntasks value '-2': give a positive whole number"),
        (["-c0"], "invalid --cpus-per-task value '0': give a positive whole number"),
    ],
)
def test_bad_counts_are_refused(args: list[str], message: str) -> None:
    assert refused(args) == message


# --- GPUs and memory ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "gpus"),
    [
        ([], 0),
        (["--gpus-per-node=2"], 2),
        (["--gpus-per-node=a100:2"], 2),
        (["-N2", "-n4", "--gpus-per-task=1"], 2),
        (["-n3", "--gpus-per-task=2"], 6),
        (["--gres=gpu:2"], 2),
        (["--gres=gpu:a100:2"], 2),
        (["--gres=gpu:a100"], 1),
        (["--gres=gpu"], 1),
        (["--gpus=4", "-N2"], 2),
        (["--gpus=3", "-N2"], 2),  # rounded up per node
        (["-G", "a100:4"], 4),
        (["--gpus-per-node=1", "--gres=gpu:8"], 1),  # --gpus-per-node comes first
    ],
)
def test_gpus(args: list[str], gpus: int) -> None:
    assert one(args)["resources"]["gpus"] == gpus


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gres=mps:100"], "--gres=mps:100: only gpu resources exist here"),
        (["--gpus-per-node=a100"], "Invalid --gpus-per-node specification: 'a100'"),
        (["--gpus=x"], "Invalid --gpus specification: 'x'"),
    ],
)
def test_bad_gpus_are_refused(args: list[str], message: str) -> None:
    assert refused(args) == message


@pytest.mark.parametrize(
    ("args", "memory"),
    [
        ([], None),
        (["--mem=4G"], 4 << 30),
        (["--mem=512"], 512 << 20),
        (["--mem=1T"], 1 << 40),
        (["-c4", "--mem-per-cpu=1G"], 4 << 30),
        (["-N2", "-n4", "-c2", "--mem-per-cpu=100"], 4 * 100 << 20),
        (["--gpus-per-node=2", "--mem-per-gpu=10G"], 20 << 30),
        (["--mem=2G", "--mem-per-cpu=8G"], 2 << 30),  # --mem first
    ],
)
def test_memory_is_bytes(args: list[str], memory: int | None) -> None:
    assert one(args)["resources"].get("memory") == memory


def test_bad_memory_is_refused() -> None:
    assert refused(["--mem=lots"]) == "Invalid --mem specification"
    assert refused(["--mem-per-gpu=1X"]) == "Invalid --mem-per-gpu specification"


# --- time, partition, qos, signal -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        (["--time=1:00:00"], 3600.0),
        (["-t", "2-0"], 172800.0),
        (["-t90"], 5400.0),
        (["--time=0"], None),
        (["--time=UNLIMITED"], None),
        ([], None),
    ],
)
def test_time_is_max_runtime(args: list[str], seconds: float | None) -> None:
    assert one(args).get("max_runtime") == seconds


def test_bad_time_is_refused() -> None:
    assert refused(["--time=soon"]) == "Invalid --time specification"


@pytest.mark.parametrize(
    ("args", "pool", "partition"),
    [
        ([], None, "default"),
        (["-p", "default"], None, "default"),
        (["-p", "gpu"], "gpu", "gpu"),
        (["--partition=cpu,gpu"], "cpu", "cpu"),
    ],
)
def test_partition(args: list[str], pool: str | None, partition: str) -> None:
    spec = one(args)
    assert spec.get("pool") == pool
    assert spec["slurm"]["partition"] == partition


def test_unknown_partition_lists_the_partitions() -> None:
    assert refused(["-p", "nope"]) == (
        "invalid partition specified: nope (partitions here: cpu, default, gpu)"
    )


@pytest.mark.parametrize(
    ("args", "priority", "qos"),
    [
        ([], None, "normal"),
        (["--qos", "high"], "high", "high"),
        (["-q", "HIGH"], "high", "HIGH"),
        (["--qos=low"], "low", "low"),
        (["--qos=highest"], "highest", "highest"),
    ],
)
def test_qos_is_priority(args: list[str], priority: str | None, qos: str) -> None:
    spec = one(args)
    assert spec.get("priority") == priority
    assert spec["slurm"]["qos"] == qos


def test_unknown_qos_lists_the_choices() -> None:
    assert refused(["--qos=premium"]) == (
        "invalid qos specification: premium (QOS here: low, normal, high, highest)"
    )


@pytest.mark.parametrize(
    ("text", "signal"),
    [
        ("B:USR1@90", {"signal": 10, "seconds": 90, "batch": True}),
        ("b:USR1@90", {"signal": 10, "seconds": 90, "batch": True}),
        ("USR2", {"signal": 12, "seconds": 60, "batch": False}),
        ("SIGTERM@30", {"signal": 15, "seconds": 30, "batch": False}),
        ("10@5", {"signal": 10, "seconds": 5, "batch": False}),
        ("usr1@0", {"signal": 10, "seconds": 0, "batch": False}),
    ],
)
def test_signal(text: str, signal: dict[str, Any]) -> None:
    assert one([f"--signal={text}"])["slurm"]["signal"] == signal


@pytest.mark.parametrize("text", ["BOGUS", "USR1@x", "B:", "@90", "USR1@-5", "99"])
def test_bad_signal_is_refused(text: str) -> None:
    assert refused([f"--signal={text}"]).startswith("Invalid --signal specification: ")


# --- refused and kept options ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["--deadline=now+1hour"], "--deadline: --deadline is not supported yet"),
        (["--uid=0"], "--uid: jobs run as their owner"),
        (["--input=in.txt"], "--input: a batch job reads no standard input here"),
    ],
)
def test_refused_options_are_named(args: list[str], start: str) -> None:
    assert refused(args).startswith(start)


def test_a_refused_option_in_the_script_is_refused_too() -> None:
    script = "#!/bin/sh\n#SBATCH --deadline=now+1hour\n"
    assert refused([], script).startswith("--deadline: ")


# --- --begin ------------------------------------------------------------------------------

# Wednesday 2026-11-25 10:30:00 local time.
NOW = dt.datetime(2026, 11, 25, 10, 30).timestamp()


def local(*parts: int) -> float:
    return dt.datetime(*parts).timestamp()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "begin"),
    [
        ("now", NOW),
        ("now+60", NOW + 60),
        ("now+1hour", NOW + 3600),
        ("now+2hours", NOW + 7200),
        ("now+10minutes", NOW + 600),
        ("now+1day", NOW + 86400),
        ("now+1week", NOW + 7 * 86400),
        ("16:00", local(2026, 11, 25, 16)),
        ("09:15", local(2026, 11, 26, 9, 15)),  # passed today: tomorrow
        ("4:00PM", local(2026, 11, 25, 16)),
        ("12:00am", local(2026, 11, 26, 0)),
        ("midnight", local(2026, 11, 26)),
        ("noon", local(2026, 11, 25, 12)),
        ("teatime", local(2026, 11, 25, 16)),
        ("today", local(2026, 11, 25)),
        ("tomorrow", local(2026, 11, 26)),
        ("2026-12-01", local(2026, 12, 1)),
        ("2026-12-01T08:05", local(2026, 12, 1, 8, 5)),
        ("2026-12-01T08:05:09", local(2026, 12, 1, 8, 5, 9)),
        ("12/24", local(2026, 12, 24)),
        ("12/24/27", local(2027, 12, 24)),
        ("1224", local(2026, 12, 24)),
        ("12.24.27-10:00", local(2027, 12, 24, 10)),
        ("01/02", local(2027, 1, 2)),  # passed this year: next year's
    ],
)
def test_begin_reads_slurms_time_forms(text: str, begin: float) -> None:
    assert parse_begin(text, NOW) == begin


@pytest.mark.parametrize("text", ["soon", "now+1fortnight", "25:00", "2026-13-01", "13/45", ""])
def test_a_bad_begin_is_refused_as_slurm_words_it(text: str) -> None:
    with pytest.raises(OptionError, match=r"^Invalid --begin specification$"):
        parse_begin(text, NOW)


def test_begin_goes_into_the_spec() -> None:
    begin = one(["--begin=now+1hour"])["slurm"]["begin"]
    assert begin is not None and 3590 < begin - time.time() <= 3600


@pytest.mark.parametrize(
    ("args", "after"),
    [
        (["--dependency=afterok:12"], [{"job": 12, "when": "succeeded"}]),
        (
            ["-d", "afterok:12:13,afterany:14,after:1,afternotok:2"],
            [
                {"job": 12, "when": "succeeded"},
                {"job": 13, "when": "succeeded"},
                {"job": 14, "when": "ended"},
                {"job": 1, "when": "started"},
                {"job": 2, "when": "failed"},
            ],
        ),
    ],
)
def test_dependencies_become_the_jobs_after(args: list[str], after: list[Any]) -> None:
    assert one(args)["after"] == after


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("afterok:1?afterany:2", "'?' (any one of) is not supported"),
        ("singleton", "'singleton' is not supported"),
        ("aftercorr:4", "'aftercorr:4' is not supported"),
        ("afterok:4_1", "'4_1' is not a job id"),
        ("afterok:4+60", "'4+60' is not a job id"),
        ("afterok:", "'afterok:' is not supported"),
    ],
)
def test_bad_dependencies_say_what_is_supported(text: str, says: str) -> None:
    assert says in refused([f"--dependency={text}"])


def test_exclude_becomes_the_nodes_to_avoid() -> None:
    assert one(["--exclude=n[1-3],gpu7"])["exclude_nodes"] == ["n1", "n2", "n3", "gpu7"]
    assert "--exclude: " in refused(["--exclude=n[1-"])


def test_hold_submits_held() -> None:
    assert one(["--hold"])["hold"] is True
    assert one(["-H"])["hold"] is True
    assert "hold" not in one([])


def test_kept_options_land_in_slurm_options() -> None:
    spec = one(["--wckey=w1", "--mail-type=END,FAIL", "--mail-user=a@b"])
    assert spec["slurm"]["options"] == {
        "wckey": "w1",
        "mail-type": "END,FAIL",
        "mail-user": "a@b",
    }


def test_exclusive_takes_whole_nodes_and_its_absence_keeps_the_default() -> None:
    assert one(["--exclusive"])["exclusive"] is True
    assert "exclusive" not in one(["-N", "2"])  # gpuyard's default: whole nodes for 2
    assert "exclusive" not in one([])


def test_account_comment_requeue_and_open_mode() -> None:
    spec = one(["-A", "proj1", "--comment=hi there", "--no-requeue", "--open-mode=append"])
    slurm = spec["slurm"]
    assert (slurm["account"], slurm["comment"]) == ("proj1", "hi there")
    assert slurm["requeue"] is False
    assert slurm["open_mode"] == "append"
    # account and comment are fields of their own, and also kept as given
    assert slurm["options"] == {"account": "proj1", "comment": "hi there"}


def test_bad_open_mode_is_refused() -> None:
    assert refused(["--open-mode=overwrite"]) == "Invalid --open-mode specification: overwrite"


# --- arrays ---------------------------------------------------------------------------------


def test_array_gives_one_spec_per_task() -> None:
    specs = build(["--array=0-2%2"])
    assert len(specs) == 3
    for index, spec in enumerate(specs):
        assert spec["slurm"]["array"] == {
            "task_id": index,
            "count": 3,
            "min": 0,
            "max": 2,
            "step": 1,
            "throttle": 2,
            "spec": "0-2%2",
        }
        assert spec["slurm"]["output"] == "slurm-%A_%a.out"
    # Each task has its own slurm and array dicts: the client fills in job_id per task.
    specs[1]["slurm"]["array"]["job_id"] = 7
    assert "job_id" not in specs[0]["slurm"]["array"]
    assert "job_id" not in specs[2]["slurm"]["array"]
    JobSpec.model_validate(specs[1])


def test_array_with_step() -> None:
    specs = build(["--array=1-9:4"])
    assert [s["slurm"]["array"]["task_id"] for s in specs] == [1, 5, 9]
    assert {s["slurm"]["array"]["step"] for s in specs} == {4}
    assert {s["slurm"]["array"]["throttle"] for s in specs} == {None}


def test_bad_array_is_refused() -> None:
    assert refused(["--array=5-3"]) == "Invalid job array specification"


# --- names, directories, output, arguments --------------------------------------------------


@pytest.mark.parametrize(
    ("job_name", "name"),
    [
        ("my training run", "my-training-run"),
        ("train/v2:final", "train-v2-final"),
        ("  ", "sbatch"),
        ("_hidden", "j_hidden"),
        ("..x..", "x"),
        ("a" * 300, "a" * 128),
    ],
)
def test_job_name(job_name: str, name: str) -> None:
    spec = one([f"--job-name={job_name}"])
    assert spec["name"] == name
    assert spec["slurm"]["job_name"] == job_name


def test_default_name_is_the_script_name() -> None:
    spec = one([], script_name=".hidden.sh")
    assert spec["name"] == "hidden.sh"
    assert spec["slurm"]["job_name"] == ".hidden.sh"


@pytest.mark.parametrize(
    ("args", "work_dir"),
    [
        ([], CWD),
        (["--chdir=sub/dir"], CWD + "/sub/dir"),
        (["-D", "../other"], "/home/alice/other"),
        (["-D/scratch/run"], "/scratch/run"),
    ],
)
def test_chdir(args: list[str], work_dir: str) -> None:
    spec = one(args)
    assert spec["slurm"]["work_dir"] == work_dir
    assert spec["slurm"]["submit_dir"] == CWD


def test_output_and_error() -> None:
    spec = one(["-o", "logs/%x-%j.out", "-e", "logs/%x-%j.err"])
    assert spec["slurm"]["output"] == "logs/%x-%j.out"
    assert spec["slurm"]["error"] == "logs/%x-%j.err"


def test_script_arguments() -> None:
    options = parse_sbatch(["-N1", "train.sh", "--lr", "0.1"], SCRIPT)
    specs = build_specs(
        options,
        SCRIPT,
        script_name="train.sh",
        cwd=CWD,
        environ={},
        pools=[],
        uid=0,
        gid=0,
    )
    assert specs[0]["slurm"]["script_args"] == ["--lr", "0.1"]
    assert specs[0]["command"] == "sbatch train.sh"
    assert "lr" not in options.values
    JobSpec.model_validate(specs[0])


def test_nodelist_names_nodes() -> None:
    assert one(["-N2", "-w", "n1,n2"])["node_names"] == ["n1", "n2"]


def test_nodelist_is_a_hostlist() -> None:
    assert one(["-N3", "-w", "n[0001-0002],gpu7"])["node_names"] == ["n0001", "n0002", "gpu7"]


# --- reading the script ---------------------------------------------------------------------


class Stdin:
    """A ``read_stdin`` that records whether it was called."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data
        self.calls = 0

    def __call__(self) -> bytes | None:
        self.calls += 1
        return self.data


def test_wrap_builds_a_sh_script() -> None:
    stdin = Stdin(b"#!/bin/sh\necho from stdin\n")
    options, script, name = parse(["-N2", "--wrap", "echo hi && hostname"], stdin)
    assert script == (
        "#!/bin/sh\n# This script was created by sbatch --wrap.\n\necho hi && hostname\n"
    )
    assert name == "wrap"
    assert options.values == {"nodes": "2", "wrap": "echo hi && hostname"}
    assert stdin.calls == 0
    spec = build_specs(
        options, script, script_name=name, cwd=CWD, environ={}, pools=[], uid=0, gid=0
    )[0]
    assert spec["name"] == "wrap"
    JobSpec.model_validate(spec)


def test_wrap_and_a_file_together_are_refused(tmp_path: Path) -> None:
    stdin = Stdin(None)
    with pytest.raises(OptionError, match=r"^a script file and --wrap cannot be used together$"):
        parse(["--wrap=true", str(tmp_path / "job.sh")], stdin)
    assert stdin.calls == 0


def test_a_file_is_read_with_its_directives(tmp_path: Path) -> None:
    path = tmp_path / "train.sh"
    path.write_text("#!/bin/bash\n#SBATCH -N3 --time=5\nsrun python train.py\n")
    stdin = Stdin(b"#!/bin/sh\n")
    options, script, name = parse(["--time=10", str(path), "arg1"], stdin)
    assert stdin.calls == 0
    assert name == "train.sh"
    assert script == "#!/bin/bash\n#SBATCH -N3 --time=5\nsrun python train.py\n"
    assert options.values == {"nodes": "3", "time": "10"}
    assert options.script_args == ["arg1"]


def test_a_script_without_an_interpreter_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("echo hi\n")
    with pytest.raises(OptionError, match=r"^This does not look like a batch script"):
        parse([str(path)], Stdin(None))
    with pytest.raises(OptionError, match=r"^This does not look like a batch script"):
        parse([], Stdin(b"\n#!/bin/sh\n"))


def test_a_script_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_bytes(b"#!/bin/sh\necho \xff\xfe\n")
    with pytest.raises(OptionError) as caught:
        parse([str(path)], Stdin(None))
    assert str(caught.value) == f"{path} is not UTF-8 text (byte 15)"


def test_a_script_too_large_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.sh"
    path.write_bytes(b"#!/bin/sh\n" + b"#" * MAX_SCRIPT)
    with pytest.raises(OptionError) as caught:
        parse([str(path)], Stdin(None))
    assert str(caught.value).startswith(f"{path} is more than {MAX_SCRIPT // 1024} KiB")

    # Exactly at the limit is fine.
    path.write_bytes(b"#!/bin/sh\n" + b"#" * (MAX_SCRIPT - len(b"#!/bin/sh\n")))
    _, script, _ = parse([str(path)], Stdin(None))
    assert len(script) == MAX_SCRIPT


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"^Unable to open file .*nope\.sh: No such file"):
        parse([str(tmp_path / "nope.sh")], Stdin(None))


def test_stdin_is_read_only_without_a_file_or_wrap() -> None:
    stdin = Stdin(b"#!/bin/sh\n#SBATCH -J piped\necho hi\n")
    options, script, name = parse(["-N1"], stdin)
    assert stdin.calls == 1
    assert name == "sbatch"
    assert script == "#!/bin/sh\n#SBATCH -J piped\necho hi\n"
    assert options.values == {"nodes": "1", "job-name": "piped"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "no batch script given (a file, --wrap, or the script on stdin)"),
        (b"#!/bin/sh\n\xc3(", "the script on standard input is not UTF-8 text (byte 10)"),
        (
            b"#!/bin/sh\n" + b"x" * MAX_SCRIPT,
            f"the script on standard input is more than {MAX_SCRIPT // 1024} KiB",
        ),
    ],
)
def test_bad_stdin_is_refused(data: bytes | None, message: str) -> None:
    stdin = Stdin(data)
    with pytest.raises(OptionError) as caught:
        parse([], stdin)
    assert str(caught.value).startswith(message)
    assert stdin.calls == 1


def test_read_script_alone() -> None:
    options = parse_sbatch(["--wrap", "true"], None)
    stdin: Callable[[], bytes | None] = Stdin(None)
    assert read_script(options, stdin) == (
        "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n",
        "wrap",
    )


# --- heterogeneous jobs ---------------------------------------------------------------------

HET = (
    "#!/bin/bash\n"
    "#SBATCH --job-name=trainer-0 --ntasks-per-node=2 --gpus-per-node=2 --mem=4G -t 10\n"
    "#SBATCH hetjob\n"
    "#SBATCH --job-name=ps-0 -N2 -c 3 --mem=1G\n"
    "srun hostname : hostname\n"
)


def test_a_heterogeneous_job_is_one_job_with_a_shape_per_component() -> None:
    spec = one([], HET)
    assert spec["nodes"] == 3
    assert spec["resources"] == {"gpus": 2, "cpus": 2.0, "memory": 4 << 30}  # component 0's
    assert spec["max_runtime"] == 600.0  # --time propagates
    assert spec["slurm"]["ntasks"] == 4
    assert spec["slurm"]["het"] == [
        {
            "job_name": "trainer-0",
            "nodes": 1,
            "ntasks": 2,
            "ntasks_per_node": 2,
            "cpus_per_task": None,
            "gpus": 2,
            "cpus": 2.0,
            "memory": 4 << 30,
        },
        {
            "job_name": "ps-0",
            "nodes": 2,
            "ntasks": 2,
            "ntasks_per_node": 1,
            "cpus_per_task": 3,
            "gpus": 0,
            "cpus": 3.0,
            "memory": 1 << 30,
        },
    ]
    from gpuyard.models.request import request_of

    needs = [
        (m.gpus, m.cpus, m.memory, m.whole_node)
        for m in request_of(JobSpec(**spec)).request.members
    ]
    assert needs == [(2, 2.0, 4 << 30, True), (0, 3.0, 1 << 30, True), (0, 3.0, 1 << 30, True)]


def test_a_components_longest_time_is_the_jobs() -> None:
    assert one(["-t", "5", ":", "-t", "20"], "#!/bin/sh\n")["max_runtime"] == 1200.0
    assert "max_runtime" not in one([":", "-t", "20"], "#!/bin/sh\n")  # component 0: no limit


def test_node_lists_of_all_components_are_the_jobs() -> None:
    assert one(["-w", "n1", ":", "-w", "n[2-3]"], "#!/bin/sh\n")["node_names"] == [
        "n1",
        "n2",
        "n3",
    ]
    spec = one(["-x", "n9", ":", "-x", "n[8-9]"], "#!/bin/sh\n")
    assert spec["exclude_nodes"] == ["n9", "n8"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-p", "gpu", ":", "-p", "cpu"],
            "component 1 of the heterogeneous job asks for partition",
        ),
        ([":", "--qos=high"], "component 1 of the heterogeneous job asks for QOS 'high'"),
        (["--array=0-3", ":", "-N1"], "job arrays cannot be heterogeneous jobs"),
        ([":", "-n1", "-N2"], "--ntasks=1 is fewer than --nodes=2"),
        ([":", "--gpus=abc"], "Invalid --gpus specification"),
    ],
)
def test_heterogeneous_jobs_refused_saying_why(args: list[str], message: str) -> None:
    assert message in refused(args, "#!/bin/sh\n")


def test_many_components_are_refused_by_the_spec() -> None:
    args = [w for _ in range(129) for w in ("-N1", ":")][:-1]
    options = parse_sbatch(args, "#!/bin/sh\n")
    specs = build_specs(
        options, "#!/bin/sh\n", script_name="x", cwd=CWD, environ={}, pools=[], uid=1, gid=1
    )
    with pytest.raises(ValueError, match="at most 128 items"):
        JobSpec.model_validate(specs[0])
