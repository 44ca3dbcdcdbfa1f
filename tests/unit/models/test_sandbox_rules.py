"""A worker's sandbox rules (models/sandbox.py): default memory, hidden GPU device files,
what is mounted back into its private /tmp."""

from __future__ import annotations

import pytest

from gpuyard.models.sandbox import (
    hidden_gpu_files,
    kept_paths,
    memory_default,
    parse_memory_default,
    renumbered_devices,
)

GIB = 1 << 30
SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm")


@pytest.mark.parametrize(
    ("setting", "node", "limit"),
    [
        ("50%", 16 * GIB, 8 * GIB),
        ("100%", 16 * GIB, 16 * GIB),
        ("4G", 16 * GIB, 4 * GIB),
        ("0", 16 * GIB, 0),
        ("50%", 0, 0),  # a node of unknown memory: no limit rather than a nonsense one
    ],
)
def test_the_default_memory_limit(setting: str, node: int, limit: int) -> None:
    assert memory_default(setting, node) == limit


@pytest.mark.parametrize("bad", ["0%", "150%", "half", "-1G", "%"])
def test_a_bad_memory_default_says_what_to_write(bad: str) -> None:
    with pytest.raises(ValueError, match=r"50%"):
        parse_memory_default(bad)


@pytest.mark.parametrize(
    ("given", "hidden"),
    [
        ([0, 1, 2, 3], []),
        ([2], ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"]),
        ([], ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", *SHARED]),
    ],
)
def test_a_worker_sees_only_its_gpus_device_files(given: list[int], hidden: list[str]) -> None:
    assert hidden_gpu_files("/dev/nvidia{index}", 4, given, SHARED) == hidden


def test_cuda_numbers_the_gpus_a_worker_can_open_from_zero() -> None:
    assert renumbered_devices(["2", "5"]) == "0,1"
    assert renumbered_devices(["GPU-aaaa"]) == "GPU-aaaa"


def test_only_paths_below_a_private_directory_are_kept_and_each_once() -> None:
    private = ["/tmp", "/dev/shm"]
    wanted = ["/tmp/pool", "/tmp/pool/jobs/1", "/var/lib/gpuyard", "/tmpfoo", "/tmp/project"]
    assert kept_paths(private, wanted) == ["/tmp/pool", "/tmp/project"]


def test_the_settings_read_the_allowlist_and_the_memory_default_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import ValidationError

    from gpuyard.settings import Settings

    monkeypatch.setenv("GPUYARD_JOB_ENV_ALLOW", "PYTHONPATH, SITE_*")
    monkeypatch.setenv("GPUYARD_GPU_SHARED_DEVICE_FILES", "/dev/nvidiactl")
    monkeypatch.setenv("GPUYARD_DEFAULT_MEMORY", "25%")
    settings = Settings()
    assert settings.job_env_allow == ("PYTHONPATH", "SITE_*")
    assert settings.gpu_shared_device_files == ("/dev/nvidiactl",)
    assert settings.default_memory == "25%"
    assert settings.private_tmp is True
    monkeypatch.setenv("GPUYARD_DEFAULT_MEMORY", "lots")
    with pytest.raises(ValidationError, match="not a memory default"):
        Settings()
