"""Build a job spec from a job file (``-f job.yaml``) and command-line flags.

A job file holds the same fields as ``gpuyard submit``'s flags, either flat (``gpus: 2``) or as
the API's nested ``resources:`` block; ``command`` is a string or a list of words. Flags given on
the command line win over the file.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gpuyard.errors import InvalidSpec

__all__ = ["build_spec", "load_job_file"]

_RESOURCE_KEYS = ("gpus", "cpus", "memory")
_MOUNT_KEYS = ("algorithm", "datasets", "models", "outputs", "volumes")


def load_job_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidSpec(f"job file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise InvalidSpec(f"job file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidSpec(f"job file {path} must be a mapping of fields (name, command, …)")
    from gpuyard.models import JobSpec

    known = set(JobSpec.model_fields) | set(_RESOURCE_KEYS) | set(_MOUNT_KEYS)
    fields = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidSpec(
            f"job file {path} has unknown fields: {', '.join(unknown)}; known fields are "
            f"{', '.join(sorted(known))}"
        )
    return fields


def command_text(words: list[str]) -> str:
    """One argument is taken as a command line; several are quoted word by word."""
    if len(words) == 1:
        return words[0]
    return shlex.join(words)


def build_spec(file_fields: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """Merge file fields and flags (flags win) into the API's JobSpec shape."""
    merged = dict(file_fields)
    if isinstance(merged.get("command"), list):
        merged["command"] = command_text([str(w) for w in merged["command"]])
    resources = _gather(merged, "resources", _RESOURCE_KEYS)
    mounts = _gather(merged, "mounts", _MOUNT_KEYS)
    env = {str(k): str(v) for k, v in (merged.pop("env", None) or {}).items()}
    for key, value in flags.items():
        if value is None:
            continue
        if key in _RESOURCE_KEYS:
            resources[key] = value
        elif key in _MOUNT_KEYS:
            mounts[key] = [*mounts.get(key, []), *value] if isinstance(value, list) else value
        elif key == "env":
            env.update(value)
        elif key == "tasks":
            merged["tasks"] = [*merged.get("tasks", []), *value]
            merged.setdefault("type", "batch")
        else:
            merged[key] = value
    for key, block in (("resources", resources), ("mounts", mounts), ("env", env)):
        if block:
            merged[key] = block
    if not merged.get("command") and not merged.get("tasks"):
        raise InvalidSpec(
            "no command given: put it after `--` (gpuyard submit -- python train.py) or in the "
            "job file's `command` field (or give a batch job's sub-tasks with --task)"
        )
    return merged


def _gather(fields: dict[str, Any], block: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A nested block (``resources:``) plus its keys given flat at the top level."""
    nested = dict(fields.pop(block, None) or {})
    for key in keys:
        if key in fields:
            nested[key] = fields.pop(key)
    return nested


def parse_mount_flags(values: list[str], *, flag: str) -> list[dict[str, object]]:
    """``NAME=PATH`` (read-only) or ``NAME=PATH:rw``."""
    mounts: list[dict[str, object]] = []
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InvalidSpec(f"{flag} takes NAME=/absolute/path[:rw] (got {item!r})")
        writable = path.endswith(":rw")
        mounts.append({"name": name, "path": path.removesuffix(":rw"), "readonly": not writable})
    return mounts


def parse_env_flags(values: list[str]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidSpec(f"--env takes KEY=VALUE (got {item!r})")
        env[key] = value
    return env
