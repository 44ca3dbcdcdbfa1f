"""pyxis's container options (``--container-image``, ``-mounts``, ``-workdir``, ``-env``), as
NVIDIA clusters' Slurm users write them, read into a job spec's image fields (docs/slurm.md,
"Containers"). Pure: option values in, spec fields out.

As with ``sbatch --container-image`` under pyxis, the batch script itself runs in the image."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from gpuyard.slurm.options import OptionError

__all__ = ["container_fields", "image_reference"]

_MOUNT_FLAGS = {"ro": True, "rw": False}
_IGNORED_FLAGS = frozenset({"private", "rprivate", "slave", "rslave", "shared", "rshared"})
"""Propagation flags: every bind here is private to the worker's mount namespace."""

_USER = re.compile(r"^[^/#:@]+@(?!sha256:)")


def image_reference(text: str) -> str:
    """pyxis's ``[USER@][REGISTRY#]IMAGE[:TAG]`` as a registry reference (``REGISTRY/IMAGE``);
    a squashfs file or a credential in the reference is refused with what to do instead."""
    value = text.strip()
    if value.startswith(("/", "./", "../")) or value.endswith((".sqsh", ".squashfs")):
        raise OptionError(
            f"--container-image={text}: image files are not run directly here; push the image "
            "to the pool's registry (`gpuyard images push`) and name it"
        )
    if _USER.match(value):
        raise OptionError(
            f"--container-image={text}: give no user in the image's name; the pool pulls with "
            "its own credentials (docs/images.md)"
        )
    if value.startswith("docker://"):
        value = value[len("docker://") :]
    registry, hash_sign, image = value.partition("#")
    return f"{registry}/{image}" if hash_sign else value


def _mounts(text: str, cwd: str) -> list[dict[str, Any]]:
    """``SRC[:DST[:FLAGS]][,...]``, FLAGS ``+``-separated (``ro``, ``rw``, propagation)."""
    mounts = []
    for item in text.split(","):
        if not item.strip():
            continue
        parts = item.strip().split(":")
        if len(parts) > 3:
            raise OptionError(f"--container-mounts: {item!r} is not SRC[:DST[:FLAGS]]")
        source = os.path.normpath(os.path.join(cwd, parts[0]))
        target = parts[1] if len(parts) > 1 and parts[1] else source
        readonly = False
        for flag in (parts[2] if len(parts) > 2 else "").split("+"):
            if flag in _MOUNT_FLAGS:
                readonly = _MOUNT_FLAGS[flag]
            elif flag and flag not in _IGNORED_FLAGS:
                raise OptionError(
                    f"--container-mounts: unknown mount flag {flag!r} in {item!r} (ro, rw)"
                )
        mounts.append({"source": source, "target": target, "readonly": readonly})
    return mounts


def container_fields(values: Mapping[str, str], cwd: str) -> dict[str, Any]:
    """The spec's image fields that the options in ``values`` ask for (none without
    ``--container-image``, and then the other container options are refused)."""
    if "container-image" not in values:
        given = sorted(n for n in values if n in ("container-mounts", "container-workdir"))
        if given or "container-env" in values:
            name = given[0] if given else "container-env"
            raise OptionError(f"--{name} needs --container-image: name the image to run in")
        return {}
    fields: dict[str, Any] = {"image": image_reference(values["container-image"])}
    if values.get("container-mounts"):
        fields["container_mounts"] = _mounts(values["container-mounts"], cwd)
    if values.get("container-workdir"):
        fields["workdir"] = values["container-workdir"]
    names = [n.strip() for n in values.get("container-env", "").split(",") if n.strip()]
    fields["env_over_image"] = names
    return fields
