"""Build a job spec from a job file (``-f job.yaml``) and command-line flags.

A job file holds the same fields as ``gpuyard submit``'s flags, either flat (``gpus: 2``) or as
the API's nested ``resources:`` block; ``command`` is a string or a list of words; ``nodes`` is a
number or an elastic range ``2..4`` (``min_nodes: 2``, ``nodes: 4``); ``driver`` stands for
``driver_version``. Flags given on the command line win over the file.

``export`` (``--export``, a job file's ``export:``, a string or a list of entries) says what
the job takes from the submitting shell's environment: Slurm's rule
(:mod:`gpuyard.env_export`), by default ``ALL`` where the job runs on this machine's software
and ``NONE`` in an image (the image's environment is the job's). What is captured goes into
the spec's ``env`` under the job file's ``env`` and ``--env``, which win.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuyard.errors import InvalidSpec

__all__ = ["build_spec", "exported_env", "load_job_file", "parse_alternative", "parse_nodes"]

_RESOURCE_KEYS = ("gpus", "cpus", "memory")
_MOUNT_KEYS = ("algorithm", "datasets", "models", "outputs", "volumes")
_ALIASES = {"driver": "driver_version"}
_CLI_ONLY = ("export",)
"""Job-file fields the CLI acts on before the spec is sent (the API has no such field)."""


MAX_JOB_FILE = 1024 * 1024
"""Bytes a job file may have."""


def load_job_file(path: Path) -> dict[str, Any]:
    """The fields of a job file. Read strictly: no aliases or anchors (a few lines of them can
    expand to gigabytes), no key given twice (which one would win is a guess), and env values
    exactly as written (YAML would read ``yes`` as true and ``1.10`` as 1.1)."""
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise InvalidSpec(f"job file {path} must be a mapping of fields (name, command, …)")
    from gpuyard.models import JobSpec

    known = set(JobSpec.model_fields) | set(_RESOURCE_KEYS) | set(_MOUNT_KEYS) | set(_ALIASES)
    known |= set(_CLI_ONLY)
    fields = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidSpec(
            f"job file {path} has unknown fields: {', '.join(unknown)}; known fields are "
            f"{', '.join(sorted(known))}"
        )
    for alias, field in _ALIASES.items():
        if alias in fields:
            if field in fields:
                raise InvalidSpec(f"job file {path} gives both {alias} and {field}; keep one")
            fields[field] = fields.pop(alias)
    return fields


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise InvalidSpec(f"job file {path} does not exist") from None
    except OSError as exc:
        raise InvalidSpec(f"cannot read job file {path}: {exc.strerror}") from None
    if len(text) > MAX_JOB_FILE:
        raise InvalidSpec(f"job file {path} is {len(text)} bytes; the limit is {MAX_JOB_FILE}")
    try:
        loader = _strict_loader()(text.decode("utf-8"))
        try:
            node = loader.get_single_node()
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except UnicodeDecodeError:
        raise InvalidSpec(f"job file {path} is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise InvalidSpec(f"job file {path} is not valid YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("env"), dict):
        data["env"] = _env_as_written(path, node)
    return data


def _env_as_written(path: Path, node: Any) -> dict[str, str]:
    """The top-level ``env`` mapping with its keys and values as written: YAML would read
    ``yes`` as true, ``1.10`` as 1.1 and ``007`` as 7, in keys (``OFF:``) as in values."""
    import yaml

    for key, value in node.value:
        if key.value != "env" or not isinstance(value, yaml.MappingNode):
            continue
        env = {}
        for k, v in value.value:
            if not isinstance(k, yaml.ScalarNode):
                raise InvalidSpec(f"job file {path}: env names must be text")
            if not isinstance(v, yaml.ScalarNode):
                raise InvalidSpec(f"job file {path}: env.{k.value} must be text, not a list or map")
            env[str(k.value)] = str(v.value)
        return env
    return {}


def _strict_loader() -> type:
    """yaml's SafeLoader, refusing aliases and keys given twice."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"aliases (*{event.anchor}) are not allowed in a job file; write the value out",
                    event.start_mark,
                )
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{key!r} is given twice; keep one", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def exported_env(
    file_fields: dict[str, Any], flag: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """What the job takes from ``environ`` (the submitting shell's): ``flag`` (``--export``)
    or else the job file's ``export`` (taken out of ``file_fields``), by default ``ALL``, or
    ``NONE`` when the job names an image."""
    from gpuyard.env_export import ExportError, exported_environment

    given = file_fields.pop("export", None)
    if isinstance(given, list) and all(isinstance(item, str) for item in given):
        given = ",".join(given)
    if given is not None and not isinstance(given, str):
        raise InvalidSpec("export takes ALL, NONE or a list of NAME and NAME=VALUE entries")
    export = flag if flag is not None else given
    if export is None:
        export = "NONE" if file_fields.get("image") is not None else "ALL"
    try:
        return exported_environment(environ, export)
    except ExportError as exc:
        raise InvalidSpec(str(exc)) from None


def command_text(words: list[str]) -> str:
    """One argument is taken as a command line; several are quoted word by word."""
    if len(words) == 1:
        return words[0]
    return shlex.join(words)


def build_spec(
    file_fields: dict[str, Any],
    flags: dict[str, Any],
    *,
    exported: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Merge file fields and flags (flags win) into the API's JobSpec shape; ``exported``
    (:func:`exported_env`) goes under the file's and the flags' ``env``."""
    merged = dict(file_fields)
    merged.pop("export", None)
    if isinstance(merged.get("command"), list):
        merged["command"] = command_text([str(w) for w in merged["command"]])
    resources = _gather(merged, "resources", _RESOURCE_KEYS)
    mounts = _gather(merged, "mounts", _MOUNT_KEYS)
    env = dict(exported or {})
    env.update({str(k): str(v) for k, v in (merged.pop("env", None) or {}).items()})
    for key, value in flags.items():
        if value is None:
            continue
        if key in _RESOURCE_KEYS:
            resources[key] = value
        elif key in _MOUNT_KEYS:
            mounts[key] = [*mounts.get(key, []), *value] if isinstance(value, list) else value
        elif key == "env":
            env.update(value)
        elif key == "fault_tolerance":
            block = merged.get("fault_tolerance")
            merged[key] = {**(block if isinstance(block, dict) else {}), **value}
        elif key == "tasks":
            merged["tasks"] = [*merged.get("tasks", []), *value]
            merged.setdefault("type", "batch")
        else:
            merged[key] = value
    for key, block in (("resources", resources), ("mounts", mounts), ("env", env)):
        if block:
            merged[key] = block
    _split_node_range(merged)
    if not merged.get("command") and not merged.get("tasks") and not merged.get("service"):
        raise InvalidSpec(
            "no command given: put it after `--` (gpuyard submit -- python train.py) or in the "
            "job file's `command` field (or give a batch job's sub-tasks with --task)"
        )
    return merged


def _split_node_range(fields: dict[str, Any]) -> None:
    if isinstance(fields.get("nodes"), str):
        size, least = parse_nodes(fields["nodes"])
        fields["nodes"] = size
        if least is not None:
            fields["min_nodes"] = least


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


def parse_dataset_flags(values: list[str], *, prepare: bool = False) -> list[dict[str, object]]:
    """``--dataset``: ``NAME=PATH[:rw]`` (a directory), or a dataset of the catalogue,
    ``[OWNER/]NAME[@VERSION][:MOUNT]``, mounted read-only at workspace/dataset/MOUNT
    (default: its name); ``prepare`` (``--prepare-data``): each dataset of the catalogue
    copied to its nodes first (a path given with it is refused by the spec's rule)."""
    mounts: list[dict[str, object]] = []
    for item in values:
        if "=" in item:
            mounts += parse_mount_flags([item], flag="--dataset")
            continue
        ref, _, mount = item.partition(":")
        name = ref.partition("@")[0].rpartition("/")[2]
        if not name:
            raise InvalidSpec(
                f"--dataset takes NAME=/absolute/path[:rw] or a dataset, "
                f"[OWNER/]NAME[@VERSION][:MOUNT] (got {item!r})"
            )
        mounts.append({"name": mount or name, "dataset": ref})
    if prepare:
        mounts = [{**m, "prepare": True} for m in mounts]
    return mounts


def parse_env_flags(values: list[str]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidSpec(f"--env takes KEY=VALUE (got {item!r})")
        env[key] = value
    return env


def parse_nodes(text: str) -> tuple[int, int | None]:
    """``4`` -> (4, None); the elastic ``2..4`` -> (4, 2): at least 2 nodes, at most 4."""
    low, sep, high = text.strip().partition("..")
    try:
        if not sep:
            return int(low), None
        least, most = int(low), int(high)
    except ValueError:
        raise InvalidSpec(
            f"nodes takes a number (4) or an elastic range MIN..MAX (2..4); got {text!r}"
        ) from None
    if least > most:
        raise InvalidSpec(f"nodes {text}: the range is MIN..MAX, and {least} is more than {most}")
    return most, least


def parse_alternative(text: str) -> dict[str, str]:
    """``gpus=4,cpus=8,memory=32G``: one alternative per-node spec (the API checks values)."""
    spec: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in _RESOURCE_KEYS or not value:
            raise InvalidSpec(
                f"--alternative takes gpus=N,cpus=N,memory=SIZE (any of them); got {text!r}"
            )
        spec[key] = value
    return spec


def parse_after(text: str) -> dict[str, Any]:
    """``12`` or ``12:ended`` -> a dependency of the spec (``after``)."""
    job, _, when = text.strip().partition(":")
    if not job.isdigit():
        raise InvalidSpec(
            f"--after {text!r}: give a job id, optionally with when it may start: 12, "
            "12:started, 12:ended, 12:succeeded or 12:failed"
        )
    return {"job": int(job), **({"when": when} if when else {})}
