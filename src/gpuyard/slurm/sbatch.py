"""``sbatch``: a Slurm batch script becomes a gpuyard job of mode ``slurm`` (docs/slurm.md)."""

from __future__ import annotations

import _socket as socket  # gethostname only; socket.py would cost 3 ms of the quick path
import os
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpuyard.hostlist import expand_hostlist
from gpuyard.slurm.containers import container_fields
from gpuyard.slurm.options import (
    KEPT,
    REFUSED,
    OptionError,
    SbatchOptions,
    parse_array,
    parse_begin,
    parse_memory_mb,
    parse_sbatch,
    parse_time,
)
from gpuyard.spec_limits import (
    DEFAULT_POOL,
    MAX_ENV,
    MAX_ENV_BYTES,
    MAX_SCRIPT,
    PRIORITIES,
    signal_number,
)

TYPE_CHECKING = False  # typing is not imported at run time: sbatch's quick path runs without it
if TYPE_CHECKING:
    from typing import Any

    from gpuyard.slurm.options import ArraySpec

__all__ = ["build_specs", "forwarded_environment", "specs_from_here"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"[^\w.-]")
_NOT_FORWARDED = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "GPUYARD_")


def forwarded_environment(environ: Mapping[str, str], export: str | None) -> dict[str, str]:
    """What the job gets from the submitter's environment (``--export``, default ALL)."""
    usable = {
        k: v
        for k, v in environ.items()
        if _ENV_NAME.match(k) and not k.startswith(_NOT_FORWARDED) and "\0" not in v
    }
    items = [x for x in (export or "ALL").split(",") if x]
    first = items[0].upper() if items else "ALL"
    chosen: dict[str, str] = dict(usable) if first == "ALL" else {}
    if first in ("ALL", "NONE"):
        items = items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        if not _ENV_NAME.match(name):
            raise OptionError(f"--export: {name!r} is not a variable name")
        if name.startswith(_NOT_FORWARDED):
            raise OptionError(
                f"--export: {name} cannot be given to a job (the pool sets SLURM_* and "
                "GPUYARD_* itself, and a token does not belong in a job's spec)"
            )
        if eq:
            chosen[name] = value
        elif name in usable:
            chosen[name] = usable[name]
    if len(chosen) > MAX_ENV or sum(len(k) + len(v) for k, v in chosen.items()) > MAX_ENV_BYTES:
        # The biggest first: LS_COLORS and exported shell functions rarely matter to a job.
        for name in sorted(chosen, key=lambda k: -len(chosen[k])):
            if len(chosen) <= MAX_ENV and sum(len(k) + len(v) for k, v in chosen.items()) <= (
                MAX_ENV_BYTES
            ):
                break
            if name not in ("PATH", "HOME", "USER", "PYTHONPATH", "LD_LIBRARY_PATH"):
                del chosen[name]
    return chosen


def _int(values: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    text = values.get(name)
    if text is None:
        return default
    first = text.split("-")[0]  # -N 2-4: the minimum
    if not first.isdigit() or int(first) < 1:
        raise OptionError(f"invalid --{name} value {text!r}: give a positive whole number")
    return int(first)


def _gpus(values: Mapping[str, str], nodes: int, per_node_tasks: int) -> int:
    if "gpus-per-node" in values:
        return _count_gpus(values["gpus-per-node"], "--gpus-per-node")
    if "gpus-per-task" in values:
        return _count_gpus(values["gpus-per-task"], "--gpus-per-task") * per_node_tasks
    if "gpus" in values:
        total = _count_gpus(values["gpus"], "--gpus")
        return -(-total // nodes)
    if "gres" in values:
        gpus = 0
        for item in values["gres"].split(","):
            parts = item.split(":")
            if parts[0] != "gpu":
                raise OptionError(f"--gres={values['gres']}: only gpu resources exist here")
            if len(parts) > 1 and not parts[-1].isdigit() and len(parts) == 2:
                gpus += 1  # gpu:type
            else:
                gpus += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
        return gpus
    return 0


class _Layout:
    """What one job (or one component of a heterogeneous job) asks: nodes, tasks, and each
    node's share."""

    __slots__ = ("cpus", "cpus_per_task", "gpus", "memory_mb", "nodes", "ntasks", "ntasks_per_node")

    def __init__(
        self,
        nodes: int,
        ntasks: int,
        ntasks_per_node: int,
        cpus_per_task: int | None,
        gpus: int,
        cpus: float,
        memory_mb: int,
    ) -> None:
        self.nodes, self.ntasks, self.ntasks_per_node = nodes, ntasks, ntasks_per_node
        self.cpus_per_task, self.gpus, self.cpus, self.memory_mb = (
            cpus_per_task,
            gpus,
            cpus,
            memory_mb,
        )


def _layout(values: Mapping[str, str]) -> _Layout:
    nodes = _int(values, "nodes", 1) or 1
    ntasks = _int(values, "ntasks")
    per_node = _int(values, "ntasks-per-node")
    if per_node is None:
        per_node = -(-ntasks // nodes) if ntasks else 1
    if ntasks is None:
        ntasks = nodes * per_node
    if ntasks < nodes:
        raise OptionError(
            f"--ntasks={ntasks} is fewer than --nodes={nodes}: every node runs a task"
        )
    cpus_per_task = _int(values, "cpus-per-task")
    gpus = _gpus(values, nodes, per_node)
    cpus = float((cpus_per_task or 1) * per_node)
    if "cpus-per-gpu" in values and gpus:
        cpus = max(cpus, float((_int(values, "cpus-per-gpu") or 1) * gpus))
    memory_mb = 0
    if "mem" in values:
        memory_mb = parse_memory_mb(values["mem"], "--mem")
    elif "mem-per-cpu" in values:
        memory_mb = parse_memory_mb(values["mem-per-cpu"], "--mem-per-cpu") * int(cpus)
    elif "mem-per-gpu" in values:
        memory_mb = parse_memory_mb(values["mem-per-gpu"], "--mem-per-gpu") * gpus
    return _Layout(nodes, ntasks, per_node, cpus_per_task, gpus, cpus, memory_mb)


def _components(options: SbatchOptions, script_name: str) -> list[dict[str, Any]]:
    """A heterogeneous job's components as ``SlurmComponent`` fields. What gpuyard keeps once
    per job (partition, QOS, array) must agree across them."""
    first = options.values
    if "array" in first or any("array" in c for c in options.components):
        raise OptionError("job arrays cannot be heterogeneous jobs: submit them apart")
    for index, component in enumerate(options.components[1:], start=1):
        for name, what in (("partition", "partition"), ("qos", "QOS")):
            if component.get(name, "") != first.get(name, ""):
                raise OptionError(
                    f"component {index} of the heterogeneous job asks for {what} "
                    f"{component.get(name) or '(default)'!r}, component 0 for "
                    f"{first.get(name) or '(default)'!r}: here all components run in one "
                    f"{what}; give every component the same --{name}"
                )
    het = []
    for component in options.components:
        layout = _layout(component)
        het.append(
            {
                "job_name": component.get("job-name") or script_name,
                "nodes": layout.nodes,
                "ntasks": layout.ntasks,
                "ntasks_per_node": layout.ntasks_per_node,
                "cpus_per_task": layout.cpus_per_task,
                "gpus": layout.gpus,
                "cpus": layout.cpus,
                "memory": layout.memory_mb << 20,
            }
        )
    return het


def _count_gpus(text: str, option: str) -> int:
    last = text.rsplit(":", maxsplit=1)[-1]
    if not last.isdigit():
        raise OptionError(f"Invalid {option} specification: {text!r}")
    return int(last)


def _absolute(path: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, path))


def specs_from_here(
    options: SbatchOptions, script: str, *, script_name: str, pools: Sequence[str]
) -> list[dict[str, Any]]:
    """:func:`build_specs` for a submission from this process: its working directory,
    environment and ids."""
    return build_specs(
        options,
        script,
        script_name=script_name,
        cwd=os.getcwd(),
        environ=os.environ,
        pools=pools,
        uid=os.getuid(),
        gid=os.getgid(),
    )


def _refuse(options: SbatchOptions) -> None:
    """Refuse the options gpuyard cannot honour (``REFUSED``), saying why."""
    for component in options.components or [options.values]:
        for name in component:
            reason = REFUSED.get(name)
            if reason:
                raise OptionError(f"--{name}: {reason}")


def _pool(partition: str, pools: Sequence[str]) -> str | None:
    """The pool a ``--partition`` names (None: the default one)."""
    if not partition or partition == DEFAULT_POOL:
        return None
    if partition not in pools:
        raise OptionError(
            "invalid partition specified: "
            f"{partition} (partitions here: {', '.join(sorted({DEFAULT_POOL, *pools}))})"
        )
    return partition


def _priority(qos: str) -> str | None:
    """The priority a ``--qos`` names (None: none asked for)."""
    if not qos:
        return None
    if qos.lower() not in PRIORITIES:
        choices = ", ".join(PRIORITIES)
        raise OptionError(f"invalid qos specification: {qos} (QOS here: {choices})")
    return qos.lower()


def _signal(text: str) -> dict[str, Any]:
    """``--signal=[B:]SIG[@seconds]`` as the spec's ``slurm.signal``."""
    batch = text.startswith(("B:", "b:"))
    body = text[2:] if batch else text
    name, _, seconds = body.partition("@")
    if seconds and not seconds.isdigit():
        raise OptionError(f"Invalid --signal specification: {text}")
    try:
        return {
            "signal": signal_number(name),
            "seconds": int(seconds) if seconds else 60,
            "batch": batch,
        }
    except ValueError as exc:
        raise OptionError(f"Invalid --signal specification: {exc}") from None


def _node_lists(options: SbatchOptions) -> tuple[list[str], list[str]]:
    """``--nodelist`` and ``--exclude``, expanded. A heterogeneous job's node lists are the
    job's: any of its nodes may serve any component."""
    node_names: list[str] = []
    excluded: list[str] = []
    for component in options.components or [options.values]:
        for option, into in (("nodelist", node_names), ("exclude", excluded)):
            try:
                found = expand_hostlist(component[option]) if option in component else []
            except ValueError as exc:
                raise OptionError(f"--{option}: {exc}") from None
            into += [n for n in found if n not in into]
    return node_names, excluded


def _spec_name(job_name: str) -> str:
    """A gpuyard job name for Slurm's ``--job-name``: what the spec allows of it."""
    name = _NAME.sub("-", job_name).strip("-.")[:128] or "sbatch"
    if not name[0].isalnum():
        name = "j" + name[:127]
    return name


def _placement(
    *, pool: str | None, node_names: list[str], excluded: list[str], priority: str | None
) -> dict[str, Any]:
    """The spec's placement keys that were asked for, in the spec's order."""
    spec: dict[str, Any] = {}
    if pool:
        spec["pool"] = pool
    if node_names:
        spec["node_names"] = node_names
    if excluded:
        spec["exclude_nodes"] = excluded
    if priority is not None:
        spec["priority"] = priority
    return spec


def _sizes(
    options: SbatchOptions, layout: _Layout, script_name: str
) -> tuple[list[dict[str, Any]], int, int, float | None]:
    """(the heterogeneous components, nodes, tasks, the time limit): a heterogeneous job's are
    its components' sums, and its limit their longest (none if one has none)."""
    values = options.values
    max_runtime = parse_time(values["time"]) if "time" in values else None
    het = _components(options, script_name) if options.components else []
    if not het:
        return het, layout.nodes, layout.ntasks, max_runtime
    nodes, ntasks = sum(c["nodes"] for c in het), sum(c["ntasks"] for c in het)
    limits = [parse_time(c["time"]) if "time" in c else None for c in options.components]
    max_runtime = None if None in limits else max(x for x in limits if x is not None)
    return het, nodes, ntasks, max_runtime


def build_specs(
    options: SbatchOptions,
    script: str,
    *,
    script_name: str,
    cwd: str,
    environ: Mapping[str, str],
    pools: Sequence[str],
    uid: int,
    gid: int,
) -> list[dict[str, Any]]:
    """The job specs: one, or one per array task (the first is the array's)."""
    values = options.values
    _refuse(options)
    layout = _layout(values)
    het, nodes, ntasks, max_runtime = _sizes(options, layout, script_name)
    begin = parse_begin(values["begin"], time.time()) if "begin" in values else None

    partition = values.get("partition", "").split(",")[0]
    pool = _pool(partition, pools)
    qos = values.get("qos", "")
    priority = _priority(qos)
    signal = _signal(values["signal"]) if "signal" in values else None
    if "open-mode" in values and values["open-mode"] not in ("append", "truncate"):
        raise OptionError(f"Invalid --open-mode specification: {values['open-mode']}")

    array = parse_array(values["array"]) if "array" in values else None
    job_name = values.get("job-name") or script_name
    name = _spec_name(job_name)
    work_dir = _absolute(values.get("chdir", "."), cwd)
    node_names, excluded = _node_lists(options)
    env = forwarded_environment(environ, values.get("export"))

    slurm: dict[str, Any] = {
        "script": script,
        "job_name": job_name,
        "ntasks": ntasks,
        "ntasks_per_node": layout.ntasks_per_node,
        "cpus_per_task": layout.cpus_per_task,
        "submit_dir": cwd,
        "work_dir": work_dir,
        "output": values.get("output", "slurm-%A_%a.out" if array else "slurm-%j.out"),
        "error": values.get("error"),
        "open_mode": values.get("open-mode", "truncate"),
        "requeue": "no-requeue" not in values,
        "signal": signal,
        "partition": partition or DEFAULT_POOL,
        "account": values.get("account", ""),
        "qos": qos or "normal",
        "comment": values.get("comment", ""),
        "options": {k: v for k, v in values.items() if k in KEPT},
        "submit_host": socket.gethostname(),
        "uid": uid,
        "gid": gid,
        **({"begin": begin} if begin is not None else {}),
        **({"script_args": list(options.script_args)} if options.script_args else {}),
        **({"het": het} if het else {}),
    }
    spec: dict[str, Any] = {
        "name": name,
        "mode": "slurm",
        "command": "sbatch " + shlex.quote(script_name),
        "nodes": nodes,
        "resources": {
            "gpus": layout.gpus,
            "cpus": layout.cpus,
            **({"memory": layout.memory_mb << 20} if layout.memory_mb else {}),
        },
        "env": env,
        "slurm": slurm,
        **({"max_runtime": max_runtime} if max_runtime is not None else {}),
    }
    spec |= _placement(pool=pool, node_names=node_names, excluded=excluded, priority=priority)
    spec |= _container(options, cwd)
    if "dependency" in values:
        spec["after"] = parse_dependency(values["dependency"])
    if "hold" in values:
        spec["hold"] = True
    if "exclusive" in values:  # without it, gpuyard's default (docs/slurm.md)
        spec["exclusive"] = True
    return [spec] if array is None else _array_specs(spec, slurm, array)


def _container(options: SbatchOptions, cwd: str) -> dict[str, Any]:
    """The image the job runs in (pyxis's options): one for the whole job."""
    fields = container_fields(options.values, cwd)
    for component in options.components[1:]:
        given = any(name.startswith("container-") for name in component)
        if given and container_fields(component, cwd) != fields:
            raise OptionError(
                "--container-*: a heterogeneous job runs in one image; give its container "
                "options on the first component only"
            )
    return fields


def _array_specs(
    spec: dict[str, Any], slurm: dict[str, Any], array: ArraySpec
) -> list[dict[str, Any]]:
    """One spec per task of the array, each with its task's ``slurm.array``."""
    specs = []
    for index in array.indices:
        one = {**spec, "slurm": {**slurm}}
        one["slurm"]["array"] = {
            "task_id": index,
            "count": len(array.indices),
            "min": array.indices[0],
            "max": array.indices[-1],
            "step": array.step,
            "throttle": array.throttle,
            "spec": array.text,
        }
        specs.append(one)
    return specs


def _decode(data: bytes, where: str) -> str:
    if len(data) > MAX_SCRIPT:
        raise OptionError(
            f"{where} is more than {MAX_SCRIPT // 1024} KiB; a batch script that large belongs "
            "in a file the script runs"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OptionError(f"{where} is not UTF-8 text (byte {exc.start})") from None


def read_script(options: SbatchOptions, read_stdin: Callable[[], bytes | None]) -> tuple[str, str]:
    """The script and its name: ``--wrap``, the file, or standard input (read only when
    neither of the others is given)."""
    if "wrap" in options.values:
        if options.script_path:
            raise OptionError("a script file and --wrap cannot be used together")
        return (
            f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{options.values['wrap']}\n",
            "wrap",
        )
    if options.script_path:
        path = Path(options.script_path)
        try:
            with path.open("rb") as file:  # at most a byte past the limit: /dev/zero ends
                data = file.read(MAX_SCRIPT + 1)
        except OSError as exc:
            raise OptionError(
                f"Unable to open file {options.script_path}: {exc.strerror}"
            ) from None
        return _decode(data, options.script_path), path.name
    piped = read_stdin()
    if piped is None:
        raise OptionError("no batch script given (a file, --wrap, or the script on stdin)")
    return _decode(piped, "the script on standard input"), "sbatch"


def parse(
    args: Sequence[str], read_stdin: Callable[[], bytes | None]
) -> tuple[SbatchOptions, str, str]:
    first = parse_sbatch(args, None)
    script, name = read_script(first, read_stdin)
    if not script.startswith("#!"):
        raise OptionError(
            "This does not look like a batch script.  The first\n"
            "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
            "sbatch: error: For instance: #!/bin/sh"
        )
    return parse_sbatch(args, script), script, name


_DEPENDENCY_KINDS = {
    "after": "started",
    "afterany": "ended",
    "afterok": "succeeded",
    "afternotok": "failed",
}


def parse_dependency(text: str) -> list[dict[str, Any]]:
    """``afterok:12:13,afterany:14`` -> the spec's ``after`` (all must hold, as Slurm's ``,``)."""
    if "?" in text:
        raise OptionError(
            f"--dependency={text}: '?' (any one of) is not supported; use ',' (all of)"
        )
    after: list[dict[str, Any]] = []
    for part in filter(None, text.split(",")):
        kind, _, ids = part.partition(":")
        when = _DEPENDENCY_KINDS.get(kind)
        if when is None or not ids:
            known = ", ".join(_DEPENDENCY_KINDS)
            raise OptionError(
                f"--dependency={text}: {part!r} is not supported; use {known} with job ids "
                "(afterok:12:13)"
            )
        for job in ids.split(":"):
            if not job.isdigit() or int(job) < 1:
                raise OptionError(
                    f"--dependency={text}: {job!r} is not a job id (array tasks and +time "
                    "are not supported)"
                )
            after.append({"job": int(job), "when": when})
    if not after:
        raise OptionError(f"--dependency={text}: give at least one, e.g. afterok:12")
    return after
