"""A job's checkpoints as the checkpoint service keeps them, and the step its next attempt
resumes from (docs/checkpoints.md).

The listing reads the job's checkpoint directory, which the job's own account writes: every
file is opened without following a link or blocking, only the fixed prefix of each part is
read, and the scan stops after :data:`MAX_ENTRIES` entries, so a job cannot make a listing
read elsewhere, hang or take long. A step is listed when it is complete in at least one place:
every rank's part on storage, or every rank's part in its node's memory (while the job has not
ended: node memory is freed then).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, InvalidSpec
from gpuyard.models import JobState
from gpuyard.models.access import Action
from gpuyard.models.actor import Actor
from gpuyard.models.checkpoints import (
    MAX_LISTED,
    CheckpointList,
    CheckpointPlace,
    CheckpointView,
)
from gpuyard.runtime.flash_format import FLASH_DIR, PINNED, StoredStep, step_dir, stored_steps
from gpuyard.services.auth import Audit, Policy
from gpuyard.services.suspension import HOLDABLE, set_held
from gpuyard.store.engine import Store
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import JobRow

__all__ = ["MEMORY_GRACE", "Checkpoints", "ended_jobs", "memory_to_free"]

MAX_INDEX_BYTES = 64 << 10
MAX_RANKS = 65_536


class Checkpoints:
    def __init__(
        self, store: Store, policy: Policy, job_dir: Callable[[int], str], *, clock: Clock
    ) -> None:
        self.store = store
        self.policy = policy
        self.job_dir = job_dir
        self.clock = clock
        self.audit = Audit(clock)

    def listing(self, job_id: int, *, actor: str) -> CheckpointList:
        with self.store.read() as session:
            row = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.VIEW
            )
            ended, resume_step = JobState(row.state).is_terminal(), row.resume_step
        return self._list(job_id, ended=ended, resume_step=resume_step)

    def _list(self, job_id: int, *, ended: bool, resume_step: int | None) -> CheckpointList:
        root = Path(self.job_dir(job_id)) / "checkpoints"
        if _is_link(root) or _is_link(root / FLASH_DIR):
            return CheckpointList(job_id=job_id, checkpoints=[], resume_step=resume_step)
        stored = {s.step: s for s in stored_steps(root)}
        memory = {} if ended else _memory_complete(root / FLASH_DIR / "memory")
        views = [
            _view(step, stored.get(step), memory.get(step))
            for step in sorted(set(stored) | set(memory))
            if (step in stored and stored[step].complete) or step in memory
        ]
        # Only past the newest complete step: an older one missing a part is being retired
        # (each rank's persister drops its own part), not waiting for one.
        newest = views[-1].step if views else -1
        partial = [
            s for s in sorted(stored) if s > newest and s not in memory and not stored[s].complete
        ]
        return CheckpointList(
            job_id=job_id,
            checkpoints=views[-MAX_LISTED:],
            resume_step=resume_step,
            partial=partial[-MAX_LISTED:],
        )

    def resume_from(self, job_id: int, step: int | None, *, actor: str) -> CheckpointList:
        """Choose the step the job's next attempts resume from (None: the newest), and
        release it if it was held: `gpuyard resume JOB --from STEP`."""
        with self.store.read() as session:
            row = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.STOP
            )
            _check_resumable(row)
        if step is not None:  # the job's files read with no transaction open
            complete = [
                c.step for c in self._list(job_id, ended=False, resume_step=None).checkpoints
            ]
            if step not in complete:
                raise InvalidSpec(
                    f"job {job_id} has no complete checkpoint at step {step} "
                    f"(complete: {', '.join(map(str, complete[-20:])) or 'none'}); "
                    f"`gpuyard checkpoints {job_id}` lists them"
                )
        with self.store.write() as session:
            row = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.STOP
            )
            _check_resumable(row)
            guarded_update(session, row, resume_step=step)
            self.audit.record(
                session, Actor.user(actor), f"job.resume-from:{step}", f"job:{job_id}"
            )
            set_held(session, row, actor=actor, held=False, now=self.clock.now(), audit=self.audit)
        return self.listing(job_id, actor=actor)

    def pin(self, job_id: int, step: int, *, actor: str, pinned: bool) -> CheckpointList:
        """Keep a complete step on storage whatever the retention (or let it go again)."""
        with self.store.read() as session:
            self.policy.check_job(session, actor, session.get(JobRow, job_id), job_id, Action.STOP)
        listing = self._list(job_id, ended=False, resume_step=None)
        stored = [c.step for c in listing.checkpoints if CheckpointPlace.STORAGE in c.held]
        if step not in stored:
            raise InvalidSpec(
                f"job {job_id} has no complete checkpoint at step {step} on storage "
                f"(there: {', '.join(map(str, stored[-20:])) or 'none'})"
            )
        root = Path(self.job_dir(job_id)) / "checkpoints"
        _mark(root, [FLASH_DIR, step_dir(root, step).name], PINNED, present=pinned)
        with self.store.write() as session:
            action = "pin" if pinned else "unpin"
            self.audit.record(
                session, Actor.user(actor), f"job.checkpoint-{action}:{step}", f"job:{job_id}"
            )
        return self.listing(job_id, actor=actor)


def _mark(root: Path, below: list[str], name: str, *, present: bool) -> None:
    """Create or remove the empty file ``name`` in ``root/below...``, each directory opened
    without following a link (the job's account owns them; the server is root)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    opened = [os.open(root, flags)]
    try:
        for part in below:
            opened.append(os.open(part, flags, dir_fd=opened[-1]))
        if present:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=opened[-1],
            )
            os.close(fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=opened[-1])
    except OSError as exc:
        raise Conflict(f"the checkpoint cannot be marked: {exc.strerror}") from None
    finally:
        for fd in opened:
            os.close(fd)


def _check_resumable(row: JobRow) -> None:
    state = JobState(row.state)
    if state in HOLDABLE:
        return
    if state.is_terminal():
        raise Conflict(
            f"job {row.id} has ended ({state.value}); only a job that has not ended resumes "
            "from a chosen checkpoint",
            extra={"state": state.value},
        )
    raise Conflict(
        f"job {row.id} is {state.value}; suspend it first (`gpuyard suspend --hold {row.id}`), "
        f"then `gpuyard resume {row.id} --from STEP`",
        extra={"state": state.value},
    )


def _view(step: int, stored: StoredStep | None, nodes: list[str] | None) -> CheckpointView:
    held = []
    if stored is not None and stored.complete:
        held.append(CheckpointPlace.STORAGE)
    if nodes is not None:
        held.append(CheckpointPlace.MEMORY)
    return CheckpointView(
        step=step,
        time=stored.time if stored is not None else 0.0,
        size=stored.size if stored is not None else 0,
        ranks=(stored.world if stored is not None else 0) or len(nodes or []),
        held=held,
        nodes=sorted(set(nodes or [])),
        pinned=stored.pinned if stored is not None else False,
    )


def _memory_complete(directory: Path) -> dict[int, list[str]]:
    """Steps every rank's node memory holds, per the persisters' indexes: step -> nodes."""
    indexes = []
    try:
        with os.scandir(directory) as entries:
            for number, entry in enumerate(entries):
                if number >= MAX_RANKS:
                    break
                index = _read_index(directory, entry.name)
                if index is not None:
                    indexes.append(index)
    except OSError:
        return {}
    worlds = {i[2] for i in indexes}
    if len(worlds) != 1 or len(indexes) != worlds.pop():
        return {}
    ranks = {i[0] for i in indexes}
    if ranks != set(range(len(indexes))):
        return {}
    common = set.intersection(*(set(i[3]) for i in indexes))
    return {step: [i[1] for i in indexes] for step in common}


def _read_index(directory: Path, name: str) -> tuple[int, str, int, list[int]] | None:
    if not (name.startswith("rank-") and name.endswith(".json") and name[5:-5].isdigit()):
        return None
    try:
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        content = json.loads(os.read(fd, MAX_INDEX_BYTES))
        steps = [int(s) for s in content["steps"] if isinstance(s, int)]
        return int(name[5:-5]), str(content.get("node", ""))[:253], int(content["world"]), steps
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(fd)


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def ended_jobs(session: Session, job_ids: set[int]) -> set[int]:
    """Those of `job_ids` that have ended or no longer exist (their node memory may go)."""
    found = dict(
        session.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(job_ids))).all()
    )
    return {j for j in job_ids if j not in found or JobState(found[j]).is_terminal()}


MEMORY_GRACE = 600.0
"""Seconds a job keeps its node memory while it holds no node (a fault restart in place comes
back well within them; a job suspended or held longer resumes from storage)."""


def memory_to_free(
    session: Session, job_ids: set[int], idle_since: dict[int, float], now: float
) -> set[int]:
    """Those of `job_ids` whose node memory may go: ended or gone, or holding no node for
    :data:`MEMORY_GRACE` seconds (`idle_since`: when each was first seen so, kept by the
    caller between looks)."""
    rows = session.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(job_ids))).all()
    states = {job_id: JobState(state) for job_id, state in rows}
    free = set()
    for job_id in job_ids:
        state = states.get(job_id)
        if state is not None and state.holds_resources():
            idle_since.pop(job_id, None)
            continue
        since = idle_since.setdefault(job_id, now)
        if state is None or state.is_terminal() or now - since >= MEMORY_GRACE:
            free.add(job_id)
            idle_since.pop(job_id, None)
    return free
