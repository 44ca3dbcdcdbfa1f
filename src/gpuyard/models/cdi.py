"""What a GPU job in an image needs of the host's driver, as a CDI spec lists it (the Container
Device Interface; nvidia-container-toolkit's ``nvidia-ctk cdi generate`` writes one): the
driver's user-space libraries and tools to mount, the links its hooks would make, and the
device files (docs/images.md, "GPUs in an image"). Pure: the spec's data in, edits out.

Only the parts gpuyard applies itself are read: ``mounts``, ``deviceNodes`` and the
``create-symlinks`` hook's ``--link`` pairs. Other hooks are not run (they would run the host's
tools on the image's files as root); their names are kept so the node can say what it skipped.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CDI_DIRS", "CdiEdits", "CdiError", "CdiSpec", "parse_cdi"]

GPU_KIND = "nvidia.com/gpu"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
"""Where nvidia-container-toolkit writes its CDI spec (``nvidia-ctk cdi generate``)."""


class CdiError(ValueError):
    """A CDI spec gpuyard cannot use, saying where."""


@dataclass(frozen=True)
class CdiEdits:
    """Host paths for a worker's image: each mount is (host path, path in the image)."""

    mounts: tuple[tuple[str, str], ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    """(target, link): the link made in the image, pointing at target."""
    device_nodes: tuple[str, ...] = ()
    skipped_hooks: tuple[str, ...] = ()

    def __add__(self, other: CdiEdits) -> CdiEdits:
        def merged(a: Sequence[Any], b: Sequence[Any]) -> tuple[Any, ...]:
            return tuple(dict.fromkeys([*a, *b]))

        return CdiEdits(
            merged(self.mounts, other.mounts),
            merged(self.links, other.links),
            merged(self.device_nodes, other.device_nodes),
            merged(self.skipped_hooks, other.skipped_hooks),
        )


@dataclass(frozen=True)
class CdiSpec:
    """The spec's edits for every container, and per device (by name: an index, a UUID)."""

    common: CdiEdits = CdiEdits()
    devices: Mapping[str, CdiEdits] = field(default_factory=dict)

    def edits_for(self, devices: Iterable[str]) -> CdiEdits:
        """The edits of a worker given ``devices`` (names the spec may not know are skipped:
        the node's own device list decides which GPUs a worker has)."""
        edits = self.common
        for name in devices:
            if name in self.devices:
                edits = edits + self.devices[name]
        return edits


def _path(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or ".." in value.split("/"):
        raise CdiError(f"{where}: {value!r} is not an absolute path without '..'")
    return posixpath.normpath(value)


def _links(args: Sequence[Any], where: str) -> list[tuple[str, str]]:
    links = []
    for flag, value in itertools.pairwise(args):
        if flag == "--link":
            target, sep, link = str(value).partition("::")
            if not sep or not target:
                raise CdiError(f"{where}: --link {value!r} is not TARGET::LINK")
            links.append((target, _path(link, where)))
    return links


def _edits(data: Any, where: str) -> CdiEdits:
    if data is None:
        return CdiEdits()
    if not isinstance(data, Mapping):
        raise CdiError(f"{where}: containerEdits is not a mapping")
    mounts = [
        (_path(m.get("hostPath"), where), _path(m.get("containerPath"), where))
        for m in data.get("mounts") or []
    ]
    nodes = [_path(n.get("path"), where) for n in data.get("deviceNodes") or []]
    links: list[tuple[str, str]] = []
    skipped: list[str] = []
    for hook in data.get("hooks") or []:
        args = [str(a) for a in hook.get("args") or []]
        if "create-symlinks" in args:
            links += _links(args, where)
        else:
            skipped.append(" ".join(args[1:4]) or str(hook.get("path")))
    return CdiEdits(tuple(mounts), tuple(links), tuple(nodes), tuple(skipped))


def parse_cdi(data: Any) -> CdiSpec:
    """A CDI spec of NVIDIA GPUs (``kind: nvidia.com/gpu``), as loaded from its YAML or JSON."""
    if not isinstance(data, Mapping):
        raise CdiError("a CDI spec is a mapping")
    if data.get("kind") != GPU_KIND:
        raise CdiError(f"kind is {data.get('kind')!r}, not {GPU_KIND}")
    try:
        devices = {
            str(d["name"]): _edits(d.get("containerEdits"), f"device {d['name']}")
            for d in data.get("devices") or []
        }
        return CdiSpec(_edits(data.get("containerEdits"), "containerEdits"), devices)
    except (AttributeError, KeyError, TypeError) as exc:
        raise CdiError(f"malformed CDI spec: {exc!r}") from None
