"""The image section of a supervisor's spec and the rules the container runtime applies
before any mount (the mounts themselves: tests/integration/executors/test_worker_image.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.executors.local import container
from gpuyard.executors.local.supervisor import WorkerSpec, loads
from gpuyard.models.workerdir import ContainerRuntimeName, ImageSpec, SupervisorSpec


def test_the_jobs_env_goes_on_top_of_the_images_and_path_defaults() -> None:
    image = {"PATH": "/opt/conda/bin:/usr/bin", "LANG": "C.UTF-8", "CUDA_HOME": "/usr/cuda"}
    job = {"LANG": "en_US.UTF-8", "RANK": "0"}
    assert container.environment(image, job) == {**image, "LANG": "en_US.UTF-8", "RANK": "0"}
    assert container.environment(image, {"PATH": "/mine"})["PATH"] == "/mine"
    assert container.environment({}, {})["PATH"] == container.DEFAULT_PATH


def test_the_supervisor_reads_an_image_section_as_the_executor_writes_it() -> None:
    written = SupervisorSpec(
        job=1, attempt=0, rank=0, argv=["python", "train.py"], env={}, cwd="/", grace=1.0,
        log="/tmp/log", image=ImageSpec(rootfs="/cache/rootfs/abc", devices=["/dev/nvidia0"]),
    )  # fmt: skip
    spec = WorkerSpec(loads(written.model_dump_json()))
    assert spec.image is not None
    runtime = container.runtime_for(spec.image, None)
    assert isinstance(runtime, container.NativeRuntime)
    assert (runtime.workdir(), runtime.argv(["python", "train.py"])) == (
        "/",
        ["python", "train.py"],
    )
    assert spec.image["shm_size"] == 64 << 20 and spec.image["runtime"] == "native"


def test_a_runtime_name_is_one_of_the_supervisors() -> None:
    assert set(container.RUNTIMES) == {name.value for name in ContainerRuntimeName}


@pytest.mark.parametrize(
    "fields",
    [
        {"rootfs": "relative/rootfs"},
        {"workdir": "../up"},
        {"devices": ["/etc/shadow"]},
        {"devices": ["/dev/../etc/shadow"]},
        {"mounts": [{"source": "/data", "target": "/data/../../etc"}]},
        {"driver": ["usr/lib"]},
        {"shm_size": 1024},
    ],
)
def test_an_image_section_with_a_path_outside_its_place_is_refused(
    fields: dict[str, object],
) -> None:
    with pytest.raises(ValidationError):
        ImageSpec.model_validate({"rootfs": "/cache/rootfs/abc", **fields})
