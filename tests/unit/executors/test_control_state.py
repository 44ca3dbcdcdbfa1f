"""The control directory is job input: every bad shape is ignored and reported, never raised,
and nothing in it can make the executor block."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.machine import Machine
from gpuyard.models.worker import ControlState, Handle, WorkerKey

pytestmark = pytest.mark.timeout(10)  # a blocking open would hang here, not pass

MACHINE = Machine("box", cpus=2, memory=4 << 30, gpus=())
GOOD = {
    "ack.json": {"time": 10.0, "pid": 42, "rank": 0},
    "checkpoint.json": {"time": 11.0, "step": 7, "path": "/ckpt/checkpoint.pt"},
    "progress.json": {"time": 12.5, "step": 9, "metrics": {"loss": 0.5, "lr": "nan"}},
    "suspended.json": {"time": 13.0, "pid": 42},
}


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path / "home", machine=MACHINE, isolation=cgroups.Isolation("none"))


@pytest.fixture
def handle(executor: LocalExecutor) -> Handle:
    wd = executor.worker_dir(1, 0, 0)
    (wd / "control").mkdir(parents=True)
    return {"dir": str(wd), "log": str(wd / "log")}


def control_dir(handle: Handle) -> Path:
    return Path(handle["dir"]) / "control"


def read(executor: LocalExecutor, handle: Handle) -> ControlState:
    [state] = executor.control([handle])
    return state


def write_good(control: Path) -> None:
    for name, content in GOOD.items():
        (control / name).write_text(json.dumps(content))
    (control / "listeners").mkdir(exist_ok=True)
    (control / "listeners" / "4242").touch()


def test_what_the_runtime_writes_is_read(executor: LocalExecutor, handle: Handle) -> None:
    write_good(control_dir(handle))
    assert read(executor, handle) == ControlState(
        acknowledged_at=10.0,
        checkpoint_at=11.0,
        checkpoint_step=7,
        progress_at=12.5,
        step=9,
        suspended_at=13.0,
        listening=True,
    )


def test_no_control_dir_and_no_handle_read_as_nothing(
    executor: LocalExecutor, handle: Handle
) -> None:
    control_dir(handle).rmdir()
    assert executor.control([handle, {}]) == [ControlState(), ControlState()]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("fifo"))
    path.symlink_to(path.with_name("fifo"))


BAD: list[tuple[str, Callable[[Path], None], str]] = [
    ("list", lambda p: p.write_text("[3]"), "Input should be an object"),
    (
        "string time",
        lambda p: p.write_text('{"time": "x"}'),
        "time: Input should be a valid number",
    ),
    ("bool time", lambda p: p.write_text('{"time": true}'), "time: Input should be a valid number"),
    ("NaN", lambda p: p.write_text('{"time": NaN}'), "time: "),
    ("no time", lambda p: p.write_text("{}"), "time: Field required"),
    ("huge", lambda p: p.write_bytes(b" " * (1 << 20)), "larger than 64 KiB"),
    ("binary garbage", lambda p: p.write_bytes(os.urandom(64) + b"\xff\xfe"), "Invalid JSON"),
    ("empty", lambda p: p.write_bytes(b""), "Invalid JSON"),
    ("a directory", lambda p: p.mkdir(), "not a regular file (a directory)"),
    ("link to /dev/zero", lambda p: p.symlink_to("/dev/zero"), "a symbolic link"),
    ("link to a FIFO", _link_to_fifo, "a symbolic link"),
    ("a FIFO", _fifo, "not a regular file (a FIFO)"),
    ("link to a file", lambda p: p.symlink_to("/etc/hostname"), "a symbolic link"),
]


@pytest.mark.parametrize("name", sorted(GOOD))
@pytest.mark.parametrize(("shape", "make", "why"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_control_file_is_ignored_and_reported(
    executor: LocalExecutor,
    handle: Handle,
    name: str,
    shape: str,
    make: Callable[[Path], None],
    why: str,
) -> None:
    control = control_dir(handle)
    write_good(control)
    (control / name).unlink()
    make(control / name)
    state = read(executor, handle)
    [problem] = state.invalid
    assert problem.startswith(f"{name}: ") and why in problem, problem
    # The other files still count; this one reads as absent.
    good = read_without(executor, handle, name)
    assert state == ControlState(**{**good, "invalid": state.invalid})


def read_without(executor: LocalExecutor, handle: Handle, name: str) -> dict[str, object]:
    fields = {
        "ack.json": ["acknowledged_at"],
        "checkpoint.json": ["checkpoint_at", "checkpoint_step"],
        "progress.json": ["progress_at", "step"],
        "suspended.json": ["suspended_at"],
    }
    full = {
        "acknowledged_at": 10.0,
        "checkpoint_at": 11.0,
        "checkpoint_step": 7,
        "progress_at": 12.5,
        "step": 9,
        "suspended_at": 13.0,
        "listening": True,
    }
    return {k: (None if k in fields[name] else v) for k, v in full.items()}


def test_listener_entries_that_are_not_pids_are_ignored(
    executor: LocalExecutor, handle: Handle
) -> None:
    listeners = control_dir(handle) / "listeners"
    listeners.mkdir()
    for name in ("abc", "0", "-5", "99999999999", "１２"):  # the last: full-width digits
        (listeners / name).touch()
    (listeners / ".4242.tmp").touch()  # a temporary name is skipped silently
    state = read(executor, handle)
    assert not state.listening
    assert sorted(state.invalid) == sorted(
        f"listeners/{name!r}: not a pid" for name in ("abc", "0", "-5", "99999999999", "１２")
    )


def test_too_many_listeners_are_not_all_read(executor: LocalExecutor, handle: Handle) -> None:
    listeners = control_dir(handle) / "listeners"
    listeners.mkdir()
    for pid in range(1000, 1400):
        (listeners / str(pid)).touch()
    state = read(executor, handle)
    assert state.listening
    assert state.invalid == ("listeners: more than 256 entries",)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_text("not a directory"),
        lambda p: p.symlink_to("/proc/self"),
    ],
    ids=["a file", "a link"],
)
def test_listeners_that_is_not_a_directory_is_reported(
    executor: LocalExecutor, handle: Handle, make: Callable[[Path], None]
) -> None:
    make(control_dir(handle) / "listeners")
    state = read(executor, handle)
    assert (state.listening, state.invalid) == (False, ("listeners: not a directory",))


def test_a_control_dir_replaced_by_a_link_is_not_followed(
    executor: LocalExecutor, handle: Handle, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_good(elsewhere)
    control_dir(handle).rmdir()
    control_dir(handle).symlink_to(elsewhere)
    assert read(executor, handle) == ControlState(invalid=("control: control is not a directory",))


def test_the_notice_is_never_written_through_a_planted_link(
    executor: LocalExecutor, handle: Handle, tmp_path: Path
) -> None:
    from gpuyard.models.worker import Notice

    victim = tmp_path / "victim"
    victim.write_text("precious")
    control = control_dir(handle)
    (control / "preempt.json").symlink_to(victim)
    for i in range(5):  # temporary names a job might guess
        (control / f".preempt.json.{os.getpid()}.{i}.tmp").symlink_to(victim)
    executor.notify(handle, Notice(requested_at=1.0, deadline=2.0, reason="test", by="admin"))
    assert victim.read_text() == "precious"
    written = json.loads((control / "preempt.json").read_text())
    assert written == {"requested_at": 1.0, "deadline": 2.0, "reason": "test", "by": "admin"}


def test_the_control_dir_is_where_the_launch_plan_says(executor: LocalExecutor) -> None:
    from gpuyard.launch.workspace import control_dir as planned

    key = WorkerKey(3, 1, 2)
    expected = executor.worker_dir(key.job_id, key.attempt, key.rank) / "control"
    assert planned(executor.job_dir(key.job_id), key.attempt, key.rank) == str(expected)


def test_srun_steps_are_read_in_order_and_bad_ones_skipped(
    executor: LocalExecutor, handle: Handle
) -> None:
    steps = control_dir(handle) / "slurm-steps"
    steps.mkdir()
    step = {"time": 1.0, "name": "hostname", "nodes": ["node0"], "tasks": 1, "start": 1.0}
    (steps / "0").write_text(json.dumps({**step, "end": 2.0, "exit_code": 0}))
    (steps / "1").write_text("")  # reserved, not written yet
    (steps / "2").write_text("{not json")
    (steps / "3").write_text(json.dumps({**step, "tasks": "many"}))
    (steps / "4").write_bytes(b" " * (64 * 1024))  # too large
    os.symlink("/etc/passwd", steps / "5")
    (steps / "10").write_text(json.dumps({**step, "name": "train"}))
    (steps / "notes").write_text("ignored")
    found = executor.slurm_steps(handle)
    assert [(s.id, s.name, s.end, s.exit_code) for s in found] == [
        (0, "hostname", 2.0, 0),
        (10, "train", None, None),
    ]


def test_no_steps_directory_or_a_link_to_one_means_no_steps(
    executor: LocalExecutor, handle: Handle, tmp_path: Path
) -> None:
    assert executor.slurm_steps(handle) == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0").write_text(
        json.dumps({"time": 1.0, "name": "x", "nodes": [], "tasks": 1, "start": 1.0})
    )
    os.symlink(elsewhere, control_dir(handle) / "slurm-steps")
    assert executor.slurm_steps(handle) == []
