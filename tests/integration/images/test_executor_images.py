"""The local executor's side of jobs in images (docs/images.md, "Jobs in images"): a worker
runs in its pinned image with the job's container mounts and the variables that give way to
the image's ENV, and a launch retried after a crash adopts the worker with its image's pin, so
the pin goes when the worker ends."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.node_images import NodeImages
from gpuyard.images.access import RegistryAccess
from gpuyard.images.cache import ImageCache
from gpuyard.models.worker import Bind, WorkerImage, WorkerLaunch, WorkerState
from gpuyard.testing.conformance import Harness, cleanup
from gpuyard.testing.registry import PushedImage, TestRegistry

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="workers in an image are mounted by supervisors run by root"
)


@pytest.fixture
def harness(tmp_path: Path, registry: TestRegistry) -> Iterator[Harness]:
    access = RegistryAccess.of(registry.url, registry.ca_file, "alice", registry.users["alice"])
    assert access is not None
    cache = ImageCache(tmp_path / "images", max_bytes=1 << 30)

    def executor() -> LocalExecutor:
        return LocalExecutor(tmp_path / "home", images=NodeImages(cache, access))

    first = executor()
    harness = Harness("local", first, [n.name for n in first.nodes()], executor, lambda _node: None)
    yield harness
    cleanup(first, harness.launched)


def _in_image(request: WorkerLaunch, image: PushedImage, **kwargs: object) -> WorkerLaunch:
    pinned = f"{image.ref.repository}:{image.ref.tag}@{image.digest}"
    return WorkerLaunch(
        key=request.key,
        node=request.node,
        argv=["sh", "-c", request.argv[-1]],
        env={k: v for k, v in request.env.items() if k != "PATH"} | {"LANG": "C"},
        cwd="/",
        grace=request.grace,
        image=WorkerImage(pinned, workdir="/", **kwargs),  # type: ignore[arg-type]
    )


def test_a_retried_launch_adopts_the_worker_and_its_images_pin(
    harness: Harness, busybox_image: PushedImage, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    request = _in_image(
        harness.request(f"echo up; while [ ! -e {go} ]; do sleep 0.1; done"),
        busybox_image,
        mounts=(Bind(str(go.parent), str(go.parent), True),),
    )
    first = harness.launch(request)
    assert "up" in harness.wait_log(first, "up")
    pins = tmp_path / "images" / "pins" / busybox_image.digest[7:]
    assert os.listdir(pins) == [f"{request.key.job_id}-0-0"]
    again = harness.reopen().launch(request)  # the control plane crashed before keeping it
    assert again["pid"] == first["pid"] and again["image"] == first["image"]
    go.touch()
    assert harness.wait(again).state is WorkerState.EXITED
    assert os.listdir(pins) == []  # the adopted worker's end unpinned its image


def test_container_mounts_and_the_variables_that_give_way_to_the_images(
    harness: Harness, busybox_image: PushedImage, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("from the host\n")
    data.chmod(0o755)
    script = (
        "cat /mnt/data/f; touch /mnt/data/g 2>/dev/null || echo read-only; echo $PATH $LANG $KEEP"
    )
    request = _in_image(
        harness.request(script),
        busybox_image,
        mounts=(Bind("/mnt/data", str(data), True),),
        weak_env=frozenset({"PATH", "LANG"}),
    )
    request = dataclasses.replace(request, env={**request.env, "PATH": "/host/bin", "KEEP": "kept"})
    handle = harness.launch(request)
    assert harness.wait(handle).exit_code == 0, harness.log(handle)
    lines = harness.log(handle).splitlines()
    assert lines[:2] == ["from the host", "read-only"]
    # PATH gave way to the image's; LANG stayed (the image sets none), as did KEEP (not weak).
    assert lines[2] == "/bin C kept"
