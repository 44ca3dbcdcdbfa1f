"""A job's checkpoints over the API, on both databases: the listing (complete steps only, the
partial ones apart, what a job planted in its directory read safely), who sees it, and choosing
the step a job resumes from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuyard.client import Client
from gpuyard.errors import Conflict, InvalidSpec, NotFound
from gpuyard.executors.fake import FakeExecutor
from gpuyard.runtime.contract import JobEnvironment
from gpuyard.runtime.flash import CheckpointService
from gpuyard.runtime.flash_format import FLASH_DIR, step_dir
from gpuyard.runtime.process import Runtime
from gpuyard.testing.auth import AsUser


class JobDirs(FakeExecutor):
    """The fake executor, with each job's directory under a real folder."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def job_dir(self, job_id: int) -> str:
        return str(self.root / str(job_id))


@pytest.fixture
def fake_executor(tmp_path: Path) -> FakeExecutor:
    return JobDirs(tmp_path / "jobs")


def save_parts(checkpoints: Path, step: int, ranks: list[int], world: int) -> None:
    """What ranks of a job save through the service (storage only: no node memory here)."""
    environ = {"GPUYARD_CHECKPOINT_DIR": str(checkpoints), "GPUYARD_CHECKPOINT_KEEP": "9"}
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=checkpoints))
    for rank in ranks:
        service = CheckpointService(runtime, environ, rank=rank, world=world)
        service.save(step, {"w": torch.full((4,), float(step)), "rank": rank})


def test_only_complete_steps_are_listed_and_chosen(
    client: Client, fake_executor: JobDirs, as_user: AsUser
) -> None:
    job = client.submit({"command": "python train.py"})
    checkpoints = fake_executor.root / str(job.id) / "checkpoints"
    assert client.checkpoints(job.id).checkpoints == []
    save_parts(checkpoints, 3, [0, 1], 2)
    save_parts(checkpoints, 5, [0], 2)  # rank 1's part of step 5 never came
    listing = client.checkpoints(job.id)
    assert [(c.step, [p.value for p in c.held], c.ranks) for c in listing.checkpoints] == [
        (3, ["storage"], 2)
    ]
    assert listing.checkpoints[0].size > 0
    assert listing.partial == [5]
    save_parts(checkpoints, 2, [1], 2)  # older than step 3: being retired, not listed
    assert client.checkpoints(job.id).partial == [5]
    with pytest.raises(InvalidSpec, match=r"no complete checkpoint at step 5 \(complete: 3"):
        client.resume_from(job.id, 5)
    chosen = client.resume_from(job.id, 3)
    assert chosen.resume_step == 3
    assert client.resume_from(job.id, None).resume_step is None
    with pytest.raises(NotFound, match=f"job {job.id} does not exist"):
        as_user("mallory").checkpoints(job.id)
    client.stop(job.id)
    with pytest.raises(Conflict, match="has ended"):
        client.resume_from(job.id, 3)


def test_what_a_job_plants_in_its_directory_is_read_safely(
    client: Client, fake_executor: JobDirs, tmp_path: Path
) -> None:
    job = client.submit({"command": "python train.py"})
    checkpoints = fake_executor.root / str(job.id) / "checkpoints"
    save_parts(checkpoints, 1, [0], 1)
    outside = tmp_path / "elsewhere"
    save_parts(outside, 7, [0], 1)
    # A part that is a FIFO (a read would block), a link to another job's part, a step
    # directory that is a link: none is read, none is listed, nothing hangs.
    fifo_step = step_dir(checkpoints, 2)
    fifo_step.mkdir(parents=True)
    os.mkfifo(fifo_step / "rank-0.gyc")
    linked = step_dir(checkpoints, 4)
    linked.mkdir()
    (linked / "rank-0.gyc").symlink_to(step_dir(outside, 7) / "rank-0.gyc")
    step_dir(checkpoints, 7).symlink_to(step_dir(outside, 7))
    listing = client.checkpoints(job.id)
    assert [c.step for c in listing.checkpoints] == [1]
    # The whole folder a link: nothing is listed.
    flash = checkpoints / FLASH_DIR
    flash.rename(checkpoints / "moved")
    flash.symlink_to(outside / FLASH_DIR)
    assert client.checkpoints(job.id).checkpoints == []


def test_a_running_job_is_suspended_before_it_resumes_elsewhere(
    client: Client, fake_executor: JobDirs, controller: object
) -> None:
    job = client.submit({"command": "python train.py"})
    controller.tick()  # type: ignore[attr-defined]
    assert client.job(job.id).state.value == "running"
    with pytest.raises(Conflict, match=f"gpuyard suspend --hold {job.id}"):
        client.resume_from(job.id, None)


def test_a_pinned_step_outlives_the_retention(
    client: Client, fake_executor: JobDirs, as_user: AsUser
) -> None:
    job = client.submit({"command": "python train.py"})
    checkpoints = fake_executor.root / str(job.id) / "checkpoints"
    environ = {"GPUYARD_CHECKPOINT_DIR": str(checkpoints), "GPUYARD_CHECKPOINT_KEEP": "2"}
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=checkpoints))
    service = CheckpointService(runtime, environ, rank=0, world=1)
    service.save(1, {"w": torch.ones(2)})
    assert [c.pinned for c in client.pin_checkpoint(job.id, 1).checkpoints] == [True]
    with pytest.raises(InvalidSpec, match="no complete checkpoint at step 9 on storage"):
        client.pin_checkpoint(job.id, 9)
    with pytest.raises(NotFound):
        as_user("mallory").pin_checkpoint(job.id, 1)
    for step in (2, 3, 4):
        service.save(step, {"w": torch.ones(2) * step})
    kept = client.checkpoints(job.id).checkpoints
    assert [(c.step, c.pinned) for c in kept] == [(1, True), (3, False), (4, False)]
    client.pin_checkpoint(job.id, 1, pinned=False)
    service.save(5, {"w": torch.ones(2)})
    assert [c.step for c in client.checkpoints(job.id).checkpoints] == [4, 5]


def test_node_memory_goes_when_a_job_ends_or_holds_no_node_for_a_while(
    client: Client, store: Any, controller: Any
) -> None:
    from gpuyard.services.checkpoints import MEMORY_GRACE, memory_to_free

    running = client.submit({"command": "python train.py", "resources": {"gpus": 8}}).id
    controller.tick()  # it holds the one node's 8 GPUs: the next two wait
    waiting = client.submit({"command": "python train.py", "resources": {"gpus": 8}}).id
    ended = client.submit({"command": "python train.py", "resources": {"gpus": 8}}).id
    client.stop(ended)
    held, idle = {running, waiting, ended, 999_999}, {}  # type: ignore[var-annotated]
    with store.read() as session:
        assert memory_to_free(session, held, idle, 100.0) == {ended, 999_999}
        assert memory_to_free(session, held, idle, 100.0 + MEMORY_GRACE - 1) == {ended, 999_999}
        assert memory_to_free(session, held, idle, 100.0 + MEMORY_GRACE) == {
            waiting,
            ended,
            999_999,
        }
