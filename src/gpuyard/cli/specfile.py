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
_KNOWN = {
    "name",
    "command",
    "mode",
    "nodes",
    "resources",
    "priority",
    "max_runtime",
    "graceful_shutdown",
    "env",
    "workdir",
    *_RESOURCE_KEYS,
}


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
    fields = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(fields) - _KNOWN)
    if unknown:
        raise InvalidSpec(
            f"job file {path} has unknown fields: {', '.join(unknown)}; known fields are "
            f"{', '.join(sorted(_KNOWN))}"
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
    resources = dict(merged.pop("resources", None) or {})
    for key in _RESOURCE_KEYS:
        if key in merged:
            resources[key] = merged.pop(key)
    env = dict(merged.pop("env", None) or {})
    for key, value in flags.items():
        if value is None:
            continue
        if key in _RESOURCE_KEYS:
            resources[key] = value
        elif key == "env":
            env.update(value)
        else:
            merged[key] = value
    if resources:
        merged["resources"] = resources
    if env:
        merged["env"] = {str(k): str(v) for k, v in env.items()}
    if not merged.get("command"):
        raise InvalidSpec(
            "no command given: put it after `--` (gpuyard submit -- python train.py) or in the "
            "job file's `command` field"
        )
    return merged


def parse_env_flags(values: list[str]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidSpec(f"--env takes KEY=VALUE (got {item!r})")
        env[key] = value
    return env
