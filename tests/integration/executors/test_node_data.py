"""A node's data cache on a real filesystem (docs/datasets.md, "Data preparation"): a version
copied and verified once, reused and shared by concurrent jobs, a changed file named, no room
refused with nothing left behind, pins, retention on an injected clock, LRU under the cap."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuyard.executors.base import DataMismatch, DataNoRoom
from gpuyard.executors.local.node_data import NodeData
from gpuyard.models.dataprep import DataSource
from gpuyard.services.dataset_files import hash_tree

DAY = 86400.0


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def make_version(root: Path, version_id: int, files: dict[str, bytes]) -> DataSource:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    manifest = hash_tree(str(root), None)
    return DataSource(
        version_id=version_id,
        ref=f"alice/data@{version_id}",
        path=str(root),
        manifest=manifest,
        digest=manifest.digest(),
    )


@pytest.fixture
def source(tmp_path: Path) -> DataSource:
    return make_version(
        tmp_path / "v1",
        1,
        {"a.bin": os.urandom(3 << 20), "sub/b.txt": b"hello\n", "sub/deep/c": b""},
    )


def no_progress(_done: int, _total: int) -> None:
    return


def test_a_copy_is_verified_read_only_and_reused(tmp_path: Path, source: DataSource) -> None:
    data = NodeData(tmp_path / "cache")
    seen: list[tuple[int, int]] = []
    first = data.prepare("n0", source, job_id=1, progress=lambda d, t: seen.append((d, t)))
    assert first.copied == source.manifest.size
    assert seen[-1] == (source.manifest.size, source.manifest.size)
    copy = Path(first.path)
    assert (copy / "sub" / "b.txt").read_bytes() == b"hello\n"
    assert hash_tree(str(copy), None).digest() == source.digest
    assert stat.S_IMODE((copy / "a.bin").stat().st_mode) == 0o444
    assert stat.S_IMODE(copy.stat().st_mode) == 0o555

    again = data.prepare("n0", source, job_id=2, progress=no_progress)
    assert again == type(first)(path=first.path, copied=0)
    assert data.jobs() == {1, 2}
    # Another node of the same machine has a copy of its own.
    assert data.prepare("n1", source, job_id=1, progress=no_progress).copied > 0


def test_concurrent_jobs_copy_once(tmp_path: Path, source: DataSource) -> None:
    data = NodeData(tmp_path / "cache")
    copied: list[int] = []
    lock = threading.Lock()

    def job(job_id: int) -> None:
        got = data.prepare("n0", source, job_id=job_id, progress=no_progress)
        with lock:
            copied.append(got.copied)

    threads = [threading.Thread(target=job, args=(j,)) for j in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(copied) == [0] * 9 + [source.manifest.size]
    assert data.jobs() == set(range(10))


def test_a_changed_file_fails_naming_it(tmp_path: Path, source: DataSource) -> None:
    (Path(source.path) / "sub" / "b.txt").write_bytes(b"HELLO\n")
    data = NodeData(tmp_path / "cache")
    with pytest.raises(DataMismatch, match=r"alice/data@1 changed under its version: sub/b\.txt"):
        data.prepare("n0", source, job_id=1, progress=no_progress)
    assert not data.holds("n0", source.key)
    assert [p.name for p in data.node_dir("n0").iterdir() if not p.name.endswith(".lock")] == []


def test_a_missing_file_is_named(tmp_path: Path, source: DataSource) -> None:
    (Path(source.path) / "a.bin").unlink()
    with pytest.raises(DataMismatch, match=r"a\.bin is missing"):
        NodeData(tmp_path / "cache").prepare("n0", source, job_id=1, progress=no_progress)


def test_no_room_is_refused_before_copying(tmp_path: Path, source: DataSource) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    huge = source.manifest.model_copy(
        update={"files": [f.model_copy(update={"size": free * 2}) for f in source.manifest.files]}
    )
    big = DataSource(
        version_id=9, ref="alice/big@1", path=source.path, manifest=huge, digest=huge.digest()
    )
    data = NodeData(tmp_path / "cache", max_bytes=1 << 62)
    with pytest.raises(DataNoRoom, match=r"no room for a copy of dataset alice/big@1 on n0"):
        data.prepare("n0", big, job_id=1, progress=no_progress)
    assert not any(p.name.startswith(".tmp-") for p in data.node_dir("n0").iterdir())


def test_retention_counts_from_the_last_use(tmp_path: Path, source: DataSource) -> None:
    clock = Clock()
    data = NodeData(tmp_path / "cache", retention=7 * DAY, now=clock)
    path = Path(data.prepare("n0", source, job_id=1, progress=no_progress).path)
    clock.t += 30 * DAY
    assert data.sweep() == []  # pinned: the job has not ended
    data.release(1)  # the job ended: its last use is now
    clock.t += 7 * DAY - 1
    assert data.sweep() == []
    clock.t += 1
    assert data.sweep() == [f"n0/{source.key}"]
    assert not path.exists()
    assert not data.holds("n0", source.key)


def test_least_recently_used_goes_past_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    data = NodeData(tmp_path / "cache", max_bytes=5 << 20, now=clock)
    versions = [
        make_version(tmp_path / f"v{i}", i, {"x": os.urandom(2 << 20)}) for i in range(1, 4)
    ]
    for job_id, version in enumerate(versions[:2], start=1):
        data.prepare("n0", version, job_id=job_id, progress=no_progress)
        data.release(job_id)
        clock.t += 10
    # v1 is used again: v2 is now the least recently used.
    data.prepare("n0", versions[0], job_id=3, progress=no_progress)
    data.release(3)
    clock.t += 10
    data.prepare("n0", versions[2], job_id=4, progress=no_progress)
    assert [c.key for c in data.copies("n0")] == sorted([versions[0].key, versions[2].key])


def test_a_disk_that_fills_during_the_copy_fails_it_and_keeps_nothing(
    tmp_path: Path, mount_tmpfs: Callable[..., Path]
) -> None:
    """Two versions that each fit the free space but not together, copied at once on a
    small real filesystem: the one that runs out fails with no room, and what it wrote goes."""
    disk = mount_tmpfs("fast", size="8m")
    data = NodeData(disk / "cache", max_bytes=1 << 40)
    versions = [make_version(tmp_path / f"v{i}", i, {"x.bin": os.urandom(5 << 20)}) for i in (1, 2)]
    failed: list[Exception] = []
    made: list[str] = []

    def job(source: DataSource) -> None:
        try:
            made.append(
                data.prepare("n0", source, job_id=source.version_id, progress=no_progress).path
            )
        except DataNoRoom as exc:
            failed.append(exc)

    threads = [threading.Thread(target=job, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed, "both copies fitted"
    assert all("no room for a copy of dataset alice/data@" in str(e) for e in failed)
    left = sorted(p.name for p in data.node_dir("n0").iterdir() if p.name.startswith(".tmp-"))
    assert left == []
    for path in made:  # what succeeded is whole
        assert hash_tree(path, None).digest() in {v.digest for v in versions}
    assert len(data.copies("n0")) == len(made)


@pytest.mark.parametrize("swap", ["file link", "folder link", "fifo", "grown"])
def test_what_the_owner_swaps_in_after_hashing_is_never_read_through(
    tmp_path: Path, source: DataSource, swap: str
) -> None:
    """A link (to a file or through a folder) to what the pool may read and the owner may not,
    a FIFO (a read would block), a file grown without end: each fails the copy, named, and
    nothing of what is outside the version is copied."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"hello\n")  # the very bytes of sub/b.txt: a hash would not tell
    root = Path(source.path)
    if swap == "file link":
        (root / "sub" / "b.txt").unlink()
        (root / "sub" / "b.txt").symlink_to(secret)
    elif swap == "folder link":
        elsewhere = tmp_path / "elsewhere"
        (root / "sub").rename(elsewhere)
        (root / "sub").symlink_to(elsewhere)
    elif swap == "fifo":
        (root / "sub" / "b.txt").unlink()
        os.mkfifo(root / "sub" / "b.txt")
    else:
        with open(root / "a.bin", "ab") as grown:
            grown.write(b"x" * (1 << 20))
    data = NodeData(tmp_path / "cache")
    words = {"grown": "has", "fifo": "not a regular file"}.get(swap, "link")
    with pytest.raises(DataMismatch, match=words):
        data.prepare("n0", source, job_id=1, progress=no_progress)
    assert not any((tmp_path / "cache").glob("n0/*/sub/b.txt"))


def test_a_progress_that_raises_stops_the_copy_and_keeps_nothing(
    tmp_path: Path, source: DataSource
) -> None:
    """The controller raises from the progress once the job is no longer starting (stopped):
    the copy stops there, and nothing of it is kept."""
    from gpuyard.executors import base

    def stopped(_done: int, _total: int) -> None:
        raise base.LaunchError("job 1 is stopped: its data preparation stops")

    data = NodeData(tmp_path / "cache", progress_every=0.0)  # every chunk reports
    with pytest.raises(base.LaunchError, match="stopped"):
        data.prepare("n0", source, job_id=1, progress=stopped)
    assert not data.holds("n0", source.key)
    assert [p.name for p in data.node_dir("n0").iterdir() if not p.name.endswith(".lock")] == []
