"""A node's CDI spec of its GPUs, read into what a GPU job in an image is given."""

from __future__ import annotations

from typing import Any

import pytest

from gpuyard.models.cdi import CdiError, parse_cdi

LIB = "/usr/lib/x86_64-linux-gnu"
SPEC: dict[str, Any] = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}},
        {"name": "GPU-aaaa", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
    ],
    "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-ctk",
                "args": [
                    "nvidia-ctk", "hook", "create-symlinks",
                    "--link", f"libcuda.so.535.129.03::{LIB}/libcuda.so.1",
                    "--link", f"libcuda.so.1::{LIB}/libcuda.so",
                ],
            },
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-ctk",
                "args": ["nvidia-ctk", "hook", "update-ldcache", "--folder", LIB],
            },
        ],
        "mounts": [
            {"hostPath": f"{LIB}/libcuda.so.535.129.03",
             "containerPath": f"{LIB}/libcuda.so.535.129.03", "options": ["ro", "nosuid"]},
            {"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"},
        ],
    },
}  # fmt: skip


def test_a_workers_edits_are_the_common_ones_and_its_own_gpus() -> None:
    spec = parse_cdi(SPEC)
    edits = spec.edits_for(["1"])
    assert edits.device_nodes == ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1")
    assert edits.mounts == (
        (f"{LIB}/libcuda.so.535.129.03", f"{LIB}/libcuda.so.535.129.03"),
        ("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
    )
    assert edits.links == (
        ("libcuda.so.535.129.03", f"{LIB}/libcuda.so.1"),
        ("libcuda.so.1", f"{LIB}/libcuda.so"),
    )
    assert edits.skipped_hooks == ("hook update-ldcache --folder",)
    # By UUID as well as by index; a GPU the spec does not know adds nothing; no duplicates.
    both = spec.edits_for(["GPU-aaaa", "0", "7"])
    assert both.device_nodes == ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"kind": "vendor.com/fpga"}, "not nvidia.com/gpu"),
        ({"containerEdits": {"mounts": [{"hostPath": "lib", "containerPath": "/x"}]}}, "absolute"),
        ({"containerEdits": {"mounts": [{"hostPath": "/a/../b", "containerPath": "/x"}]}}, ".."),
        ({"containerEdits": {"deviceNodes": [{"path": 3}]}}, "absolute"),
        ({"containerEdits": {"hooks": [{"args": ["c", "create-symlinks", "--link", "x"]}]}}, "::"),
        ({"devices": [{"containerEdits": {}}]}, "malformed"),
        ({"containerEdits": []}, "not a mapping"),
    ],
)
def test_a_spec_gpuyard_cannot_use_is_refused_saying_where(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(CdiError, match=says):
        parse_cdi({**SPEC, **change})
    with pytest.raises(CdiError):
        parse_cdi(["not", "a", "mapping"])
