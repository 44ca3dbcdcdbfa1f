"""gpuyard.runtime against a temporary control dir: the contract of docs/preemption.md."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import numpy as np
import pytest

import gpuyard.runtime as gr
from gpuyard.runtime import process
from gpuyard.runtime.contract import ContractError, JobEnvironment
from gpuyard.runtime.control import json_number, write_json
from gpuyard.runtime.process import PreemptionNotice, Runtime

PYTHON = sys.executable


class ManualClock:
    """Both clocks of the runtime, moved by hand."""

    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


@pytest.fixture(autouse=True)
def _fresh_runtime() -> Iterator[None]:
    process.reset()
    yield
    process.reset()


@pytest.fixture
def control(tmp_path: Path) -> Path:
    path = tmp_path / "control"
    path.mkdir()
    return path


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_env(tmp_path: Path, **environ: str) -> JobEnvironment:
    return JobEnvironment.from_environ(environ, cwd=tmp_path)


@pytest.fixture
def runtime(tmp_path: Path, control: Path, clock: ManualClock) -> Iterator[Runtime]:
    rt = Runtime(make_env(tmp_path, GPUYARD_CONTROL_DIR=str(control)), clock=clock)
    yield rt
    rt.close()


def notice_file(control: Path, *, deadline: float = 1_700_000_100.0) -> None:
    content = {
        "requested_at": 1_700_000_000.0,
        "deadline": deadline,
        "reason": "job 7 (high) needs the room",
        "by": "scheduler",
    }
    write_json(control, "preempt.json", content)


def read(path: Path) -> dict[str, object]:
    content = json.loads(path.read_text())
    assert isinstance(content, dict)
    return content


def run_python(code: str, *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    full_env.update(env)
    return subprocess.run(
        [PYTHON, "-c", textwrap.dedent(code)],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# -- import and the environment ------------------------------------------------------------


def test_import_is_cheap_reads_no_environment_and_touches_no_platform_code(
    tmp_path: Path,
) -> None:
    code = """
        import sys
        import gpuyard.runtime as gr
        heavy = ("torch", "numpy", "pydantic", "sqlalchemy", "httpx", "fastapi")
        platform = ("server", "controller", "scheduler", "executors", "client", "launch",
                    "models", "cli")
        loaded = [m for m in sys.modules if m.split(".")[0] in heavy
                  or m.startswith(tuple(f"gpuyard.{p}" for p in platform))]
        print("loaded", loaded)
        try:
            gr.attempt
        except gr.ContractError as exc:
            print("error", exc)
    """
    # A bad value must not break the import itself, only the first use.
    result = run_python(code, env={"GPUYARD_ATTEMPT": "two"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "loaded []" in result.stdout
    assert "error GPUYARD_ATTEMPT must be a whole number >= 0, got 'two'" in result.stdout


def test_defaults_outside_gpuyard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGUSR1)
    assert gr.attempt == 0
    assert gr.checkpoint_dir == tmp_path / "checkpoints"
    assert gr.control_dir is None
    assert gr.preemption_requested() is False
    assert gr.preemption_deadline() is None
    assert gr.preemption_reason() is None
    gr.acknowledge()
    assert gr.report_progress(1, loss=0.5) is False
    # No control dir: no platform to signal us, so the script's SIGUSR1 stays its own.
    assert signal.getsignal(signal.SIGUSR1) is before
    with pytest.raises(SystemExit) as exit_info:
        gr.suspend()
    assert exit_info.value.code == gr.EXIT_SUSPENDED == 75
    assert gr.EXIT_NO_RESTART == 76
    assert list(tmp_path.iterdir()) == []


def test_attributes_follow_the_environment_of_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control: Path
) -> None:
    monkeypatch.setenv("GPUYARD_ATTEMPT", "3")
    monkeypatch.setenv("GPUYARD_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("GPUYARD_CONTROL_DIR", str(control))
    assert (gr.attempt, gr.checkpoint_dir, gr.control_dir) == (3, tmp_path / "ckpt", control)
    from gpuyard.runtime import attempt

    assert attempt == 3
    with pytest.raises(AttributeError):
        _ = gr.no_such_thing


@pytest.mark.parametrize(
    ("name", "expected"),
    [("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2), ("15", signal.SIGTERM)],
)
def test_notice_signal_by_name_or_number(
    tmp_path: Path, name: str, expected: signal.Signals
) -> None:
    assert make_env(tmp_path, GPUYARD_PREEMPT_SIGNAL=name).preempt_signal is expected


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GPUYARD_ATTEMPT", "-1"),
        ("GPUYARD_ATTEMPT", "1.5"),
        ("GPUYARD_PREEMPT_SIGNAL", "SIGNOPE"),
        ("GPUYARD_SIMULATE_PREEMPTION_AFTER", "soon"),
        ("GPUYARD_SIMULATE_PREEMPTION_AFTER", "-3"),
        ("GPUYARD_SIMULATE_PREEMPTION_AFTER", "inf"),
    ],
)
def test_bad_values_name_the_variable(tmp_path: Path, variable: str, value: str) -> None:
    with pytest.raises(ContractError, match=variable):
        make_env(tmp_path, **{variable: value})


@pytest.mark.parametrize(
    ("environ", "rank"),
    [
        ({}, None),
        ({"RANK": "1"}, None),  # gpuyard's RANK is the node rank until a launcher sets its own
        ({"RANK": "3", "LOCAL_RANK": "1"}, 3),
        ({"OMPI_COMM_WORLD_RANK": "5"}, 5),
        ({"PMI_RANK": "2"}, 2),
    ],
)
def test_rank_comes_from_the_launcher(
    tmp_path: Path, environ: dict[str, str], rank: int | None
) -> None:
    assert make_env(tmp_path, **environ).rank == rank


# -- the notice: file, rate limit, signal ---------------------------------------------------


def test_notice_file_is_seen_with_its_details(
    runtime: Runtime, control: Path, clock: ManualClock
) -> None:
    assert runtime.preemption_requested() is False
    assert runtime.preemption_notice() is None
    notice_file(control)
    clock.advance(0.5)
    assert runtime.preemption_requested() is True
    assert runtime.preemption_notice() == PreemptionNotice(
        source="file",
        requested_at=1_700_000_000.0,
        deadline=1_700_000_100.0,
        reason="job 7 (high) needs the room",
        by="scheduler",
    )
    # It stays: the script may look again after saving.
    (control / "preempt.json").unlink()
    assert runtime.preemption_requested() is True


def test_file_is_looked_at_no_more_than_every_half_second(
    runtime: Runtime, control: Path, clock: ManualClock
) -> None:
    start = clock.mono
    assert runtime.preemption_requested() is False  # looks at t=0
    notice_file(control)
    for tenths in range(1, 5):
        clock.mono = start + tenths / 10
        assert runtime.preemption_requested() is False  # t=0.1..0.4: no look
    clock.mono = start + 0.5
    assert runtime.preemption_requested() is True  # t=0.5: looks


def test_unreadable_notice_file_still_counts(runtime: Runtime, control: Path) -> None:
    (control / "preempt.json").write_text("{not json")
    assert runtime.preemption_requested() is True
    assert runtime.preemption_notice() == PreemptionNotice(source="file")


def test_signal_registers_a_listener_and_is_seen_at_once(runtime: Runtime, control: Path) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    assert runtime.preemption_requested() is False
    listeners = [int(p.name) for p in (control / "listeners").iterdir()]
    assert listeners == [os.getpid()]
    notice_file(control, deadline=1_700_000_042.0)
    # The clock does not move: only the signal can make the next call look at the file.
    os.kill(listeners[0], signal.SIGUSR1)
    assert runtime.preemption_requested() is True
    notice = runtime.preemption_notice()
    assert notice is not None
    assert (notice.source, notice.deadline) == ("signal", 1_700_000_042.0)
    runtime.close()
    assert signal.getsignal(signal.SIGUSR1) is before
    assert list((control / "listeners").iterdir()) == []


def test_signal_without_a_file_is_a_notice_without_a_deadline(
    runtime: Runtime, control: Path, clock: ManualClock
) -> None:
    runtime.preemption_requested()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert runtime.preemption_requested() is True
    notice = runtime.preemption_notice()
    assert notice == PreemptionNotice(source="signal", requested_at=clock.wall)
    # The file arrives late: the deadline is picked up when asked for.
    notice_file(control, deadline=1_700_000_077.0)
    notice = runtime.preemption_notice()
    assert notice is not None
    assert notice.deadline == 1_700_000_077.0


def test_a_previous_signal_handler_still_runs(runtime: Runtime) -> None:
    seen: list[int] = []

    def theirs(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGUSR1, theirs)
    try:
        runtime.preemption_requested()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert runtime.preemption_requested() is True
        assert seen == [signal.SIGUSR1]
        runtime.close()
        assert signal.getsignal(signal.SIGUSR1) is theirs
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_handler_is_installed_from_the_main_thread_only(
    runtime: Runtime, control: Path, clock: ManualClock
) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(runtime.preemption_requested()))
    thread.start()
    thread.join()
    assert answers == [False]
    assert signal.getsignal(signal.SIGUSR1) is before
    assert not (control / "listeners").exists()
    clock.advance(0.5)
    runtime.preemption_requested()
    assert signal.getsignal(signal.SIGUSR1) is not before
    assert [p.name for p in (control / "listeners").iterdir()] == [str(os.getpid())]


def test_a_thread_still_sees_the_file(runtime: Runtime, control: Path) -> None:
    notice_file(control)
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(runtime.preemption_requested()))
    thread.start()
    thread.join()
    assert answers == [True]


def test_listener_file_goes_at_exit(tmp_path: Path, control: Path) -> None:
    code = """
        import os, gpuyard.runtime as gr
        gr.preemption_requested()
        print(sorted(os.listdir(os.path.join(os.environ["GPUYARD_CONTROL_DIR"], "listeners"))),
              os.getpid())
    """
    result = run_python(code, env={"GPUYARD_CONTROL_DIR": str(control)}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listed, pid = result.stdout.rsplit(" ", 1)
    assert listed == f"['{pid.strip()}']"
    assert list((control / "listeners").iterdir()) == []


def test_notice_signal_from_the_environment(
    tmp_path: Path, control: Path, clock: ManualClock
) -> None:
    env = make_env(tmp_path, GPUYARD_CONTROL_DIR=str(control), GPUYARD_PREEMPT_SIGNAL="SIGUSR2")
    rt = Runtime(env, clock=clock)
    try:
        rt.preemption_requested()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert rt.preemption_requested() is True
    finally:
        rt.close()


# -- the simulate switch --------------------------------------------------------------------


def test_simulated_notice_on_attempt_0(tmp_path: Path, clock: ManualClock) -> None:
    rt = Runtime(make_env(tmp_path, GPUYARD_SIMULATE_PREEMPTION_AFTER="5"), clock=clock)
    clock.advance(100)  # time before the first use does not count
    assert rt.preemption_requested() is False
    clock.advance(4.9)
    assert rt.preemption_requested() is False
    clock.advance(0.1)
    assert rt.preemption_requested() is True
    notice = rt.preemption_notice()
    assert notice is not None
    assert notice.source == "simulated"
    assert notice.requested_at == clock.wall
    assert notice.deadline == clock.wall + 60
    assert notice.reason == "simulated: GPUYARD_SIMULATE_PREEMPTION_AFTER=5"


def test_simulated_notice_never_after_attempt_0(tmp_path: Path, clock: ManualClock) -> None:
    env = make_env(tmp_path, GPUYARD_SIMULATE_PREEMPTION_AFTER="0", GPUYARD_ATTEMPT="1")
    rt = Runtime(env, clock=clock)
    assert rt.preemption_requested() is False
    clock.advance(3600)
    assert rt.preemption_requested() is False


def test_simulated_notice_through_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYARD_SIMULATE_PREEMPTION_AFTER", "0")
    assert gr.preemption_requested() is True
    deadline = gr.preemption_deadline()
    assert deadline is not None
    assert deadline > 0
    assert (gr.preemption_reason() or "").startswith("simulated")


# -- what the script writes -----------------------------------------------------------------


def test_acknowledge_writes_once(runtime: Runtime, control: Path, clock: ManualClock) -> None:
    runtime.acknowledge(rank=1)
    first = read(control / "ack.json")
    assert first == {"time": clock.wall, "pid": os.getpid(), "rank": 1}
    clock.advance(5)
    runtime.acknowledge(rank=2)
    assert read(control / "ack.json") == first


def test_acknowledge_takes_the_launchers_rank(
    tmp_path: Path, control: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUYARD_CONTROL_DIR", str(control))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    gr.acknowledge()
    assert read(control / "ack.json")["rank"] == 3


def test_suspend_acknowledges_writes_suspended_and_exits_75(
    runtime: Runtime, control: Path, clock: ManualClock
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        runtime.suspend()
    assert exit_info.value.code == 75
    assert read(control / "suspended.json") == {"time": clock.wall, "pid": os.getpid()}
    assert read(control / "ack.json")["pid"] == os.getpid()


def test_suspend_exits_75_and_runs_finally_blocks(tmp_path: Path, control: Path) -> None:
    code = """
        import gpuyard.runtime as gr
        try:
            print("saving", flush=False)
            gr.suspend()
        finally:
            print("finally ran")
    """
    result = run_python(code, env={"GPUYARD_CONTROL_DIR": str(control)}, cwd=tmp_path)
    assert result.returncode == 75, result.stderr
    assert result.stdout.split("\n")[:2] == ["saving", "finally ran"]
    assert isinstance(read(control / "suspended.json")["pid"], int)


def test_progress_at_most_once_a_second(
    runtime: Runtime, control: Path, clock: ManualClock
) -> None:
    assert runtime.report_progress(1, loss=2.5) is True
    first = read(control / "progress.json")
    assert first == {"time": clock.wall, "step": 1, "metrics": {"loss": 2.5}}
    clock.advance(0.99)
    assert runtime.report_progress(2, loss=2.0) is False
    assert read(control / "progress.json") == first
    clock.advance(0.01)
    assert runtime.report_progress(step=3, loss=1.5, lr=0.1) is True
    assert read(control / "progress.json") == {
        "time": clock.wall,
        "step": 3,
        "metrics": {"loss": 1.5, "lr": 0.1},
    }


def test_metrics_become_json(runtime: Runtime, control: Path) -> None:
    runtime.report_progress(
        np.int64(7),  # type: ignore[arg-type]
        loss=np.float32(0.25),
        tokens=np.int64(4096),
        diverged=math.nan,
        grad=-math.inf,
        phase="warmup",
    )
    content = read(control / "progress.json")
    assert content["step"] == 7
    assert content["metrics"] == {
        "loss": 0.25,
        "tokens": 4096,
        "diverged": "nan",
        "grad": "-inf",
        "phase": "warmup",
    }
    assert json_number(object()).startswith("<object")  # type: ignore[union-attr]
    assert json_number(True) == 1


def test_record_checkpoint(runtime: Runtime, control: Path, tmp_path: Path) -> None:
    runtime.record_checkpoint(tmp_path / "ckpt" / "step-9", step=9)
    content = read(control / "checkpoint.json")
    assert content["step"] == 9
    assert content["path"] == str(tmp_path / "ckpt" / "step-9")


def test_control_dir_is_created_when_missing(tmp_path: Path, clock: ManualClock) -> None:
    control = tmp_path / "not" / "yet"
    rt = Runtime(make_env(tmp_path, GPUYARD_CONTROL_DIR=str(control)), clock=clock)
    rt.acknowledge()
    assert (control / "ack.json").is_file()


def test_writes_are_atomic(tmp_path: Path) -> None:
    # A reader polling while a writer rewrites a large file sees a whole old or a whole new
    # one, never a prefix; and nothing temporary is left behind.
    big = {"metrics": {f"m{i}": i * 0.5 for i in range(5_000)}}
    write_json(tmp_path, "progress.json", {"n": -1, **big})
    done = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not done.is_set():
            try:
                json.loads((tmp_path / "progress.json").read_text())
            except ValueError as exc:
                errors.append(str(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(50):
            write_json(tmp_path, "progress.json", {"n": n, **big})
    finally:
        done.set()
        thread.join()
    assert errors == []
    assert read(tmp_path / "progress.json")["n"] == 49
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.json"]


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    write_json(tmp_path, "ack.json", {"time": 1.0})
    with pytest.raises(TypeError):
        write_json(tmp_path, "ack.json", {"time": object()})
    assert read(tmp_path / "ack.json") == {"time": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ack.json"]


# -- checkpoints (torch, imported lazily by the runtime) ------------------------------------


def test_save_and_load_checkpoint(
    tmp_path: Path, control: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("GPUYARD_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("GPUYARD_CONTROL_DIR", str(control))
    assert gr.load_checkpoint() is None
    state = {"w": torch.arange(4.0), "step": 3}
    path = gr.save_checkpoint(state, step=3)
    assert path == tmp_path / "ckpt" / "checkpoint.pt"
    assert read(control / "checkpoint.json")["step"] == 3
    assert read(control / "checkpoint.json")["path"] == str(path)
    loaded = gr.load_checkpoint()
    assert loaded["step"] == 3
    assert torch.equal(loaded["w"], state["w"])
    # A save that fails half-way keeps the previous checkpoint whole.
    with pytest.raises(Exception, match=r"pickle|lambda"):
        gr.save_checkpoint({"bad": lambda: None}, step=4)
    assert gr.load_checkpoint()["step"] == 3
    assert read(control / "checkpoint.json")["step"] == 3
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checkpoint.pt"]
    gr.save_checkpoint({"other": 1}, name="extra.pt")
    assert gr.load_checkpoint(name="extra.pt") == {"other": 1}
    with pytest.raises(ValueError, match="plain file name"):
        gr.save_checkpoint({}, name="../escape.pt")
    assert not (control / "saving.json").exists()  # a save in progress says so, then not


class _SeesTheMarker:
    """Pickled while the save runs: records whether the marker is there then."""

    seen: bool | None = None

    def __init__(self, control: Path) -> None:
        self.control = control

    def __reduce__(self) -> tuple[object, ...]:
        _SeesTheMarker.seen = (self.control / "saving.json").exists()
        return (str, ("x",))


def test_a_save_in_progress_is_marked_and_a_fresh_start_loads_nothing(
    tmp_path: Path, control: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("GPUYARD_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("GPUYARD_CONTROL_DIR", str(control))
    gr.save_checkpoint({"probe": _SeesTheMarker(control)}, step=1)
    assert _SeesTheMarker.seen is True
    assert not (control / "saving.json").exists()
    assert gr.resume is True
    process.reset()
    monkeypatch.setenv("GPUYARD_RESUME", "0")  # a fault restart from scratch
    assert gr.resume is False
    assert gr.load_checkpoint(weights_only=False) is None


def test_agreement_without_a_process_group_is_the_local_flag(
    tmp_path: Path, clock: ManualClock
) -> None:
    pytest.importorskip("torch")
    from gpuyard.runtime.torch import _device, preemption_agreed

    rt = Runtime(make_env(tmp_path, GPUYARD_SIMULATE_PREEMPTION_AFTER="1"), clock=clock)
    assert preemption_agreed(runtime=rt) is False
    clock.advance(1)
    assert preemption_agreed(runtime=rt) is True
    # The flag rides on the CPU wherever the backend can carry CPU tensors.
    for backend in ("gloo", "cpu:gloo,cuda:nccl", "mpi"):
        assert _device(backend).type == "cpu"


# -- the local driver -----------------------------------------------------------------------

# A preemptible "training" loop without torch: its state is a JSON file in the checkpoint dir.
SCRIPT = """
import json, os, sys, time
import gpuyard.runtime as gr

state_file = gr.checkpoint_dir / "state.json"
step = json.loads(state_file.read_text())["step"] if state_file.exists() else 0
print(f"attempt {gr.attempt} starts at step {step}", flush=True)
while step < 40:
    if gr.preemption_requested():
        gr.acknowledge()
        gr.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps({"step": step}))
        gr.record_checkpoint(state_file, step=step)
        if "--launcher-says-1" in sys.argv:
            try:
                gr.suspend()
            except SystemExit:
                sys.exit(1)
        gr.suspend()
    gr.report_progress(step)
    step += 1
    time.sleep(0.02)
print(f"finished at step {step}", flush=True)
"""


def simulate(tmp_path: Path, *args: str, script: str = SCRIPT) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    command = [PYTHON, "-m", "gpuyard.runtime", "simulate", "--control-dir", str(tmp_path)]
    return subprocess.run(
        [*command, *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def driver_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    prefix = "gpuyard simulate: "
    return [line[len(prefix) :] for line in result.stderr.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("launcher_exit", [False, True], ids=["exit-75", "launcher-exit-1"])
def test_simulate_suspends_and_resumes(tmp_path: Path, launcher_exit: bool) -> None:
    extra = ["--launcher-says-1"] if launcher_exit else []
    result = simulate(tmp_path, "--after", "0.3", "--", PYTHON, "train.py", *extra)
    assert result.returncode == 0, result.stderr
    lines = driver_lines(result)
    run = next(tmp_path.glob("gpuyard-simulate-*"))
    assert lines[0] == (
        f"checkpoints in {run / 'checkpoints'}, outputs in {run / 'outputs'}, "
        f"control dirs under {run}"
    )
    assert lines[1].startswith("attempt 0: ") and lines[1].endswith("0.3 s after its first poll")
    assert lines[2].startswith("attempt 0: suspended after ")
    assert ("exit 1" in lines[2]) is launcher_exit
    assert "resuming as attempt 1" in lines[2]
    assert lines[3].startswith("attempt 1: ")
    assert lines[4].startswith("attempt 1: succeeded after ")
    assert len(lines) == 5
    saved = json.loads((run / "checkpoints" / "state.json").read_text())["step"]
    assert 0 < saved < 40
    assert sorted(p.name for p in tmp_path.iterdir()) == [run.name, "train.py"]  # nothing in cwd
    assert f"checkpoint at step {saved}" in lines[2]
    assert result.stdout.splitlines() == [
        "attempt 0 starts at step 0",
        f"attempt 1 starts at step {saved}",
        "finished at step 40",
    ]


def test_simulate_out_keeps_checkpoints_and_outputs_where_it_says(tmp_path: Path) -> None:
    script = (
        "import os, pathlib\n"
        "out = pathlib.Path(os.environ['GPUYARD_OUTPUT_DIR'])\n"
        "out.mkdir(parents=True, exist_ok=True)\n"
        "(out / 'rank-0.json').write_text('{}')\n"
    )
    kept = tmp_path / "kept"
    result = simulate(
        tmp_path, "--after", "60", "--out", str(kept), "--", PYTHON, "train.py", script=script
    )
    assert result.returncode == 0, result.stderr
    assert driver_lines(result)[0].startswith(
        f"checkpoints in {kept / 'checkpoints'}, outputs in {kept / 'outputs'}, "
    )
    assert (kept / "outputs" / "rank-0.json").is_file()
    assert not list(tmp_path.glob("rank-*.json")) and not (tmp_path / "checkpoints").exists()


def test_simulate_stops_at_a_failure(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--after", "5", "--", PYTHON, "train.py", script="exit(3)")
    assert result.returncode == 3
    assert driver_lines(result)[-1].startswith("attempt 0: failed with exit 3 after")


def test_simulate_warns_when_attempt_0_was_never_preempted(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--after", "60", PYTHON, "train.py", script="print('quick')")
    assert result.returncode == 0
    lines = driver_lines(result)
    assert lines[-2].startswith("attempt 0: succeeded")
    assert lines[-1].startswith("warning: attempt 0 ended without being suspended")


def test_simulate_gives_up_after_max_attempts(tmp_path: Path) -> None:
    always = "import gpuyard.runtime as gr\ngr.suspend()\n"
    result = simulate(
        tmp_path, "--after", "0", "--max-attempts", "2", "--", PYTHON, "train.py", script=always
    )
    assert result.returncode == 75
    lines = driver_lines(result)
    assert [line.split(":")[0] for line in lines[1:5]] == ["attempt 0"] * 2 + ["attempt 1"] * 2
    assert lines[-1] == "gave up: still suspended after 2 attempts (--max-attempts)"


def test_simulate_needs_a_command(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--after", "1", "--")
    assert result.returncode == 2
    assert "give the command after --" in result.stderr
