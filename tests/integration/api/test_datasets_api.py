"""The dataset catalogue over the real HTTP API, on both databases (issue 28): versions made
from a path below a dataset root and uploaded in chunks (resumed, a wrong offset refused with
the right one), manifests, another user's private dataset the same 404 (and the same 422 at
submission) as a missing one until shared, favourites and filters, a version mounted by a job
that has not ended kept, a job's mount pinned read-only, and hostile input refused."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuyard.client import Client, DatasetsClient
from gpuyard.clock import ManualClock
from gpuyard.errors import (
    Conflict,
    GpuyardError,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    StorageFull,
    TooLarge,
)
from gpuyard.models.dataset import DatasetView, VersionState
from gpuyard.services.datasets import mounts_at_launch
from gpuyard.settings import Settings
from gpuyard.store import Store
from gpuyard.testing.auth import AsUser

UPLOAD_MAX = 1 << 20


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """The dataset root, with a small tree in it."""
    root = tmp_path / "shared"
    (root / "mnist" / "train").mkdir(parents=True)
    (root / "mnist" / "train" / "a.bin").write_bytes(b"a" * 1000)
    (root / "mnist" / "labels.txt").write_text("0\n1\n")
    return root


@pytest.fixture
def settings(tmp_path: Path, shared: Path) -> Settings:
    return Settings(
        home=tmp_path / "home", dataset_roots=(str(shared),), dataset_upload_max=UPLOAD_MAX
    )


def _ds(client: Client) -> DatasetsClient:
    return DatasetsClient(client)


def _ready(client: Client, name: str) -> DatasetView:
    view = _ds(client).wait(name, timeout=60, poll=0.05)
    assert view.versions[-1].state is VersionState.READY, view.versions[-1].error
    return view


def _same_answer(hidden: GpuyardError, missing: GpuyardError, name: str, other: str) -> None:
    assert type(hidden) is type(missing)
    assert hidden.detail.replace(name, other) == missing.detail


def test_a_version_from_a_path_is_hashed_and_hidden_from_others_until_shared(
    as_user: AsUser, shared: Path
) -> None:
    alice, bob = as_user("alice", group="lab"), as_user("bob", group="ops")
    made = _ds(alice).create("mnist", str(shared / "mnist"), description="digits")
    assert made.versions[0].state in (VersionState.HASHING, VersionState.READY)
    view = _ready(alice, "mnist")
    (v1,) = view.versions
    assert (view.owner, view.visibility, view.latest) == ("alice", "private", 1)
    assert (v1.files, v1.size, v1.source, v1.path) == (2, 1004, "path", str(shared / "mnist"))
    assert v1.digest.startswith("sha256:") and view.size == 1004
    manifest = _ds(alice).manifest("mnist@1")
    assert [(f.path, f.size) for f in manifest.files] == [("labels.txt", 4), ("train/a.bin", 1000)]
    assert manifest.files[1].sha256 == hashlib.sha256(b"a" * 1000).hexdigest()
    assert manifest.digest() == v1.digest and _ds(alice).manifest("alice/mnist") == manifest

    with pytest.raises(NotFound) as hidden:
        _ds(bob).get("alice/mnist")
    with pytest.raises(NotFound) as missing:
        _ds(bob).get("alice/nope")
    _same_answer(hidden.value, missing.value, "alice/mnist", "alice/nope")
    with pytest.raises(NotFound) as hidden:
        _ds(bob).manifest("alice/mnist@1")
    with pytest.raises(NotFound) as missing:
        _ds(bob).manifest("alice/nope@1")
    _same_answer(hidden.value, missing.value, "alice/mnist", "alice/nope")
    assert _ds(bob).list() == []
    for refused in (
        lambda: _ds(bob).share("alice/mnist", "public"),
        lambda: _ds(bob).delete("alice/mnist"),
        lambda: _ds(bob).favourite("alice/mnist"),
    ):
        with pytest.raises(NotFound):
            refused()
    mount = {"name": "d", "dataset": "alice/mnist@1"}
    with pytest.raises(InvalidSpec) as hidden_job:
        bob.submit({"command": "true", "mounts": {"datasets": [mount]}})
    mount = {"name": "d", "dataset": "alice/nope@1"}
    with pytest.raises(InvalidSpec) as missing_job:
        bob.submit({"command": "true", "mounts": {"datasets": [mount]}})
    _same_answer(hidden_job.value, missing_job.value, "alice/mnist", "alice/nope")

    # A second version of the same path; shared with everyone; bob sees it, without paths.
    _ds(alice).create("mnist", str(shared / "mnist"))
    assert [v.version for v in _ready(alice, "mnist").versions] == [1, 2]
    assert _ds(alice).share("mnist", "public").visibility == "public"
    seen = _ds(bob).get("mnist")  # no owner: the only one of that name bob may see
    assert seen.latest == 2 and all(v.path is None for v in seen.versions)
    with pytest.raises(PermissionDenied, match="only its owner or an admin"):
        _ds(bob).delete("alice/mnist")
    assert [d.name for d in _ds(bob).list("public")] == ["mnist"]
    assert _ds(bob).list("mine") == []


def test_group_visibility_and_favourites(as_user: AsUser, shared: Path) -> None:
    alice, gina, otto = (
        as_user("alice", group="lab"),
        as_user("gina", group="lab"),
        as_user("otto", group="ops"),
    )
    _ds(alice).create("mnist", str(shared / "mnist"), visibility="group")
    _ready(alice, "mnist")
    assert [d.owner for d in _ds(gina).list("shared")] == ["alice"]
    assert _ds(otto).list() == []
    assert _ds(gina).favourite("alice/mnist").favourite is True
    assert [d.name for d in _ds(gina).list("favourites")] == ["mnist"]
    assert _ds(alice).list("favourites") == []  # favourites are each user's own
    assert _ds(gina).favourite("alice/mnist", on=False).favourite is False
    assert _ds(gina).list("favourites") == []
    assert _ds(alice).share("mnist", "mine").visibility == "private"
    assert _ds(gina).list() == []


def _archive(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_upload_resumes_from_the_servers_offset_and_a_wrong_offset_is_told_the_right_one(
    as_user: AsUser, tmp_path: Path, settings: Settings
) -> None:
    alice = as_user("alice")
    blob = os.urandom(300_000)
    archive = _archive(tmp_path / "up.tar", {"data/blob.bin": blob, "README": b"hi\n"})
    data = archive.read_bytes()
    started = _ds(alice).start_upload("up", len(data))
    assert (started.offset, started.version, started.state) == (0, 1, "uploading")
    assert _ds(alice).put_chunk(started.id, 0, data[:100_000]).offset == 100_000
    with pytest.raises(Conflict) as wrong:
        _ds(alice).put_chunk(started.id, 50_000, data[50_000:150_000])
    assert wrong.value.extra["offset"] == 100_000
    assert "send from offset 100000" in wrong.value.detail
    with pytest.raises(Conflict, match="send the rest from offset 100000"):
        _ds(alice).commit(started.id)
    with pytest.raises(NotFound):  # another user's upload is no one else's
        _ds(as_user("bob")).upload_status(started.id)

    # The client picks up from what the server has, in small chunks.
    status = _ds(alice).send(started.id, archive, chunk=64 * 1024)
    assert status.offset == len(data)
    _ds(alice).commit(started.id)
    view = _ready(alice, "up")
    (v1,) = view.versions
    assert (v1.source, v1.files, v1.size) == ("upload", 2, len(blob) + 3)
    stored = Path(str(v1.path))
    assert (stored / "data" / "blob.bin").read_bytes() == blob
    assert stored.is_relative_to(settings.home / "datasets")
    assert list((settings.home / "datasets" / "uploads").iterdir()) == []  # archive dropped

    # A job mounts it read-only, pinned to the version, at the name it chose.
    job = alice.submit(
        {
            "command": "true",
            "mounts": {"datasets": [{"name": "u", "dataset": "up", "readonly": False}]},
        }
    )
    (mount,) = job.spec.mounts.datasets
    assert (mount.dataset, mount.path, mount.readonly) == ("alice/up@1", str(stored), True)
    assert mount.dataset_version is not None
    with pytest.raises(Conflict, match=f"mounted by job {job.id}"):
        _ds(alice).delete("up@1")
    with pytest.raises(Conflict, match=f"mounted by job {job.id}"):
        _ds(alice).delete("up")
    alice.stop(job.id)
    alice.wait(job.id, timeout=30)
    _ds(alice).delete("up")
    assert not stored.exists()
    with pytest.raises(NotFound):
        _ds(alice).get("up")


def test_the_whole_directory_upload_and_a_version_not_ready(
    as_user: AsUser, tmp_path: Path
) -> None:
    alice = as_user("alice")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "x.txt").write_text("x")
    (tree / "y.txt").write_text("yy")
    (tree / "link").symlink_to("y.txt")  # a link inside the tree is kept, not listed
    view = _ds(alice).upload("tree", tree, chunk=4096)
    view = _ready(alice, "tree")
    assert view.versions[0].files == 2
    stored = Path(str(view.versions[0].path))
    assert os.readlink(stored / "link") == "y.txt"
    assert hashlib.sha256((stored / "y.txt").read_bytes()).hexdigest()
    started = _ds(alice).start_upload("tree", 10)
    mount = {"name": "t", "dataset": "tree@2"}
    with pytest.raises(InvalidSpec, match="tree@2 is uploading, not ready"):
        alice.submit({"command": "true", "mounts": {"datasets": [mount]}})
    assert _ds(alice).get("tree").latest == 1  # latest is the newest ready one
    _ds(alice).delete("tree@2")
    with pytest.raises(NotFound):
        _ds(alice).upload_status(started.id)


def test_hostile_paths_and_archives_are_refused(
    as_user: AsUser, shared: Path, tmp_path: Path
) -> None:
    alice = as_user("alice")
    ds = _ds(alice)
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key").write_text("k")
    (shared / "escape").symlink_to(outside)
    with pytest.raises(InvalidSpec, match=r"'\.\.' are not allowed"):
        ds.create("x", f"{shared}/mnist/../../secret")
    with pytest.raises(InvalidSpec, match="is a link or not a directory"):
        ds.create("x", str(shared / "escape"))
    with pytest.raises(InvalidSpec, match="is not below a dataset root"):
        ds.create("x", str(outside))
    with pytest.raises(InvalidSpec, match="does not exist"):
        ds.create("x", str(shared / "nope"))
    for bad in ("..", "a/b", "a b", "x" * 129, "", "manifest"):
        with pytest.raises(InvalidSpec):
            ds.create(bad, str(shared / "mnist"))
    assert ds.list() == []

    with pytest.raises(TooLarge, match="GPUYARD_DATASET_UPLOAD_MAX"):
        ds.start_upload("big", UPLOAD_MAX + 1)
    started = ds.start_upload("big", 10)
    with pytest.raises(TooLarge, match="started for 10 bytes"):
        ds.put_chunk(started.id, 0, b"x" * 11)
    headers = {"Authorization": f"Bearer {alice.token}", "Content-Type": "application/octet-stream"}
    huge = httpx.put(
        f"{alice.url}/api/v1/dataset-uploads/{started.id}",
        params={"offset": 0},
        content=b"x" * (5 << 20),
        headers=headers,
    )
    assert huge.status_code == 413, huge.text

    def failed(name: str, files: dict[str, bytes], link: tuple[str, str] | None = None) -> str:
        archive = _archive(tmp_path / f"{name}.tar", files)
        if link is not None:
            with tarfile.open(archive, "a") as tar:
                info = tarfile.TarInfo(link[0])
                info.type, info.linkname = tarfile.SYMTYPE, link[1]
                tar.addfile(info)
        data = archive.read_bytes()
        upload = ds.start_upload(name, len(data))
        ds.put_chunk(upload.id, 0, data)
        ds.commit(upload.id)
        version = ds.wait(name, timeout=60, poll=0.05).versions[-1]
        assert version.state is VersionState.FAILED
        return version.error

    assert "'..'" in failed("dots", {"../../etc/evil": b"x"})
    assert "points out of the dataset" in failed("out", {"a": b"a"}, ("l", "/etc/passwd"))
    assert "points out of the dataset" in failed("up", {"a": b"a"}, ("l", "../../x"))


def test_no_roots_means_no_dataset_from_a_path(tmp_path: Path) -> None:
    from gpuyard.services.dataset_files import resolve_under_roots

    with pytest.raises(InvalidSpec, match="GPUYARD_DATASET_ROOTS"):
        resolve_under_roots(str(tmp_path), [])


class _Stop(Exception):
    pass


def test_running_the_same_upload_again_resumes_the_unfinished_one(
    as_user: AsUser, tmp_path: Path
) -> None:
    """A process that died mid-upload: the next upload of the same directory to the same
    dataset goes on from the server's offset, in the same version."""
    alice = as_user("alice")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "blob").write_bytes(os.urandom(200_000))
    settings = Settings(config_dir=tmp_path / "config")
    datasets = DatasetsClient(alice, settings=settings)
    offsets: list[int] = []

    def die(done: int, _total: int) -> None:
        offsets.append(done)
        if done >= 50_000:
            raise _Stop

    with pytest.raises(_Stop):
        datasets.upload("tree", tree, chunk=16_384, progress=die)
    sent_before = offsets[-1]
    offsets.clear()
    view = datasets.upload("tree", tree, chunk=16_384, progress=lambda d, _t: offsets.append(d))
    assert offsets[0] == sent_before + 16_384  # its first chunk went on from there
    assert [v.version for v in view.versions] == [1]
    assert _ready(alice, "tree").versions[0].size == 200_000
    assert list((tmp_path / "config" / "dataset-uploads").iterdir()) == []


def test_at_launch_a_mount_is_read_again_from_the_catalogue_and_refused_once_unshared(
    as_user: AsUser, store: Store, tmp_path: Path
) -> None:
    """The pool's launch does not trust a stored spec's path: each pinned version is read
    again by its id; one its owner may no longer see (unshared, or a forged id) is refused;
    an uploaded version's directory is the pool's alone and marked held."""
    alice, bob = as_user("alice"), as_user("bob")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "x.txt").write_text("x")
    _ds(alice).upload("up", tree, chunk=4096)
    stored = Path(str(_ready(alice, "up").versions[0].path))
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700  # nobody passes but the pool
    _ds(alice).share("up", "public")
    job = bob.submit(
        {"command": "true", "mounts": {"datasets": [{"name": "u", "dataset": "alice/up"}]}}
    )
    (mount,) = job.spec.mounts.datasets
    forged = job.spec.model_copy(
        update={
            "mounts": job.spec.mounts.model_copy(
                update={"datasets": [mount.model_copy(update={"path": "/etc"})]}
            )
        }
    )
    with store.read() as session:
        spec, held = mounts_at_launch(session, forged, "bob")
    assert [m.path for m in spec.mounts.datasets] == [str(stored)] and held == {str(stored)}
    _ds(alice).share("up", "mine")
    with store.read() as session, pytest.raises(PermissionDenied, match="no longer one bob"):
        mounts_at_launch(session, forged, "bob")
    with store.read() as session:  # its owner still mounts it
        assert mounts_at_launch(session, forged, "alice")[1] == {str(stored)}


def test_an_upload_left_unfinished_expires_with_its_version(
    as_user: AsUser, app: Any, clock: ManualClock, settings: Settings, tmp_path: Path
) -> None:
    alice = as_user("alice")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "x.txt").write_text("x")
    _ds(alice).upload("keep", tree, chunk=4096)
    _ready(alice, "keep")
    second = _ds(alice).start_upload("keep", 10)  # a new version of a ready dataset
    alone = _ds(alice).start_upload("gone", 10)  # the only version of a new one
    _ds(alice).put_chunk(alone.id, 0, b"12345")
    clock.advance(settings.dataset_upload_expiry - 5)
    fresh = _ds(alice).start_upload("fresh", 10)
    uploads = settings.home / "datasets" / "uploads"
    assert len(list(uploads.iterdir())) == 3
    clock.advance(10)
    assert app.state.services.datasets.expire_uploads() == 2
    for gone in (second, alone):
        with pytest.raises(NotFound):
            _ds(alice).upload_status(gone.id)
    with pytest.raises(NotFound):
        _ds(alice).get("gone")
    assert [v.version for v in _ds(alice).get("keep").versions] == [1]
    assert _ds(alice).upload_status(fresh.id).offset == 0
    assert [p.name for p in uploads.iterdir()] == [f"{fresh.id}.tar"]
    assert app.state.services.datasets.expire_uploads() == 0


def test_a_users_unfinished_uploads_are_capped_and_the_disk_is_checked_first(
    as_user: AsUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = as_user("alice"), as_user("bob")
    first = _ds(alice).start_upload("a", 600_000)
    with pytest.raises(
        Conflict, match=r"1 unfinished upload\(s\) .*\(GPUYARD_DATASET_UPLOAD_MAX\)"
    ):
        _ds(alice).start_upload("b", 600_000)
    _ds(bob).start_upload("b", 600_000)  # the limit is each user's
    _ds(alice).delete("a@1")
    with pytest.raises(NotFound):
        _ds(alice).upload_status(first.id)
    real = shutil.disk_usage

    def small(path: Any) -> Any:
        return real(path)._replace(free=1_500_000)

    monkeypatch.setattr(shutil, "disk_usage", small)
    # 2 x 500 kB, beside the 600 kB bob has still to send, is more than 1.5 MB free.
    with pytest.raises(StorageFull, match="needs twice that"):
        _ds(alice).start_upload("c", 500_000)
    assert _ds(alice).start_upload("c", 400_000).offset == 0


def test_uploads_started_at_once_are_capped_all_the_same(as_user: AsUser) -> None:
    alice = as_user("alice")
    barrier = threading.Barrier(6)

    def start(i: int) -> str:
        barrier.wait()
        try:
            _ds(alice).start_upload(f"d{i}", 600_000)
        except Conflict:
            return "refused"
        return "started"

    with ThreadPoolExecutor(6) as pool:
        outcomes = sorted(pool.map(start, range(6)))
    assert outcomes == ["refused"] * 5 + ["started"]
