"""The checkpoint service on one rank: node memory, the persister process, storage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpuyard.runtime.contract import JobEnvironment
from gpuyard.runtime.flash import CheckpointService
from gpuyard.runtime.flash_format import read_part, slot_path, step_dir, stored_steps
from gpuyard.runtime.persister import Persister
from gpuyard.runtime.process import Runtime


def service(tmp_path: Path, *, rank: int = 0, world: int = 1, **extra: str) -> CheckpointService:
    environ = {
        "GPUYARD_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "GPUYARD_CHECKPOINT_MEMORY_DIR": str(tmp_path / "memory"),
        **extra,
    }
    (tmp_path / "memory").mkdir(exist_ok=True)
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=tmp_path))
    warnings: list[str] = []
    svc = CheckpointService(runtime, environ, rank=rank, world=world, warn=warnings.append)
    svc.warnings = warnings  # type: ignore[attr-defined]
    return svc


def state(seed: int) -> dict[str, object]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "w": torch.randn(64, 32, generator=gen),
            "b": torch.zeros(3, dtype=torch.bfloat16),
        },
        "optim": {
            "state": {0: {"step": torch.tensor(5.0), "exp_avg": torch.randn(7, generator=gen)}},
            "param_groups": [{"params": [0], "lr": 0.1, "betas": (0.9, 0.999), "name": None}],
        },
        "flags": torch.tensor([True, False]),
        "empty": torch.empty(0, 4),
        "step": seed,
    }


def same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))  # type: ignore[arg-type]
    return a == b


def test_a_save_goes_to_memory_and_reaches_storage_whole(tmp_path: Path) -> None:
    svc = service(tmp_path)
    for step in range(4):
        assert svc.save(step, state(step)) == "memory"
    assert svc.flush(timeout=60)
    steps = stored_steps(tmp_path / "checkpoints")
    assert [s.step for s in steps if s.complete][-1] == 3
    assert len([s for s in steps if s.complete]) <= 3  # the retention: the newest three
    again = service(tmp_path).load()
    assert again is not None and again.step == 3 and again.source == "memory"
    assert same(again.state, state(3))


def test_a_restart_elsewhere_loads_from_storage(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.save(7, state(7))
    assert svc.flush(timeout=60)
    for slot in (0, 1):
        slot_path(tmp_path / "memory", 0, slot).unlink(missing_ok=True)
    again = service(tmp_path).load()
    assert again is not None and (again.step, again.source) == (7, "storage")
    assert same(again.state, state(7))


def test_a_part_whose_save_was_cut_short_is_not_loaded(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.save(1, state(1))
    svc.save(2, state(2))
    svc.flush(timeout=60)
    # A rank killed while it wrote step 3 into the slot of step 1: the magic is cleared.
    slot = next(p for p in tmp_path.joinpath("memory").iterdir() if read_part(p).step == 1)  # type: ignore[union-attr]
    with open(slot, "r+b") as file:
        file.write(b"\0" * 8)
    again = service(tmp_path).load()
    assert again is not None and again.step == 2


def test_a_chosen_step_is_loaded_and_a_missing_one_named(tmp_path: Path) -> None:
    svc = service(tmp_path, GPUYARD_CHECKPOINT_KEEP="5")
    for step in range(3):
        svc.save(step, state(step))
        svc.flush(timeout=60)
    again = service(tmp_path, GPUYARD_RESUME_STEP="0").load()
    assert again is not None and again.step == 0 and same(again.state, state(0))
    with pytest.raises(LookupError, match="step 9 is not a complete checkpoint"):
        service(tmp_path).load(step=9)


def test_no_resume_and_first_attempt_load_nothing(tmp_path: Path) -> None:
    assert service(tmp_path).load() is None
    svc = service(tmp_path)
    svc.save(0, state(0))
    svc.flush(timeout=60)
    assert service(tmp_path, GPUYARD_RESUME="0").load() is None


def test_memory_full_falls_back_to_storage_with_a_warning(tmp_path: Path) -> None:
    svc = service(tmp_path, GPUYARD_CHECKPOINT_MEMORY_LIMIT="4096")
    assert svc.save(0, state(0)) == "storage"
    assert svc.save(1, state(1)) == "storage"
    assert len(svc.warnings) == 1 and "checkpoint memory full" in svc.warnings[0]  # type: ignore[attr-defined]
    again = service(tmp_path).load()
    assert again is not None and again.step == 1 and again.source == "storage"


def test_without_node_memory_it_saves_to_storage(tmp_path: Path) -> None:
    environ = {"GPUYARD_CHECKPOINT_DIR": str(tmp_path / "c")}
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=tmp_path))
    svc = CheckpointService(runtime, environ, rank=0, world=1)
    assert svc.save(4, {"x": torch.arange(10)}) == "storage"
    again = CheckpointService(runtime, environ, rank=0, world=1).load()
    assert again is not None and torch.equal(again.state["x"], torch.arange(10))


def test_what_it_cannot_hold_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    svc = service(tmp_path)
    with pytest.raises(TypeError, match="got object"):
        svc.save(0, {"x": object()})
    with pytest.raises(ValueError, match="whole number"):
        svc.save(-1, {})
    assert not any((tmp_path / "memory").iterdir())


def test_a_step_is_complete_only_with_every_rank(tmp_path: Path) -> None:
    zero = service(tmp_path, rank=0, world=2)
    zero.save(5, state(5))
    zero.flush(timeout=60)
    steps = stored_steps(tmp_path / "checkpoints")
    assert [(s.step, s.complete) for s in steps] == [(5, False)]
    one = service(tmp_path, rank=1, world=2)
    one.save(5, state(6))
    one.flush(timeout=60)
    assert [(s.step, s.complete) for s in stored_steps(tmp_path / "checkpoints")] == [(5, True)]


def test_the_persister_drops_a_copy_of_a_reused_slot(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.save(1, state(1))
    svc.flush(timeout=60)
    persister = Persister(tmp_path / "memory", tmp_path / "checkpoints", 0, 3)
    path, part = persister.newest()  # type: ignore[misc]
    target = step_dir(tmp_path / "checkpoints", 9) / "rank-0.gyc"
    svc.save(2, state(2))  # another slot
    svc.save(3, state(3))  # reuses step 1's slot: the copy below must notice
    assert not persister._copy(path, part, target)
    assert not target.exists()
    svc.flush(timeout=60)


def test_the_persister_runs_as_a_module(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.save(3, state(3))
    svc.flush(timeout=60)
    for step_path in (tmp_path / "checkpoints" / "gpuyard-flash").glob("step-*"):
        for part in step_path.iterdir():
            part.unlink()
        step_path.rmdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuyard.runtime.persister",
            str(tmp_path / "memory"),
            str(tmp_path / "checkpoints"),
            "0",
            "3",
        ],
        input=b"",
        check=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 0
    assert [s.step for s in stored_steps(tmp_path / "checkpoints") if s.complete] == [3]


def test_resuming_from_an_earlier_step_leaves_the_later_ones_aside(tmp_path: Path) -> None:
    svc = service(tmp_path, GPUYARD_CHECKPOINT_KEEP="9")
    for step in range(4):
        svc.save(step, state(step))
        svc.flush(timeout=60)
    chosen = service(tmp_path, GPUYARD_RESUME_STEP="1", GPUYARD_ATTEMPT="2")
    again = chosen.load()
    assert again is not None and again.step == 1 and same(again.state, state(1))
    assert [s.step for s in stored_steps(tmp_path / "checkpoints")] == [0, 1]
    # The attempt after: the chosen step was used; it goes on from its own newest.
    chosen.save(2, state(20))
    chosen.flush(timeout=60)
    later = service(tmp_path, GPUYARD_RESUME_STEP="1", GPUYARD_ATTEMPT="3").load()
    assert later is not None and later.step == 2 and same(later.state, state(20))


def test_a_save_never_overwrites_the_part_being_persisted(tmp_path: Path) -> None:
    import fcntl

    svc = service(tmp_path)
    svc.save(1, state(1))
    svc.save(2, state(2))
    svc.flush(timeout=60)
    persister = Persister(tmp_path / "memory", tmp_path / "checkpoints", 0, 3)
    path, part = persister.newest()  # type: ignore[misc]
    assert part.step == 2
    with open(path, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_SH)  # as the persister does while it copies
        for step in (3, 4, 5):  # saved faster than it persists: never into the held slot
            assert svc.save(step, state(step)) == "memory"
        assert read_part(path).step == 2  # type: ignore[union-attr]
    newest = service(tmp_path).load()
    assert newest is not None and newest.step == 5 and same(newest.state, state(5))
    svc.flush(timeout=60)


def test_a_full_node_memory_is_an_error_not_a_crash(tmp_path: Path, mount_tmpfs: object) -> None:
    """A tmpfs smaller than the state: the save goes to storage, with a warning."""
    small = mount_tmpfs("memory-small", size="64k")  # type: ignore[operator]
    environ = {
        "GPUYARD_CHECKPOINT_DIR": str(tmp_path / "c"),
        "GPUYARD_CHECKPOINT_MEMORY_DIR": str(small),
    }
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=tmp_path))
    warnings: list[str] = []
    svc = CheckpointService(runtime, environ, rank=0, world=1, warn=warnings.append)
    assert svc.save(1, {"w": torch.zeros(1 << 16)}) == "storage"
    assert warnings and "checkpoint memory unusable" in warnings[0]
    again = CheckpointService(runtime, environ, rank=0, world=1).load()
    assert again is not None and again.step == 1


def test_a_node_memory_that_is_not_there_sends_saves_to_storage(tmp_path: Path) -> None:
    environ = {
        "GPUYARD_CHECKPOINT_DIR": str(tmp_path / "c"),
        "GPUYARD_CHECKPOINT_MEMORY_DIR": str(tmp_path / "gone"),
    }
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=tmp_path))
    warnings: list[str] = []
    svc = CheckpointService(runtime, environ, rank=0, world=1, warn=warnings.append)
    assert svc.save(1, {"w": torch.ones(3)}) == "storage"
    assert len(warnings) == 1 and "checkpoint memory unusable" in warnings[0]
    with pytest.raises(ValueError, match="from 0 to"):
        svc.save(2**70, {})
