"""The job form: its fields to a spec, a spec back to its fields (clone), and what is wrong.

The form posts plain ``application/x-www-form-urlencoded`` fields (it works without
JavaScript); :func:`spec_data` turns them into the dict a :class:`~gpuyard.models.JobSpec` is
validated from, leaving out what was left empty so that the spec's own defaults apply. The
rules are the spec's (the same pydantic model the API validates): :func:`check_form` returns
its errors keyed by where they are in the spec (``resources.gpus``), which is what each input
of the form names in its ``data-loc``.

Repeated rows (mounts, alternative specs) are parallel lists of fields; a row's read-only
switch is a checkbox whose value is the row's index (an unchecked box sends nothing, so a
plain list of checkbox values could not say which row it belonged to).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from gpuyard.models import JobSpec
from gpuyard.models.faults import FaultTolerance

__all__ = [
    "MOUNT_KINDS",
    "ROWS",
    "FormCheck",
    "FormFields",
    "check_form",
    "form_values",
    "posted_values",
    "spec_data",
    "spec_yaml",
]

FormFields = Mapping[str, Sequence[str]]
"""The posted fields: each name with all its values, in order."""

MOUNT_KINDS = ("datasets", "models", "volumes")
ROWS = 3
"""Empty rows the form offers for each kind of mount and for alternative specs."""

_PLAIN = (
    "name",
    "mode",
    "mpi",
    "launcher",
    "priority",
    "access",
    "workdir",
    "driver_version",
    "image",
    "shm_size",
)
_NUMBERS = ("nodes", "min_nodes", "parameter_servers")
_DURATIONS = ("max_runtime", "graceful_shutdown")


def _one(form: FormFields, name: str) -> str:
    values = form.get(name) or ()
    return values[-1].strip() if values else ""


def _many(form: FormFields, name: str) -> list[str]:
    return [v.strip() for v in form.get(name) or ()]


def _words(text: str) -> list[str]:
    return [w for w in text.replace(",", " ").split() if w]


def _checked(form: FormFields, name: str) -> bool:
    return _one(form, name) in ("on", "true", "1", "yes")


def spec_data(form: FormFields) -> dict[str, Any]:
    """The spec the form describes, as the dict the API would be sent."""
    data: dict[str, Any] = {}
    for name in (*_PLAIN, *_NUMBERS, *_DURATIONS, "pool"):
        value = _one(form, name)
        if value:
            data[name] = value
    data["type"] = _one(form, "type") or "regular"
    if data["type"] == "batch":
        data["tasks"] = [
            {"command": line.strip()} for line in _one(form, "tasks").splitlines() if line.strip()
        ]
    else:
        data["command"] = _one(form, "command")
    parts: dict[str, Any] = {
        "resources": {k: _one(form, k) for k in ("gpus", "cpus", "memory") if _one(form, k)},
        "alternatives": _alternatives(form),
        "node_names": _words(_one(form, "node_names")),
        "exclude_nodes": _words(_one(form, "exclude_nodes")),
        "env": _env(_one(form, "env")),
        "mounts": _mounts(form),
        "after": _after(_one(form, "after")),
        "hold": _checked(form, "hold"),
        "fault_tolerance": _fault_tolerance(form) if _checked(form, "ft_on") else None,
    }
    data.update((name, value) for name, value in parts.items() if value)
    node_use = _NODE_USE.get(_one(form, "exclusive"))
    if node_use is not None:  # false is a choice too
        data["exclusive"] = node_use
    return data


_NODE_USE = {"exclusive": True, "shared": False}
"""The form's choice of `exclusive` ("default": the spec's null, left out)."""
_NODE_USE_NAME = {value: name for name, value in _NODE_USE.items()}


def _alternatives(form: FormFields) -> list[dict[str, str]]:
    rows = zip(
        _many(form, "alt_gpus"), _many(form, "alt_cpus"), _many(form, "alt_memory"), strict=False
    )
    found = []
    for gpus, cpus, memory in rows:
        row = {k: v for k, v in (("gpus", gpus), ("cpus", cpus), ("memory", memory)) if v}
        if row:
            found.append(row)
    return found


def _env(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        # A line without '=' is kept as a name with no value: the spec's check names it.
        env[key.strip()] = value if sep else ""
    return env


def _mounts(form: FormFields) -> dict[str, Any]:
    mounts: dict[str, Any] = {}
    algorithm = _one(form, "algorithm")
    if algorithm:
        mounts["algorithm"] = algorithm
        mounts["algorithm_readonly"] = _checked(form, "algorithm_readonly")
    outputs = _one(form, "outputs")
    if outputs:
        mounts["outputs"] = outputs
    for kind in MOUNT_KINDS:
        readonly = set(_many(form, f"{kind}_ro"))
        rows = []
        names = _many(form, f"{kind}_name")
        paths = _many(form, f"{kind}_path")
        for i, (name, path) in enumerate(zip(names, paths, strict=False)):
            if name or path:
                rows.append({"name": name, "path": path, "readonly": str(i) in readonly})
        if rows:
            mounts[kind] = rows
    return mounts


def _after(text: str) -> list[dict[str, str]]:
    found = []
    for word in _words(text):
        job, _, when = word.partition(":")
        found.append({"job": job, **({"when": when} if when else {})})
    return found


def _fault_tolerance(form: FormFields) -> dict[str, Any]:
    ft: dict[str, Any] = {
        "enabled": True,
        "preflight": _checked(form, "ft_preflight"),
        "detect_exceptions": _checked(form, "ft_detect_exceptions"),
        "retry_job_errors": _checked(form, "ft_retry_job_errors"),
    }
    for name in ("recovery", "max_restarts", "preflight_tries", "hang_timeout", "keep_failed"):
        value = _one(form, f"ft_{name}")
        if value:
            ft[name] = value
    threshold, window = _one(form, "perf_threshold"), _one(form, "perf_window")
    if threshold or window:
        perf: dict[str, Any] = {"action": _one(form, "perf_action") or "alert"}
        if threshold:
            perf["threshold"] = threshold
        if window:
            perf["window"] = window
        ft["performance"] = perf
    return ft


@dataclass
class FormCheck:
    """What the form says: the spec when it is valid, else the errors by where they are."""

    spec: JobSpec | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.spec is not None


def check_form(form: FormFields) -> FormCheck:
    """Validate the form's spec with the spec's own rules."""
    try:
        return FormCheck(spec=JobSpec.model_validate(spec_data(form)))
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for error in exc.errors():
            loc = ".".join(str(p) for p in error["loc"] if not str(p).startswith("function-"))
            message = str(error["msg"]).removeprefix("Value error, ")
            # A rule over several fields names them at the start of its message ("pool and
            # node_names: …"): the error goes beside the first.
            head = message.split(":", 1)[0].split(" and ")[0].strip()
            if not loc and ":" in message and head.replace("_", "").replace(".", "").isalnum():
                loc = head
            errors.setdefault(loc or "spec", message)
        return FormCheck(errors=errors)


def spec_yaml(spec: JobSpec) -> str:
    """The spec as ``gpuyard submit -f`` reads it, without the defaults."""
    data = spec.model_dump(mode="json", exclude_defaults=True)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def form_values(spec: JobSpec | None) -> dict[str, Any]:
    """The form's fields for ``spec`` (a clone), or for a new job."""
    spec = spec or JobSpec.model_construct()
    ft = spec.fault_tolerance
    values: dict[str, Any] = {
        "name": spec.name or "",
        "type": spec.type.value if spec.type else "regular",
        "command": spec.command or "",
        "tasks": "\n".join(t.command for t in spec.tasks or []),
        "mode": spec.mode.value,
        "nodes": spec.nodes,
        "exclusive": "default" if spec.exclusive is None else _NODE_USE_NAME[spec.exclusive],
        "min_nodes": spec.min_nodes or "",
        "parameter_servers": spec.parameter_servers or "",
        "mpi": spec.mpi.value,
        "launcher": spec.launcher.value,
        "gpus": spec.resources.gpus,
        "cpus": _number(spec.resources.cpus),
        "memory": _size(spec.resources.memory),
        "alternatives": [
            {"gpus": a.gpus, "cpus": _number(a.cpus), "memory": _size(a.memory)}
            for a in spec.alternatives
        ],
        "pool": spec.pool or "",
        "node_names": " ".join(spec.node_names),
        "driver_version": spec.driver_version or "",
        "exclude_nodes": " ".join(spec.exclude_nodes),
        "env": "\n".join(f"{k}={v}" for k, v in spec.env.items()),
        "workdir": spec.workdir or "",
        "image": spec.image or "",
        "shm_size": _size(spec.shm_size),
        "algorithm": spec.mounts.algorithm or "",
        "algorithm_readonly": spec.mounts.algorithm_readonly,
        "outputs": spec.mounts.outputs or "",
        "max_runtime": _span(spec.max_runtime),
        "graceful_shutdown": _span(spec.graceful_shutdown),
        "priority": spec.priority.value,
        "access": spec.access.value,
        "hold": spec.hold,
        "after": " ".join(f"{d.job}:{d.when.value}" for d in spec.after),
        "ft_on": ft is not None and ft.enabled,
    }
    for kind in MOUNT_KINDS:
        values[kind] = [
            {"name": m.name, "path": m.path, "readonly": m.readonly}
            for m in getattr(spec.mounts, kind)
        ]
    defaults = FaultTolerance()
    shown = ft or defaults
    values.update(
        ft_recovery=shown.recovery.value,
        ft_max_restarts=shown.max_restarts,
        ft_preflight=shown.preflight,
        ft_preflight_tries=shown.preflight_tries,
        ft_detect_exceptions=shown.detect_exceptions,
        ft_retry_job_errors=shown.retry_job_errors,
        ft_hang_timeout=_span(shown.hang_timeout),
        ft_keep_failed=_span(shown.keep_failed),
        perf_threshold=shown.performance.threshold if shown.performance else "",
        perf_window=_span(shown.performance.window) if shown.performance else "",
        perf_action=shown.performance.action.value if shown.performance else "alert",
    )
    return values


def posted_values(form: FormFields) -> dict[str, Any]:
    """The form's fields as they were posted (to show them again with their errors)."""
    values: dict[str, Any] = {name: _one(form, name) for name in form_values(None)}
    for name in ("algorithm_readonly", "hold", "ft_on", "ft_preflight"):
        values[name] = _checked(form, name)
    for name in ("ft_detect_exceptions", "ft_retry_job_errors"):
        values[name] = _checked(form, name)
    for kind in MOUNT_KINDS:
        readonly = set(_many(form, f"{kind}_ro"))
        values[kind] = [
            {"name": n, "path": p, "readonly": str(i) in readonly}
            for i, (n, p) in enumerate(
                zip(_many(form, f"{kind}_name"), _many(form, f"{kind}_path"), strict=False)
            )
            if n or p
        ]
    values["alternatives"] = _alternatives(form)
    return values


def _size(value: int | None) -> str:
    """Bytes as the form shows them: ``16Gi`` when whole, else the number."""
    if not value:
        return ""
    for unit, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
        if value % 1024**power == 0:
            return f"{value // 1024**power}{unit}"
    return str(value)


def _span(seconds: float | None) -> str:
    """Seconds as the form shows them: ``8h``, ``90m``, ``45s`` when whole."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return _number(seconds) + "s" if float(seconds).is_integer() else _number(seconds)


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else str(value)
