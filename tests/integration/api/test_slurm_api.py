"""What the Slurm-compatible commands need from the pool (docs/slurm.md): signals to a running
job's steps or batch shell, job arrays, the signal before the time limit, a job that requeues
itself, and the commands' own answers and errors, run in-process against the real API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import CONTROL_EVERY, Controller
from gpuyard.errors import Conflict, InvalidSpec, NotFound
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobState
from gpuyard.models.worker import NodeInfo, SlurmStep, WorkerKey
from gpuyard.slurm import commands
from gpuyard.testing.auth import AsUser, TokenFor


@pytest.fixture
def fake_executor() -> FakeExecutor:
    """Two nodes: a job's steps may run on either."""
    return FakeExecutor(
        [NodeInfo(f"fake{i}", f"127.0.0.{i + 2}", gpus=8, cpus=64, memory=1 << 40) for i in (0, 1)]
    )


def slurm_spec(**slurm: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mode": "slurm",
        "command": "sbatch job.sh",
        "nodes": 1,
        "slurm": {
            "script": "#!/bin/sh\nsrun hostname\n",
            "job_name": "job.sh",
            "ntasks": 1,
            "submit_dir": "/tmp",
            "work_dir": "/tmp",
            **slurm,
        },
    }
    return spec


def signals(executor: FakeExecutor, job_id: int, rank: int = 0) -> list[tuple[int, bool]]:
    return executor.workers[WorkerKey(job_id, 0, rank)].signals


def test_signals_reach_the_steps_or_the_batch_shell_of_a_running_job_only(
    client: Client, as_user: AsUser, controller: Controller, fake_executor: FakeExecutor
) -> None:
    job = client.submit({"command": "python train.py", "nodes": 2})
    with pytest.raises(Conflict, match="only a running job can be signalled"):
        client.signal(job.id, signal.SIGUSR2)
    controller.tick()
    client.signal(job.id, signal.SIGUSR2)
    client.signal(job.id, signal.SIGUSR1, steps=False)
    controller.tick()
    # Steps: every worker (srun may run on any); the batch shell: worker 0 alone. Once each.
    assert signals(fake_executor, job.id, 0) == [(signal.SIGUSR2, True), (signal.SIGUSR1, False)]
    assert signals(fake_executor, job.id, 1) == [(signal.SIGUSR2, True)]
    controller.tick()
    assert len(signals(fake_executor, job.id, 0)) == 2
    with pytest.raises(NotFound):  # another user's private job is not there for bob
        as_user("bob").signal(job.id, signal.SIGTERM)
    with pytest.raises(InvalidSpec):
        client.signal(job.id, 0)


def test_an_array_is_its_first_task_and_the_tasks_that_name_it(
    client: Client, as_user: AsUser
) -> None:
    array = {"count": 3, "min": 0, "max": 2, "throttle": 2, "spec": "0-2%2"}
    head = client.submit(slurm_spec(array={**array, "task_id": 0}))
    rest = client.submit_many(
        [slurm_spec(array={**array, "task_id": i, "job_id": head.id}) for i in (1, 2)]
    )
    other = client.submit({"command": "python train.py"})
    listed = sorted(j.id for j in client.jobs(array=head.id).items)
    assert listed == sorted([head.id, *rest])
    assert [j.id for j in client.jobs(ids=[rest[1], other.id]).items] == [other.id, rest[1]]
    with pytest.raises(InvalidSpec, match="not the first task of a job array"):
        as_user("bob").submit(slurm_spec(array={**array, "task_id": 1, "job_id": head.id}))
    with pytest.raises(InvalidSpec, match="not the first task of a job array"):
        client.submit(slurm_spec(array={**array, "task_id": 1, "job_id": other.id}))


def test_the_time_limit_signal_goes_once_that_long_before_the_limit(
    client: Client, controller: Controller, fake_executor: FakeExecutor, clock: ManualClock
) -> None:
    job = client.submit({**slurm_spec(signal={"signal": 12, "seconds": 60}), "max_runtime": 3600})
    controller.tick()
    assert signals(fake_executor, job.id) == []
    clock.advance(3600 - 61)
    controller.tick()
    assert signals(fake_executor, job.id) == []
    for _ in range(3):
        clock.advance(CONTROL_EVERY)
        controller.tick()
    assert signals(fake_executor, job.id) == [(12, True)]


def test_a_job_that_asks_to_be_requeued_is_requeued_at_once(
    client: Client, controller: Controller, fake_executor: FakeExecutor, clock: ManualClock
) -> None:
    job = client.submit(slurm_spec(signal={"signal": 10, "seconds": 90}))
    controller.tick()
    fake_executor.report(job.id, requeue_at=clock.now())
    clock.advance(CONTROL_EVERY)
    controller.tick()
    controller.tick()
    events = [e.reason or "" for e in client.events(job.id)]
    assert any("asked to be requeued" in reason for reason in events), events
    assert client.job(job.id).state in (JobState.SUSPENDING, JobState.SUSPENDED)
    # Nobody is left to warn: its workers are ended at once, not after the graceful period
    # (a script that ignores SIGTERM would otherwise sit in CG for it).
    assert fake_executor.workers[WorkerKey(job.id, 0, 0)].terminated_with_grace == 0.0
    # Its --signal is for preemption and the time limit: a job that requeues itself (Lightning
    # does on that very signal) does not get it again, as in Slurm.
    assert signals(fake_executor, job.id) == []


@pytest.mark.parametrize(
    ("wanted", "sent"),
    [
        ({"signal": 12, "seconds": 90}, [(signal.SIGCONT, True), (signal.SIGUSR2, True)]),
        ({"signal": 10, "batch": True}, [(signal.SIGCONT, True), (signal.SIGUSR1, False)]),
        (None, [(signal.SIGCONT, True), (signal.SIGTERM, True)]),
    ],
)
def test_a_preempted_slurm_job_gets_its_signal_when_the_notice_begins(
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    wanted: dict[str, Any] | None,
    sent: list[tuple[int, bool]],
) -> None:
    job = client.submit({**slurm_spec(signal=wanted), "nodes": 2, "max_runtime": 3600})
    controller.tick()
    client.suspend(job.id)
    controller.tick()
    controller.tick()
    assert signals(fake_executor, job.id, 0) == sent
    # The steps run on every node; the batch shell only on the first.
    assert signals(fake_executor, job.id, 1) == [s for s in sent if s[1]]


@pytest.fixture
def slurm(
    api_url: str, token_for: TokenFor, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    """Run a Slurm command in-process as alice: (exit status, stdout, stderr)."""
    monkeypatch.setenv("GPUYARD_URL", api_url)
    monkeypatch.setenv("GPUYARD_TOKEN", token_for("alice"))
    monkeypatch.chdir(tmp_path)

    def run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
        status = commands.main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_commands_answer_and_fail_as_slurm_does(
    slurm: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -J train -t 10\nsrun hostname\n")
    status, out, _ = slurm("sbatch", "job.sh", capsys=capsys)
    assert status == 0 and out.startswith("Submitted batch job "), out
    job_id = out.split()[-1]
    assert slurm(
        "sacct", "-o", "JobID,JobName,State", "--parsable2", "-j", job_id, capsys=capsys
    ) == (
        0,
        f"JobID|JobName|State\n{job_id}|train|PENDING\n",
        "",
    )
    assert slurm("sbatch", "--parsable", "job.sh", capsys=capsys)[1].strip().isdigit()
    assert slurm("sbatch", "--bogus", "job.sh", capsys=capsys) == (
        255,
        "",
        "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n",
    )
    assert slurm("scancel", "abc", capsys=capsys) == (1, "", "scancel: error: Invalid job id abc\n")
    assert slurm("scancel", "999999", capsys=capsys) == (0, "", "")
    assert slurm("squeue", "-j", "999999", capsys=capsys) == (
        1,
        "",
        "slurm_load_jobs error: Invalid job id specified\n",
    )
    assert slurm("sacct", "-j", "x1", capsys=capsys) == (
        1,
        "",
        "sacct: fatal: Bad job/step specified: x1\n",
    )
    assert slurm("scontrol", "show", "hostnames", "n[1-3]", capsys=capsys) == (
        0,
        "n1\nn2\nn3\n",
        "",
    )
    assert slurm("scontrol", "show", "hostnames", "n[1-3", capsys=capsys) == (
        0,
        "",
        "Invalid hostlist: n[1-3\n",
    )
    status, out, _ = slurm("scancel", job_id, capsys=capsys)
    assert status == 0
    assert slurm("sacct", "-X", "-n", "-P", "-o", "State", "-j", job_id, capsys=capsys)[1] == (
        "CANCELLED by 0\n"
    )


def test_a_job_one_may_not_see_answers_exactly_as_one_that_does_not_exist(
    api_url: str,
    client: Client,
    controller: Controller,
    token_for: TokenFor,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bob runs the Slurm commands on alice's private job and on an id nobody has: the same
    status, output and errors, word for word (issue 24, point 11). For scancel that is what
    Slurm 22.05.8 answered for an id that names no job (tests/data/slurm/cases/
    scancel_no_such.json): nothing, exit 0. Her job goes on."""
    hidden = client.submit({"command": "python train.py"}).id
    controller.tick()
    missing = hidden + 1000
    monkeypatch.setenv("GPUYARD_URL", api_url)
    monkeypatch.setenv("GPUYARD_TOKEN", token_for("bob"))

    def answer(*words: str) -> tuple[int, str, str]:
        status = commands.main(list(words))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    for command in (
        ["scancel"],
        ["scancel", "--signal", "USR1"],
        ["squeue", "-h", "-j"],
        ["scontrol", "show", "job"],
        ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j"],
    ):
        nothing = answer(*command, str(missing))
        assert answer(*command, str(hidden)) == nothing, command
    assert answer("scancel", str(hidden)) == (0, "", "")  # as recorded from Slurm 22.05.8
    assert client.job(hidden).state is JobState.RUNNING


def test_hostile_sbatch_input_is_refused_with_a_message(
    slurm: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    status, _, err = slurm("sbatch", "--job-name=a\nb", "job.sh", capsys=capsys)
    assert status == 1 and "control characters" in err, err
    (tmp_path / "bin.sh").write_bytes(b"#!/bin/sh\n\xff\xfe\n")
    status, _, err = slurm("sbatch", "bin.sh", capsys=capsys)
    assert status == 255 and "not UTF-8" in err, err
    status, _, err = slurm("sbatch", "--array=0-100000", "job.sh", capsys=capsys)
    assert status == 255 and "Invalid job array specification" in err, err
    status, _, err = slurm("sbatch", "--dependency=singleton", "job.sh", capsys=capsys)
    assert status == 255 and "'singleton' is not supported" in err, err
    status, _, err = slurm("sbatch", "--dependency=afterok:999999", "job.sh", capsys=capsys)
    assert status != 0 and "after: job 999999 does not exist" in err, err
    status, _, err = slurm("sbatch", "-p", "nosuch", "job.sh", capsys=capsys)
    assert status == 255 and "invalid partition specified: nosuch" in err, err
    status, _, err = slurm("sbatch", "--time=400-0", "-c5000", "job.sh", capsys=capsys)
    assert status == 1 and "max_runtime" in err and "cpus_per_task" in err, err
    status, _, err = slurm("sbatch", "-w", "n[1-2", "job.sh", capsys=capsys)
    assert status == 255 and "--nodelist: invalid hostlist" in err, err
    assert slurm("squeue", "-h", capsys=capsys) == (0, "", "")


def test_sacct_shows_the_batch_extern_and_srun_steps_of_a_job(
    slurm: Any,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -J steps -N 2\nsrun hostname\n")
    job_id = int(slurm("sbatch", "--parsable", "job.sh", capsys=capsys)[1])
    controller.tick()
    nodes = ("fake0", "fake1")
    fake_executor.workers[WorkerKey(job_id, 0, 0)].slurm_steps = [
        SlurmStep(0, "hostname", nodes, 2, start=1.0, end=2.0, exit_code=0),
        SlurmStep(1, "sh", nodes[:1], 1, start=2.0, end=3.0, exit_code=3),
        SlurmStep(2, "train", nodes, 2, start=3.0, end=4.0, exit_code=128 + 15),
        SlurmStep(3, "sleep", nodes, 2, start=4.0),
    ]
    assert slurm(
        "sacct", "-j", str(job_id), "-P", "-o", "JobID,JobName,State,ExitCode,NodeList,NTasks",
        capsys=capsys,
    )[1] == (
        "JobID|JobName|State|ExitCode|NodeList|NTasks\n"
        f"{job_id}|steps|RUNNING|0:0|fake[0-1]|\n"
        f"{job_id}.batch|batch|RUNNING|0:0|fake0|1\n"
        f"{job_id}.extern|extern|RUNNING|0:0|fake[0-1]|2\n"
        f"{job_id}.0|hostname|COMPLETED|0:0|fake[0-1]|2\n"
        f"{job_id}.1|sh|FAILED|3:0|fake0|1\n"
        f"{job_id}.2|train|CANCELLED|0:15|fake[0-1]|2\n"
        f"{job_id}.3|sleep|RUNNING|0:0|fake[0-1]|2\n"
    )  # fmt: skip
    # -X: the allocations only, and the steps are not even read.
    assert slurm("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobID", capsys=capsys)[1] == (
        f"{job_id}\n"
    )


def running_tasks(client: Client, ids: list[int]) -> list[int]:
    return [i for i in ids if client.job(i).state is JobState.RUNNING]


def test_an_array_throttle_lets_that_many_tasks_run_at_once(
    slurm: Any,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH --array=0-4%2\nsrun true\n")
    first = int(slurm("sbatch", "--parsable", "job.sh", capsys=capsys)[1])
    ids = list(range(first, first + 5))
    controller.tick()
    controller.tick()
    assert running_tasks(client, ids) == ids[:2]
    squeue = slurm("squeue", "-h", "-o", "%i %t %r", "-j", str(first), capsys=capsys)[1]
    assert squeue.splitlines()[0] == f"{first}_[2-4%2] PD JobArrayTaskLimit", squeue
    fake_executor.exit(ids[0], code=0)
    for _ in range(3):
        controller.tick()
    assert running_tasks(client, ids) == ids[1:3]
    assert client.job(ids[0]).state is JobState.SUCCEEDED


def test_a_job_waits_for_its_begin_time(
    slurm: Any,
    client: Client,
    controller: Controller,
    clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job_id = client.submit(slurm_spec(begin=clock.now() + 3600)).id
    controller.tick()
    assert client.job(job_id).state is JobState.QUEUED
    squeue = slurm("squeue", "-h", "-o", "%i %t %r", "-j", str(job_id), capsys=capsys)[1]
    assert squeue == f"{job_id} PD BeginTime\n"
    clock.advance(3590)
    controller.tick()
    assert client.job(job_id).state is JobState.QUEUED
    clock.advance(11)
    controller.tick()
    assert client.job(job_id).state is JobState.RUNNING


def test_the_pool_selects_jobs_by_time_window(
    client: Client, controller: Controller, fake_executor: FakeExecutor, clock: ManualClock
) -> None:
    old = client.submit(slurm_spec()).id
    controller.tick()
    fake_executor.exit(old, code=0)
    controller.tick()
    clock.advance(3600)
    new = client.submit(slurm_spec()).id
    now = clock.now()

    def ids(**window: float) -> list[int]:
        return sorted(j.id for j in client.jobs(**window).items)

    assert ids() == [old, new]
    assert ids(active_after=now - 60) == [new]  # the old one ended an hour ago
    assert ids(created_before=now - 60) == [old]
    assert ids(active_after=now - 7200, created_before=now) == [old, new]
    with pytest.raises(InvalidSpec):
        client.jobs(active_after=float("nan"))


def test_sacct_asks_the_pool_for_the_window_and_states(
    slurm: Any,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The fake clock is in 2023: a job that ended then is outside today's default window.
    done = client.submit(slurm_spec()).id
    controller.tick()
    fake_executor.exit(done, code=0)
    controller.tick()
    waiting = client.submit({**slurm_spec(), "hold": True}).id

    def rows(*args: str) -> str:
        return str(slurm("sacct", "-X", "-n", "-P", "-o", "JobID,State", *args, capsys=capsys)[1])

    assert rows() == f"{waiting}|PENDING\n"
    assert rows("-S", "2023-01-01") == f"{done}|COMPLETED\n{waiting}|PENDING\n"
    assert rows("-S", "2023-01-01", "-s", "CD") == f"{done}|COMPLETED\n"
    assert rows("-S", "2023-01-01", "-E", "2023-01-02") == ""
    assert rows("-s", "NODE_FAIL") == ""
    assert slurm("sacct", "-S", "someday", capsys=capsys)[2] == (
        "sacct: error: Invalid time specification: someday\n"
    )


def test_sbatch_quick_path_submits_what_the_full_command_does(
    api_url: str, token_for: TokenFor, client: Client, tmp_path: Path
) -> None:
    """sbatch with GPUYARD_URL and GPUYARD_TOKEN set posts the spec without loading httpx,
    pydantic or the models; what it cannot handle goes down the full command, same output."""
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -J quick -N 2 --qos=high\nsrun true\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")},
        "GPUYARD_URL": api_url,
        "GPUYARD_TOKEN": token_for("alice"),
        "GPUYARD_HOME": str(tmp_path / "home"),
    }
    probe = (
        "import sys\nfrom gpuyard.slurm.quick import sbatch\n"
        "status = sbatch(sys.argv[1:], sys.stdout)\n"
        "print('heavy', sorted(m for m in ('httpx', 'pydantic', 'gpuyard.models') "
        "if m in sys.modules))\n"
        "sys.exit(3 if status is None else status)\n"
    )

    def run(*args: str, stdin: str | None = None, quick: bool = True) -> tuple[int, str, str]:
        argv = [sys.executable, "-c", probe] if quick else [sys.executable, "-m", "gpuyard.slurm"]
        done = subprocess.run(
            [*argv, *([] if quick else ["sbatch"]), *args],
            env=env,
            cwd=tmp_path,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        return done.returncode, done.stdout, done.stderr

    status, out, _ = run("--parsable", "job.sh")
    assert status == 0 and out.endswith("heavy []\n"), out
    quick = client.job(int(out.split()[0]))
    status, out, _ = run("--parsable", "job.sh", quick=False)
    full = client.job(int(out.strip()))
    assert quick.spec == full.spec
    assert quick.spec is not None and quick.spec.priority.value == "high"
    # Left to the full command: an array, a script on stdin, an unknown partition.
    assert run("--array=0-1", "job.sh")[0] == 3
    assert run(stdin="#!/bin/sh\ntrue\n")[0] == 3
    assert run("-p", "nowhere", "job.sh")[0] == 3
    assert run("-p", "nowhere", "job.sh", quick=False)[2].startswith(
        "sbatch: error: invalid partition specified: nowhere"
    )
    assert run("job.sh", quick=False)[1].startswith("Submitted batch job ")


def test_scontrol_holds_and_releases_a_list_of_jobs_in_one_request(
    slurm: Any,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\nsrun true\n")
    ids = [slurm("sbatch", "--parsable", "-H", "job.sh", capsys=capsys)[1].strip() for _ in "ab"]
    controller.tick()
    assert {client.job(int(i)).state for i in ids} == {JobState.QUEUED}
    assert slurm("scontrol", "release", ",".join(ids), capsys=capsys) == (0, "", "")
    controller.tick()
    assert {client.job(int(i)).state for i in ids} == {JobState.RUNNING}
    status, _, err = slurm("scontrol", "hold", ids[0], capsys=capsys)
    assert status == 1
    assert err == (
        f"scontrol: error: Job {ids[0]}: job {ids[0]} is running; only a queued, suspending or "
        f"suspended job can be held (`gpuyard suspend --hold {ids[0]}` suspends a running one "
        "and holds it)\n"
    )
    # requeuehold: requeued and held until released, as in Slurm.
    assert slurm("scontrol", "requeuehold", ids[0], capsys=capsys) == (0, "", "")
    assert client.job(int(ids[0])).on_hold
    fake_executor.exit(int(ids[0]), code=143)  # its SIGTERM (--signal) ended it
    for _ in range(3):
        controller.tick()
    assert client.job(int(ids[0])).state is JobState.SUSPENDED
    assert slurm("scontrol", "release", ids[0], capsys=capsys) == (0, "", "")
    controller.tick()
    job = client.job(int(ids[0]))
    assert (job.state, job.attempt, job.on_hold) == (JobState.RUNNING, 1, False)


def test_a_heterogeneous_job_shows_as_its_components(
    slurm: Any,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "het.sh").write_text(
        "#!/bin/bash\n#SBATCH -J trainer --gpus-per-node=2 -c 4\n#SBATCH hetjob\n"
        "#SBATCH -J ps -c 2 --mem=1G\nsrun hostname : hostname\n"
    )
    job_id = int(slurm("sbatch", "--parsable", "het.sh", capsys=capsys)[1])
    ask = client.job(job_id).spec
    assert ask is not None and ask.nodes == 2
    controller.tick()
    assert client.job(job_id).state is JobState.RUNNING
    fake_executor.workers[WorkerKey(job_id, 0, 0)].slurm_steps = [
        SlurmStep(0, "hostname", ("fake0", "fake1"), 2, start=1.0, end=2.0, exit_code=0),
    ]
    # each node got its own component's share
    placed = {s.node: (len(s.gpus), s.cpus) for s in client.job(job_id).placement}
    assert sorted(placed.values()) == [(0, 2.0), (2, 4.0)]
    first, second = f"{job_id}+0", f"{job_id}+1"
    rows = slurm(
        "sacct",
        "-j",
        str(job_id),
        "-P",
        "-o",
        "JobID,JobIDRaw,JobName,State,AllocCPUS",
        capsys=capsys,
    )[1]
    assert rows == (
        "JobID|JobIDRaw|JobName|State|AllocCPUS\n"
        f"{first}|{job_id}|trainer|RUNNING|4\n"
        f"{first}.batch|{job_id}.batch|batch|RUNNING|4\n"
        f"{first}.extern|{job_id}.extern|extern|RUNNING|4\n"
        f"{first}.0|{job_id}.0|hostname|COMPLETED|4\n"
        f"{second}|{job_id + 1}|ps|RUNNING|2\n"
        f"{second}.extern|{job_id + 1}.extern|extern|RUNNING|2\n"
        f"{second}.0|{job_id + 1}.0|hostname|COMPLETED|2\n"
    )  # fmt: skip
    assert slurm("sacct", "-X", "-n", "-P", "-o", "JobID", "-j", second, capsys=capsys)[1] == (
        f"{second}\n"
    )
    assert slurm("squeue", "-h", "-o", "%i %j %t", "-j", str(job_id), capsys=capsys)[1] == (
        f"{first} trainer R\n{second} ps R\n"
    )
    shown = slurm("scontrol", "show", "job", second, capsys=capsys)[1]
    assert shown.startswith(f"JobId={job_id + 1} HetJobId={job_id} HetJobOffset=1 JobName=ps\n")
    assert f"   HetJobIdSet={job_id}-{job_id + 1}\n" in shown and "MinMemoryNode=1G" in shown
    # one component alone is neither cancelled nor requeued; the job whole is
    assert slurm("scancel", second, capsys=capsys) == (
        1,
        "",
        f"scancel: error: Kill job error on job id {second}: the components of a heterogeneous "
        f"job stop together here; scancel {job_id} stops them all\n",
    )
    assert slurm("scontrol", "requeue", second, capsys=capsys) == (
        1,
        "",
        f"Invalid job id specified for job {second}\n",
    )
    assert client.job(job_id).state is JobState.RUNNING
    assert slurm("scancel", str(job_id), capsys=capsys)[0] == 0
    controller.tick()
    states = slurm("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", str(job_id), capsys=capsys)
    # Stopping, together: squeue shows them completing, sacct (the accounting database, which
    # records the end at once) as cancelled, and finds them among the cancelled jobs.
    assert states[1] == f"{first}|CANCELLED by 0\n{second}|CANCELLED by 0\n"
    assert slurm("squeue", "-h", "-o", "%i %t", "-j", str(job_id), capsys=capsys)[1] == (
        f"{first} CG\n{second} CG\n"
    )
    cancelled = slurm("sacct", "-X", "-n", "-P", "-o", "JobID", "-s", "CA", capsys=capsys)
    assert cancelled[1] == f"{first}\n{second}\n"
