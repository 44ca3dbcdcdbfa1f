"""The local executor's side of jobs in images (docs/images.md, "Jobs in images"): a worker
runs in its pinned image with the job's container mounts and the variables that give way to
the image's ENV, and a launch retried after a crash adopts the worker with its image's pin, so
the pin goes when the worker ends."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.gpumeter import NoGpus
from gpuyard.executors.local.machine import GpuDevice, Machine
from gpuyard.executors.local.node_images import NodeImages, load_cdi
from gpuyard.images.access import RegistryAccess
from gpuyard.images.cache import ImageCache
from gpuyard.models.cdi import parse_cdi
from gpuyard.models.worker import Bind, WorkerImage, WorkerLaunch, WorkerState
from gpuyard.testing.conformance import Harness, cleanup
from gpuyard.testing.registry import PushedImage, TestRegistry

TWO_GPUS = Machine(
    hostname="local",
    cpus=4,
    memory=8 << 30,
    gpus=(GpuDevice(0, "Fake GPU", "GPU-aaaa"), GpuDevice(1, "Fake GPU", "GPU-bbbb")),
)
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


@pytest.fixture
def fake_dev() -> Iterator[Path]:
    """Two fake GPUs' device files and the shared ones, below /dev (where a worker in an image
    gets its devices), as regular files standing in for them."""
    dev = Path(tempfile.mkdtemp(prefix="gpuyard-test-", dir="/dev"))
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text(f"{name}\n")
        (dev / name).chmod(0o666)
    yield dev
    shutil.rmtree(dev, ignore_errors=True)


def test_a_gpu_worker_gets_the_driver_its_nodes_cdi_spec_lists_and_only_its_gpus(
    registry: TestRegistry, busybox_image: PushedImage, tmp_path: Path, fake_dev: Path
) -> None:
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.535").write_text("the driver\n")
    (driver / "nvidia-smi").write_text("a tool\n")
    lib = "/usr/lib/x86_64-linux-gnu"
    cdi = parse_cdi(
        {
            "kind": "nvidia.com/gpu",
            "devices": [
                {"name": str(i), "containerEdits": {"deviceNodes": [{"path": node}]}}
                for i, node in enumerate((f"{fake_dev}/nvidia0", f"{fake_dev}/nvidia1"))
            ],
            "containerEdits": {
                "mounts": [
                    {"hostPath": f"{driver}/libcuda.so.535",
                     "containerPath": f"{lib}/libcuda.so.535"},
                    {"hostPath": f"{driver}/nvidia-smi", "containerPath": f"{driver}/nvidia-smi"},
                ],
                "hooks": [{"args": ["nvidia-ctk", "hook", "create-symlinks", "--link",
                                    f"libcuda.so.535::{lib}/libcuda.so.1"]}],
            },
        }
    )  # fmt: skip
    access = RegistryAccess.of(registry.url, registry.ca_file, "alice", registry.users["alice"])
    assert access is not None
    executor = LocalExecutor(
        tmp_path / "home",
        machine=TWO_GPUS,
        gpu_meter=NoGpus(),
        gpu_device_files=f"{fake_dev}/nvidia{{index}}",
        gpu_shared_files=(f"{fake_dev}/nvidiactl",),
        images=NodeImages(ImageCache(tmp_path / "images", max_bytes=1 << 30), access, cdi),
    )
    node = executor.nodes()[0].name
    harness = Harness("local", executor, [node], lambda: executor, lambda _node: None)
    probe = (
        f"for f in nvidia0 nvidia1 nvidiactl; do cat {fake_dev}/$f 2>/dev/null || echo no $f; "
        f"done; cat {lib}/libcuda.so.1 {driver}/nvidia-smi; echo $CUDA_VISIBLE_DEVICES; "
        f"{{ echo x > {lib}/libcuda.so.535; }} 2>/dev/null || echo read-only"
    )
    request = harness.request(probe)
    request = dataclasses.replace(request, env={**request.env, "CUDA_VISIBLE_DEVICES": "1"})
    try:
        handle = harness.launch(_in_image(request, busybox_image))
        assert harness.wait(handle).exit_code == 0, harness.log(handle)
        assert harness.log(handle).splitlines() == [
            "no nvidia0",  # not given: not there at all
            "nvidia1",
            "nvidiactl",
            "the driver",  # through the link the CDI spec's hook names
            "a tool",
            "0",  # numbered from 0 inside
            "read-only",
        ]
        # A worker without GPUs gets none of the driver.
        bare = harness.launch(
            _in_image(harness.request(f"ls {lib} 2>&1; ls {fake_dev}"), busybox_image)
        )
        harness.wait(bare)
        assert "libcuda" not in harness.log(bare) and "nvidia" not in harness.log(bare)
    finally:
        cleanup(executor, harness.launched)


def test_a_node_reads_the_first_usable_cdi_spec_of_its_gpus(tmp_path: Path) -> None:
    (tmp_path / "a-broken.yaml").write_text("kind: [")
    (tmp_path / "b-fpga.json").write_text('{"kind": "vendor.com/fpga"}')
    (tmp_path / "c-nvidia.yaml").write_text(
        "kind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n"
    )
    (tmp_path / "notes.txt").write_text("not a spec")
    spec = load_cdi([str(tmp_path / "missing"), str(tmp_path)])
    assert spec is not None and spec.common.device_nodes == ("/dev/nvidiactl",)
    assert load_cdi([str(tmp_path / "missing")]) is None
