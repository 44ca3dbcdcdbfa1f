"""A Slurm batch job's commands inside its allocation: the batch step, ``srun``, ``scontrol``.

A job submitted with ``sbatch`` (docs/slurm.md) runs as one worker per node. Worker 0 runs
``entry.py batch SCRIPT``: it sends the shell's output where ``--output``/``--error`` said and
becomes the script, as Slurm's batch step does. The other workers run ``rexec.py serve``.
``srun`` in the script starts the step's tasks: those on worker 0's node as its own children,
the others through the workers' ``serve`` (``injob/rexec.py``, over the remote-exec channel of
:mod:`gpuyard.injob.channel`), each task with the ``SLURM_*`` variables Slurm gives it.
``scontrol`` answers what a job asks about itself (``show hostnames``, ``requeue``) without the
server.

Started as ``python -I -S entry.py COMMAND ...`` (:mod:`gpuyard.slurm.step.entry`) from the
job's ``slurm-bin`` directory, which is first on the job's PATH: the standard library only,
like rexec.py, and of gpuyard only the stdlib-only :mod:`gpuyard.hostlist` and
:mod:`gpuyard.injob.channel`, loaded when first used; nothing of the control plane (an
import-linter contract holds it to that).

Signals: ``srun`` forwards every signal it can catch to all its tasks (Slurm's srun does the
same), so ``scancel --signal`` and ``--signal=SIG@secs`` reach the steps: the executor signals
the processes registered in ``$GPUYARD_CONTROL_DIR/steps`` (``srun`` registers itself there).
"""

from __future__ import annotations

import os
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Sequence

EXIT_USAGE = 1
_FORWARDED = (
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGTERM",
    "SIGUSR1",
    "SIGUSR2",
    "SIGCONT",
    "SIGALRM",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGWINCH",
    "SIGPIPE",
)

# What a task on another node takes from its own node, not from the batch shell.
_NODE_VARIABLES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "SLURM_JOB_GPUS",
        "SLURMD_NODENAME",
        "SLURM_TOPOLOGY_ADDR",
        "SLURM_CPUS_ON_NODE",
        "SLURM_GPUS_ON_NODE",
        "SLURM_NODEID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_GTIDS",
        "SLURM_TASK_PID",
        "GPUYARD_NODE_RANK",
        "GPUYARD_NODE_NAME",
        "GPUYARD_NODE_ADDRESS",
        "GPUYARD_CONTROL_DIR",
        "GPUYARD_WORKSPACE",
        "GPUYARD_GPUS",
        "GPUYARD_ROLE",
        "HOSTNAME",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
    }
)


class SlurmError(Exception):
    """A usage or allocation error: printed as ``<command>: error: <message>``, exit 1."""


# --- host lists -------------------------------------------------------------------------


def expand_hostlist(text: str) -> list[str]:
    """``n[0001-0003,0010],gpu7`` -> names (:func:`gpuyard.hostlist.expand_hostlist`); a
    malformed list is a :class:`SlurmError`. Loaded when first used: the batch step starts
    without ``re``."""
    from gpuyard.hostlist import expand_hostlist as expand

    try:
        return expand(text)
    except ValueError:
        raise SlurmError(f"invalid hostlist {text!r}") from None


def compress_hostlist(hosts: Sequence[str]) -> str:
    """Slurm's hostlist form of ``hosts`` (:func:`gpuyard.hostlist.compress_hostlist`)."""
    from gpuyard.hostlist import compress_hostlist as compress

    return compress(hosts)


def tasks_text(counts: Sequence[int]) -> str:
    """``2(x3),1`` for [2, 2, 2, 1] (:func:`gpuyard.hostlist.compress_counts`)."""
    from gpuyard.hostlist import compress_counts

    return compress_counts(counts)


# --- file name patterns -----------------------------------------------------------------


def expand_pattern(pattern: str, values: dict[str, str]) -> str:
    """Slurm's ``%j %J %A %a %x %u %N %n %t %s %%`` (with an optional zero-padding width)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            return pattern.replace("\\", "")  # "\\" anywhere: no replacements at all (Slurm)
        if char != "%":
            out.append(char)
            i += 1
            continue
        j = i + 1
        while j < len(pattern) and pattern[j].isdigit():
            j += 1
        if j >= len(pattern):
            out.append(pattern[i:])
            break
        key, width = pattern[j], pattern[i + 1 : j]
        if key == "%":
            out.append("%")
        elif key in values:
            value = values[key]
            out.append(value.zfill(int(width)) if width and value.isdigit() else value)
        else:
            out.append(pattern[i : j + 1])
        i = j + 1
    return "".join(out)


def _pattern_values(
    env: dict[str, str], *, task: str, node_index: str, step: str
) -> dict[str, str]:
    job = env.get("SLURM_JOB_ID", "0")
    array_job = env.get("SLURM_ARRAY_JOB_ID")
    first = (env.get("SLURM_JOB_NODELIST") or "").split(",")[0]
    if "[" not in first and not any(c.isspace() for c in first):
        node = first  # what expand_hostlist gives, without loading re (the batch step's start)
    else:
        try:
            node = expand_hostlist(first)[0]
        except SlurmError:
            node = first
    return {
        "j": job,
        "J": f"{job}.{step}" if step != "batch" else job,
        "A": array_job or job,
        "a": env.get("SLURM_ARRAY_TASK_ID", "4294967294"),
        "x": env.get("SLURM_JOB_NAME", ""),
        "u": env.get("SLURM_JOB_USER", "") or env.get("USER", ""),
        "N": env.get("SLURMD_NODENAME", node),
        "n": node_index,
        "t": task,
        "s": step,
    }


def _open_output(path: str, append: bool) -> int:
    """Open the batch step's ``--output``/``--error`` file, creating its missing directories
    first: a deliberate difference from Slurm (docs/slurm.md). submitit creates an array
    task's log folder just after ``sbatch`` returns, and a pool with an idle node starts the
    task before that. The step runs as the job's account, so it creates only what that account
    may; where it may not, the open fails as Slurm's does."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    return os.open(path, flags, 0o644)


# --- the batch step ---------------------------------------------------------------------


def batch(args: Sequence[str]) -> int:
    """Point stdout/stderr at the job's --output/--error, then become the script."""
    if not args:
        raise SlurmError("usage: slurmstep.py batch SCRIPT [ARG...]")
    env = dict(os.environ)
    values = _pattern_values(env, task="0", node_index="0", step="batch")
    append = env.get("SLURM_OPEN_MODE") == "a"
    output = expand_pattern(env.get("GPUYARD_SLURM_OUTPUT") or "slurm-%j.out", values)
    error = expand_pattern(env.get("GPUYARD_SLURM_ERROR") or "", values)
    try:
        out = _open_output(output, append)
        err = _open_output(error, append) if error and error != output else out
    except OSError as exc:
        # Slurm's slurmstepd fails the job the same way: nowhere to write its output.
        print(
            f"slurmstepd: error: cannot open {exc.filename or output}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    os.dup2(out, 1)
    os.dup2(err, 2)
    for name in list(os.environ):
        if name.startswith("GPUYARD_SLURM_OUTPUT") or name.startswith("GPUYARD_SLURM_ERROR"):
            del os.environ[name]
    os.environ["SLURM_TASK_PID"] = str(os.getpid())
    import signal

    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    script = args[0]
    try:
        os.execv(script, [script, *args[1:]])  # noqa: S606 - the script is the job
    except OSError as exc:
        print(f"slurmstepd: error: execve(): {script}: {exc.strerror}", file=sys.stderr)
        return 127


# --- srun -------------------------------------------------------------------------------

_SRUN_VALUED = {
    "-N": "nodes",
    "--nodes": "nodes",
    "-n": "ntasks",
    "--ntasks": "ntasks",
    "--ntasks-per-node": "ntasks_per_node",
    "-w": "nodelist",
    "--nodelist": "nodelist",
    "-c": "cpus_per_task",
    "--cpus-per-task": "cpus_per_task",
    "-o": "output",
    "--output": "output",
    "-e": "error",
    "--error": "error",
    "-i": "input",
    "--input": "input",
    "--export": "export",
    "-W": "wait",
    "--wait": "wait",
    "-J": "job_name",
    "--job-name": "job_name",
    "--open-mode": "open_mode",
    "-D": "chdir",
    "--chdir": "chdir",
    # Accepted and without effect inside an allocation here (placement is the job's).
    "--cpu-bind": "",
    "--cpu_bind": "",
    "--mem-bind": "",
    "--mpi": "",
    "--distribution": "",
    "-m": "",
    "--gpus": "",
    "-G": "",
    "--gpus-per-node": "",
    "--gpus-per-task": "",
    "--gres": "",
    "--mem": "",
    "--mem-per-cpu": "",
    "--mem-per-gpu": "",
    "--cpus-per-gpu": "",
    "-p": "",
    "--partition": "",
    "-A": "",
    "--account": "",
    "-t": "",
    "--time": "",
    "--exclude": "",
    "-x": "",
    "--constraint": "",
    "-C": "",
    "--qos": "",
    "-q": "",
    "--comment": "",
    "--signal": "",
    "--kill-on-bad-exit": "kill_on_bad_exit",
    "-K": "kill_on_bad_exit",
    "--het-group": "het_group",
}
_SRUN_FLAGS = {
    "-u": "unbuffered",
    "--unbuffered": "unbuffered",
    "-l": "label",
    "--label": "label",
    "-v": "",
    "--verbose": "",
    "-Q": "",
    "--quiet": "",
    "--exclusive": "",
    "--overlap": "",
    "--overcommit": "",
    "-O": "",
    "--whole": "",
    "--exact": "",
    "--no-kill": "",
    "-k": "",
    "--pty": "",
}
_OPTIONAL_VALUE = {"--kill-on-bad-exit", "-K"}


def parse_srun(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:  # noqa: PLR0912
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("--") and len(arg) > 2 and arg[:2] in _SRUN_VALUED:
            name, eq, value = arg[:2], "=", arg[2:]
        if name in _SRUN_FLAGS:
            if eq:
                raise SlurmError(f"option '{name}' doesn't allow an argument")
            if _SRUN_FLAGS[name]:
                options[_SRUN_FLAGS[name]] = "1"
            i += 1
            continue
        if name in _OPTIONAL_VALUE:
            options["kill_on_bad_exit"] = value if eq else "1"
            i += 1
            continue
        if name not in _SRUN_VALUED:
            raise SlurmError(f"unrecognized option '{arg}'")
        if not eq:
            if i + 1 >= len(args):
                raise SlurmError(f"option '{name}' requires an argument")
            value = args[i + 1]
            i += 1
        if _SRUN_VALUED[name]:
            options[_SRUN_VALUED[name]] = value
        i += 1
    command = list(args[i:])
    if not command:
        raise SlurmError("fatal: No command given to execute.")
    return options, command


def _int_option(options: dict[str, str], key: str, what: str) -> int | None:
    if key not in options:
        return None
    text = options[key].split("-")[0]  # -N 2-4: the minimum is what we can give
    if not text.isdigit() or int(text) < 1:
        raise SlurmError(f"invalid {what} '{options[key]}'")
    return int(text)


def _env_count(env: dict[str, str], name: str, default: int) -> int:
    """A count the job's environment gives srun (a script may have changed it)."""
    text = env.get(name, "")
    if not text:
        return default
    if not text.isdigit():
        raise SlurmError(f"{name}={text!r} in the environment is not a count")
    return int(text)


class _Allocation:
    def __init__(self, env: dict[str, str]) -> None:
        import json

        if "SLURM_JOB_ID" not in env or "GPUYARD_REXEC_HOSTS" not in env:
            raise SlurmError("srun runs inside a job submitted with sbatch (no allocation here)")
        self.job_id = env["SLURM_JOB_ID"]
        self.nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))
        try:
            with open(env["GPUYARD_REXEC_HOSTS"], "rb") as file:
                data = json.load(file)
        except (OSError, ValueError) as exc:
            raise SlurmError(f"cannot read the job's hosts: {exc}") from None
        self.hosts = {
            name: (entry["address"], int(entry["port"]))
            for name, entry in data.items()
            if isinstance(entry, dict)
        }
        self.own = env.get("GPUYARD_REXEC_SELF", "")
        self.per_node = _env_count(env, "SLURM_NTASKS_PER_NODE", 1)
        self.ntasks = _env_count(env, "SLURM_NTASKS", len(self.nodes))
        self.het_size = _env_count(env, "SLURM_HET_SIZE", 0)
        """Components of a heterogeneous job (0: a plain job)."""
        self._env = env

    def component(self, index: int) -> _Allocation:
        """Component ``index`` of a heterogeneous job, as an allocation of its own."""
        import copy

        env = self._env
        part = copy.copy(self)
        suffix = f"_HET_GROUP_{index}"
        part.nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST" + suffix, ""))
        strangers = [n for n in part.nodes if n not in self.hosts]
        if strangers or not part.nodes:
            raise SlurmError(
                f"component {index} of the job has no nodes here "
                f"(SLURM_JOB_NODELIST{suffix}={env.get('SLURM_JOB_NODELIST' + suffix, '')!r})"
            )
        part.per_node = _env_count(env, "SLURM_NTASKS_PER_NODE" + suffix, 1)
        part.ntasks = _env_count(env, "SLURM_NTASKS" + suffix, len(part.nodes))
        part.het_size = 0
        return part

    def targets(self, options: dict[str, str], index: int, count: int) -> list[int | None]:
        """The components that group ``index`` of ``count`` (``srun A : B``) runs on: those of
        ``--het-group``, else the group's own; None: the whole (plain) allocation."""
        if not self.het_size:
            if count > 1 or "het_group" in options:
                raise SlurmError(
                    "heterogeneous steps (srun ... : ... or --het-group) run inside a "
                    "heterogeneous job (#SBATCH hetjob) only"
                )
            return [None]
        if "het_group" not in options:
            if index >= self.het_size:
                raise SlurmError(
                    f"Attempt to run a job step with het group value of {index}, but the job "
                    f"allocation has maximum value of {self.het_size - 1}"
                )
            return [index]
        chosen: list[int | None] = []
        for item in options["het_group"].split(","):
            low, dash, high = item.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                raise SlurmError(f"Invalid --het-group value: {options['het_group']}")
            for value in range(int(low), int(high if dash else low) + 1):
                if value >= self.het_size:
                    raise SlurmError(
                        f"Attempt to run a job step with het group value of {value}, but the "
                        f"job allocation has maximum value of {self.het_size - 1}"
                    )
                if value not in chosen:
                    chosen.append(value)
        if not chosen:  # 5-2
            raise SlurmError(f"Invalid --het-group value: {options['het_group']}")
        return chosen

    def resolve(self, name: str) -> str:
        if name in self.nodes:
            return name
        by_address = [n for n, (address, _) in self.hosts.items() if address == name]
        if len(by_address) == 1:
            return str(by_address[0])
        raise SlurmError(
            f"Requested node configuration is not available: {name} is not in the job's "
            f"allocation ({compress_hostlist(self.nodes)})"
        )


def _layout(alloc: _Allocation, options: dict[str, str]) -> tuple[list[str], list[int]]:
    """The step's nodes and tasks per node."""
    nodes_wanted = _int_option(options, "nodes", "node count")
    ntasks = _int_option(options, "ntasks", "number of tasks")
    per_node = _int_option(options, "ntasks_per_node", "ntasks-per-node")
    if "nodelist" in options:
        chosen = [alloc.resolve(n) for n in expand_hostlist(options["nodelist"])]
        chosen = [n for n in alloc.nodes if n in set(chosen)]
    else:
        chosen = list(alloc.nodes)
    if nodes_wanted is not None:
        if nodes_wanted > len(chosen):
            raise SlurmError(f"Only allocated {len(chosen)} nodes asked for {nodes_wanted}")
        chosen = chosen[:nodes_wanted]
    elif ntasks is not None and "nodelist" not in options:
        per = per_node or alloc.per_node
        chosen = chosen[: max(1, min(len(chosen), -(-ntasks // max(per, 1))))]
    if ntasks is None:
        if nodes_wanted is None and "nodelist" not in options and per_node is None:
            ntasks = alloc.ntasks
        else:
            ntasks = len(chosen) * (per_node or alloc.per_node)
    if ntasks < len(chosen):
        chosen = chosen[:ntasks]
    counts = [0] * len(chosen)
    for i in range(min(ntasks, len(chosen))):
        counts[i] = 1
    left, i = ntasks - len(chosen), 0
    cap = max(per_node or alloc.per_node, -(-ntasks // len(chosen)))
    while left > 0:
        if counts[i] < cap:
            counts[i] += 1
            left -= 1
        i = (i + 1) % len(chosen)
    return chosen, counts


def _shared(pattern: str) -> bool:
    """Whether every task of a step writes to the same file (no per-task placeholder)."""
    return "%t" not in pattern and "%n" not in pattern and "%N" not in pattern


def _next_step(control_dir: str) -> int:
    """The next step id of the job: the first free name in ``slurm-steps`` (taken with
    O_EXCL, so concurrent sruns never share one; a link planted there is not followed)."""
    import contextlib  # here, not at the top: the batch step never needs it

    directory = os.path.join(control_dir, "slurm-steps")
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SlurmError(f"cannot number the step: {directory}: {exc.strerror}") from None
    try:
        for step in range(100_000):
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
            try:
                os.close(os.open(str(step), flags, 0o600, dir_fd=fd))
            except FileExistsError:
                continue
            return step
    finally:
        os.close(fd)
    raise SlurmError("too many job steps")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _record_step(control_dir: str, step: int, record: dict[str, object]) -> None:
    """Write step ``step``'s record (``slurm-steps/<step>``, what sacct shows as the
    ``<job>.<step>`` row), whole: to a temporary name, then renamed over the reservation."""
    import contextlib
    import json
    import time

    directory = os.path.join(control_dir, "slurm-steps")
    tmp = os.path.join(directory, f".{step}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump({"time": time.time(), **record}, file)
        os.replace(tmp, os.path.join(directory, str(step)))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _exported(env: dict[str, str], export: str | None) -> dict[str, str]:
    """What the tasks get from srun's environment (``--export``)."""
    if export is None or export.upper() == "ALL":
        return dict(env)
    items = [x for x in export.split(",") if x]
    keep: dict[str, str] = {}
    if items and items[0].upper() == "ALL":
        keep = dict(env)
        items = items[1:]
    elif items and items[0].upper() == "NONE":
        keep = {k: v for k, v in env.items() if k.startswith(("SLURM_", "GPUYARD_"))}
        items = items[1:]
    else:
        keep = {k: v for k, v in env.items() if k.startswith(("SLURM_", "GPUYARD_"))}
    for item in items:
        name, eq, value = item.partition("=")
        if eq:
            keep[name] = value
        elif name in env:
            keep[name] = env[name]
    return keep


class _Part:
    """What one group of a step (``srun A : B`` has two) runs, and where: a plain step is one
    part on the whole allocation; a heterogeneous step has one per component it runs on."""

    def __init__(
        self,
        options: dict[str, str],
        command: list[str],
        component: int | None,
        nodes: list[str],
        counts: list[int],
        offset: int,
    ) -> None:
        self.options, self.command, self.component = options, command, component
        self.nodes, self.counts, self.offset = nodes, counts, offset
        self.forwarded: dict[str, str] = {}
        self.gtids: dict[str, str] = {}

    @property
    def ntasks(self) -> int:
        return sum(self.counts)


class _Task:
    def __init__(self, rank: int, node: str, local: int, node_index: int, part: _Part) -> None:
        self.rank, self.node, self.local, self.node_index = rank, node, local, node_index
        self.part = part
        self.status: int | None = None
        self.pid: int | None = None
        self.conn: socket.socket | None = None
        """The session of a task on another node, while it runs."""
        self.lock = threading.Lock()
        """Held while sending on ``conn`` (a signal and the stdin EOF may cross)."""


def _groups(args: Sequence[str]) -> list[list[str]]:
    """``srun A : B``: the words of each group (a lone ``:`` separates them, as in Slurm)."""
    groups: list[list[str]] = [[]]
    for arg in args:
        if arg == ":":
            groups.append([])
        else:
            groups[-1].append(arg)
    return groups


def _plan(groups: Sequence[tuple[dict[str, str], list[str]]], alloc: _Allocation) -> list[_Part]:
    """The step's parts, in task order (a part's tasks come after the previous part's)."""
    parts: list[_Part] = []
    offset = 0
    for index, (options, command) in enumerate(groups):
        for component in alloc.targets(options, index, len(groups)):
            where = alloc if component is None else alloc.component(component)
            nodes, counts = _layout(where, options)
            parts.append(_Part(options, command, component, nodes, counts, offset))
            offset += sum(counts)
    return parts


def _step_env(part: _Part, parts: Sequence[_Part], step: int, env: dict[str, str]) -> None:
    """What every task of ``part`` gets from srun (``part.forwarded``), as Slurm's srun sets it.

    A step of several groups (``srun A : B``, a heterogeneous step) is one step to its tasks, as
    in Slurm: the job's and the step's variables describe all its nodes and tasks, numbered
    across the groups, with the last group's name. A step of one component of a heterogeneous
    job (``--het-group``, or component 0 by default) sees that component as its job."""
    nodes = list(dict.fromkeys(n for p in parts for n in p.nodes))
    counts = [
        sum(c for p in parts for n, c in zip(p.nodes, p.counts, strict=True) if n == node)
        for node in nodes
    ]
    ntasks = sum(counts)
    nodelist = compress_hostlist(nodes)
    forwarded = _exported(env, part.options.get("export"))
    if part.component is not None and len(parts) == 1:
        suffix = f"_HET_GROUP_{part.component}"
        for name, value in env.items():
            if name.endswith(suffix):
                forwarded[name[: -len(suffix)]] = value
    forwarded.update(
        {
            "SLURM_STEP_ID": str(step),
            "SLURM_STEPID": str(step),
            "SLURM_NTASKS": str(ntasks),
            "SLURM_NPROCS": str(ntasks),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_NODELIST": nodelist,
            "SLURM_STEP_NODELIST": nodelist,
            "SLURM_STEP_NUM_NODES": str(len(nodes)),
            "SLURM_STEP_NUM_TASKS": str(ntasks),
            "SLURM_STEP_TASKS_PER_NODE": tasks_text(counts),
            "SLURM_TASKS_PER_NODE": tasks_text(counts),
            # In a heterogeneous step the groups after the first are laid out cyclic.
            "SLURM_DISTRIBUTION": "cyclic" if parts.index(part) > 0 else "block",
            "SLURM_SRUN_COMM_HOST": env.get("GPUYARD_NODE_ADDRESS", "127.0.0.1"),
            "SLURM_LAUNCH_NODE_IPADDR": env.get("GPUYARD_NODE_ADDRESS", "127.0.0.1"),
            "SLURM_UMASK": f"{_umask():04o}",
            "SRUN_DEBUG": "3",
        }
    )
    if len(parts) > 1:
        last = f"_HET_GROUP_{parts[-1].component}"
        cpus: list[int] = []
        for p in parts:
            given = _expand_counts(env.get(f"SLURM_JOB_CPUS_PER_NODE_HET_GROUP_{p.component}"))
            cpus += [given[i] if i < len(given) else 1 for i in range(len(p.nodes))]
        forwarded.update(
            {
                "SLURM_JOB_NODELIST": nodelist,
                "SLURM_JOB_NUM_NODES": str(len(nodes)),
                "SLURM_JOB_CPUS_PER_NODE": tasks_text(cpus[: len(nodes)]),
                "SLURM_JOB_NAME": env.get("SLURM_JOB_NAME" + last, env.get("SLURM_JOB_NAME", "")),
                "SLURM_NTASKS_PER_NODE": env.get(
                    f"SLURM_NTASKS_PER_NODE_HET_GROUP_{part.component}", "1"
                ),
            }
        )
    elif "SLURM_JOB_CPUS_PER_NODE" in forwarded and part.component is None:
        forwarded["SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"] = forwarded["SLURM_JOB_CPUS_PER_NODE"]
    options = part.options
    if "ntasks_per_node" in options:
        forwarded["SLURM_NTASKS_PER_NODE"] = options["ntasks_per_node"]
    if "cpus_per_task" in options:
        forwarded["SLURM_CPUS_PER_TASK"] = options["cpus_per_task"]
    if "job_name" in options:
        forwarded["SLURM_JOB_NAME"] = options["job_name"]
    part.forwarded = forwarded
    ranks: dict[str, list[str]] = {}
    for p in parts:
        rank = p.offset
        for node, count in zip(p.nodes, p.counts, strict=True):
            for _ in range(count):
                ranks.setdefault(node, []).append(str(rank))
                rank += 1
    part.gtids = {node: ",".join(ranks[node]) for node in part.nodes}


def _expand_counts(text: str | None) -> list[int]:
    """``2(x3),1`` -> [2, 2, 2, 1] (Slurm's per-node lists)."""
    out: list[int] = []
    for item in (text or "").split(","):
        value, _, times = item.partition("(x")
        times = times.rstrip(")")
        if value.isdigit():
            out += [int(value)] * (int(times) if times.isdigit() else 1)
    return out


def _step_tasks(parts: Sequence[_Part], step_nodes: list[str]) -> list[_Task]:
    """The step's tasks, ranked across its parts, each with its rank on its node."""
    tasks: list[_Task] = []
    for part in parts:
        for node, count in zip(part.nodes, part.counts, strict=True):
            earlier = sum(1 for t in tasks if t.node == node)
            for local in range(count):
                tasks.append(_Task(len(tasks), node, earlier + local, step_nodes.index(node), part))
    return tasks


class _Step:
    """One ``srun``: its tasks and how each is run, on this node or through another's agent."""

    def __init__(self, parts: list[_Part], alloc: _Allocation, env: dict[str, str], step: int):
        self.parts, self.alloc, self.env, self.step = parts, alloc, env, step
        first = parts[0].options
        self.cwd = first.get("chdir") or os.getcwd()
        self.nodes = list(dict.fromkeys(n for part in parts for n in part.nodes))
        self.tasks = _step_tasks(parts, self.nodes)
        self.append = (first.get("open_mode") or "").lower().startswith("a") or (
            "open_mode" not in first and env.get("SLURM_OPEN_MODE") == "a"
        )
        self.label = any("label" in part.options for part in parts)
        self.unbuffered = any("unbuffered" in part.options for part in parts)
        self.out_lock = threading.Lock()
        self.token = env.get("GPUYARD_JOB_TOKEN", "")

    def shell_command(self, task: _Task) -> str:
        import shlex

        options = task.part.options
        words = " ".join(shlex.quote(w) for w in task.part.command)
        values = _pattern_values(
            {**self.env, **task.part.forwarded, "SLURMD_NODENAME": task.node},
            task=str(task.rank),
            node_index=str(task.node_index),
            step=str(self.step),
        )
        out = options.get("output")
        err = options.get("error")
        redirect = ""
        if out:
            target = "/dev/null" if out == "none" else expand_pattern(out, values)
            mode = ">>" if self.append or (_shared(out) and len(self.tasks) > 1) else ">"
            redirect += f" {mode}{shlex.quote(target)}"
            if not err:
                redirect += " 2>&1"
        if err:
            target = "/dev/null" if err == "none" else expand_pattern(err, values)
            mode = "2>>" if self.append or (_shared(err) and len(self.tasks) > 1) else "2>"
            redirect += f" {mode}{shlex.quote(target)}"
        if "input" in options and options["input"] != "all":
            redirect += " </dev/null"
        # The task's own pid (exec keeps the shell's), and its node's GPUs as the step's.
        prefix = (
            'SLURM_TASK_PID=$$; export SLURM_TASK_PID; if [ -n "${SLURM_JOB_GPUS:-}" ]; then '
            "SLURM_STEP_GPUS=$SLURM_JOB_GPUS; export SLURM_STEP_GPUS; fi; "
        )
        return f"{prefix}exec {words}{redirect}"

    @staticmethod
    def task_env(task: _Task) -> dict[str, str]:
        return {
            "SLURM_PROCID": str(task.rank),
            "SLURM_LOCALID": str(task.local),
            "SLURM_NODEID": str(task.node_index),
            "SLURM_GTIDS": task.part.gtids[task.node],
        }

    def writer(self, fd: int, task: _Task) -> _TaskOutput:
        prefix = f"{task.rank}: ".encode() if self.label else b""
        return _TaskOutput(fd, prefix, self.unbuffered, self.out_lock)

    def run(self, task: _Task) -> None:
        if task.node == self.alloc.own:
            self.run_local(task)
        else:
            self.run_remote(task)

    def run_local(self, task: _Task) -> None:
        import subprocess

        task_environ = {**self.env, **task.part.forwarded, **self.task_env(task)}
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.shell_command(task)],
                env=task_environ,
                cwd=self.cwd if os.path.isdir(self.cwd) else None,
                process_group=0,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            _error(f"{task.node}: task {task.rank}: cannot start: {exc}")
            task.status = 1
            return
        task.pid = proc.pid
        pumps = [
            threading.Thread(target=_pump, args=(proc.stdout, self.writer(1, task)), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, self.writer(2, task)), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        code = proc.wait()
        for pump in pumps:
            pump.join(2.0)
        from gpuyard.injob.channel import exit_status

        task.status = exit_status(code)

    def run_remote(self, task: _Task) -> None:
        import socket

        from gpuyard.injob import channel as wire

        address, port = self.alloc.hosts[task.node]
        where = f"{task.node} at {address}:{port}"
        try:
            conn = wire.connect(address, port, where)
        except wire.AgentError as exc:
            _error(f"{task.node}: task {task.rank}: {exc}")
            task.status = 1
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._relay(task, conn)
        except wire.AgentError as exc:
            _error(f"{task.node}: task {task.rank}: {exc}")
        except (OSError, ValueError) as exc:
            _error(f"{task.node}: task {task.rank}: lost the node: {exc}")
        finally:
            task.conn = None
            conn.close()
        if task.status is None:
            task.status = 1

    def _relay(self, task: _Task, conn: socket.socket) -> None:
        """Start ``task`` through its node's agent on ``conn`` and relay its output until it
        exits (its status) or the agent reports an error (printed, no status)."""
        from gpuyard.injob import channel as wire

        remote_env = {k: v for k, v in task.part.forwarded.items() if k not in _NODE_VARIABLES}
        remote_env = {k: v for k, v in remote_env.items() if not k.startswith("GPUYARD_REXEC")}
        remote_env.update(self.task_env(task))
        header = {"argv": [self.shell_command(task)], "env": remote_env, "cwd": self.cwd}
        with task.lock:  # a signal frame must not come before the header
            conn.sendall(wire.hello(self.token, header))
            conn.sendall(wire.pack(wire.STDIN, b""))
            task.conn = conn
        rfile = conn.makefile("rb")
        outputs = {wire.STDOUT: self.writer(1, task), wire.STDERR: self.writer(2, task)}
        try:
            while (frame := wire.read_frame(rfile)) is not None:
                channel, payload = frame
                if channel in outputs:
                    outputs[channel].write(payload)
                elif channel == wire.EXIT and len(payload) == 4:
                    task.status = int.from_bytes(payload, "big")
                    return
                elif channel == wire.ERROR:
                    message = payload.decode(errors="replace")
                    _error(f"{task.node}: task {task.rank}: {message}")
                    break
        finally:
            for output in outputs.values():
                output.close()

    def deliver(self, signum: int) -> None:
        import contextlib

        from gpuyard.injob import channel as wire

        for task in self.tasks:
            if task.status is not None:
                continue
            if task.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(task.pid, signum)
            conn = task.conn
            if conn is not None:
                with contextlib.suppress(OSError), task.lock:
                    conn.sendall(wire.pack(wire.SIGNAL, signum.to_bytes(4, "big")))

    def on_signal(self, signum: int, _frame: object) -> None:
        self.deliver(signum)

    def wait(self, threads: Sequence[threading.Thread]) -> None:
        """Until every task has ended; with ``--kill-on-bad-exit`` or ``--wait``, end the others
        (SIGTERM, then SIGKILL 3 s later) once one fails or the first ended that long ago."""
        import signal
        import time

        parts, tasks = self.parts, self.tasks
        kill_on_bad = any(p.options.get("kill_on_bad_exit", "0") not in ("0", "") for p in parts)
        waits = [float(p.options["wait"]) for p in parts if p.options.get("wait", "").isdigit()]
        wait_limit = max(waits) if waits else 0.0
        first_end: float | None = None
        killed = False
        while any(t.is_alive() for t in threads):
            time.sleep(0.05)
            ended = [t for t in tasks if t.status is not None]
            if ended and first_end is None:
                first_end = time.monotonic()
            bad = any(t.status for t in ended)
            late = (
                wait_limit and first_end is not None and (time.monotonic() - first_end > wait_limit)
            )
            if not killed and ((kill_on_bad and bad) or late):
                killed = True
                self.deliver(signal.SIGTERM)
                deadline = time.monotonic() + 3
                while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.deliver(signal.SIGKILL)

    def worst(self) -> int:
        """The highest exit status of the tasks (each failure reported as srun does)."""
        worst = 0
        for task in self.tasks:
            status = task.status if task.status is not None else 1
            if status:
                reason = "Killed" if status == 137 else f"Exited with exit code {status}"
                _error(f"{task.node}: task {task.rank}: {reason}")
            worst = max(worst, status)
        return worst


def _register(control_dir: str) -> str:
    """Register this srun in ``$GPUYARD_CONTROL_DIR/steps`` (the executor signals what is
    there); its path, or "" when it cannot."""
    if not control_dir:
        return ""
    try:
        steps = os.path.join(control_dir, "steps")
        os.makedirs(steps, exist_ok=True)
        registration = os.path.join(steps, str(os.getpid()))
        with open(registration, "w"):
            pass
    except OSError:
        return ""
    return registration


def srun(args: Sequence[str]) -> int:
    import contextlib
    import signal
    import time

    groups = [parse_srun(words) for words in _groups(args)]
    env = dict(os.environ)
    alloc = _Allocation(env)
    parts = _plan(groups, alloc)
    control_dir = env.get("GPUYARD_CONTROL_DIR", "")
    step = _next_step(control_dir) if control_dir else 0
    for part in parts:
        _step_env(part, parts, step, env)
    run = _Step(parts, alloc, env, step)
    for name in _FORWARDED:
        signal.signal(getattr(signal, name), run.on_signal)
    registration = _register(control_dir)

    command = parts[0].command
    record: dict[str, object] = {
        "name": os.path.basename(command[0])[:1024] if command else "",
        "nodes": run.nodes,
        "tasks": len(run.tasks),
        "start": time.time(),
    }
    if control_dir:
        _record_step(control_dir, step, record)

    threads = []
    for task in run.tasks:
        thread = threading.Thread(target=run.run, args=(task,), daemon=True)
        thread.start()
        threads.append(thread)
    try:
        run.wait(threads)
    finally:
        if registration:
            with contextlib.suppress(OSError):
                os.unlink(registration)
    worst = run.worst()
    if control_dir:
        _record_step(control_dir, step, {**record, "end": time.time(), "exit_code": worst & 255})
    return worst


class _TaskOutput:
    """One task's stdout or stderr as srun relays it.

    Like slurmstepd's buffered stdio, whole lines are written at once, so the lines of tasks
    that share srun's output never break into each other (a task's ``print`` may reach the
    pipe as two writes, text then newline). A line longer than ``LIMIT`` goes out in pieces,
    and whatever is left without a newline goes out when the task's stream ends. ``-u``
    relays bytes as they come; ``-l`` puts ``RANK: `` before every line.
    """

    LIMIT = 65536

    def __init__(self, fd: int, prefix: bytes, unbuffered: bool, lock: threading.Lock) -> None:
        self.fd, self.prefix, self.unbuffered, self.lock = fd, prefix, unbuffered, lock
        self.pending = bytearray()

    def write(self, data: bytes) -> None:
        if self.unbuffered and not self.prefix:
            self._emit(data)
            return
        self.pending.extend(data)
        cut = self.pending.rfind(b"\n")
        if cut < 0 and len(self.pending) < self.LIMIT and not self.unbuffered:
            return
        end = cut + 1 if cut >= 0 else len(self.pending)
        lines = bytes(self.pending[:end])
        del self.pending[:end]
        if self.prefix:
            lines = b"".join(self.prefix + line for line in lines.splitlines(keepends=True))
        self._emit(lines)

    def close(self) -> None:
        if self.pending:
            rest = bytes(self.pending)
            self.pending.clear()
            self._emit(self.prefix + rest)

    def _emit(self, data: bytes) -> None:
        with self.lock:
            _write_all(self.fd, data)


def _pump(pipe: object, output: _TaskOutput) -> None:
    try:
        while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
            output.write(chunk)
    except (OSError, ValueError):
        pass
    finally:
        output.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return
        view = view[written:]


def _error(message: str) -> None:
    sys.stderr.write(f"srun: error: {message}\n")
    sys.stderr.flush()


# --- scontrol ---------------------------------------------------------------------------


def scontrol(args: Sequence[str]) -> int:
    words = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details")]
    if len(words) >= 2 and words[0] == "show" and words[1] in ("hostnames", "hostname"):
        text = words[2] if len(words) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
        if not text:
            raise SlurmError("No hostlist specified")
        for name in expand_hostlist(text):
            print(name)
        return 0
    if words and words[0] == "requeue":
        return _requeue(words[1:])
    if words and words[0] == "requeuehold":
        # Never a plain requeue in its place (docs/slurm.md: nothing is silently ignored).
        raise SlurmError(
            "inside a job, scontrol requeues the job itself but cannot hold it; run "
            f"`scontrol {' '.join(words)}` where gpuyard's Slurm commands are installed "
            "(gpuyard slurm-shims), or `gpuyard suspend --hold`"
        )
    raise SlurmError(
        f"inside a job, scontrol answers `show hostnames` and `requeue` of "
        f"the job itself; run `scontrol {' '.join(words)}` where gpuyard's Slurm commands "
        "are installed (gpuyard slurm-shims)"
    )


def _requeue(ids: Sequence[str]) -> int:
    import json
    import time

    own = {os.environ.get("SLURM_JOB_ID", "")}
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        own.add(f"{array_job}_{task}")
    wanted = [i for part in ids for i in part.split(",") if i]
    if not wanted:
        raise SlurmError("Invalid job id specified")
    others = [i for i in wanted if i not in own]
    if others:
        raise SlurmError(
            f"inside a job, scontrol requeues that job only ({sorted(own)[0]}); requeue "
            f"{', '.join(others)} from outside"
        )
    control = os.environ.get("GPUYARD_CONTROL_DIR")
    if not control:
        raise SlurmError("this job has no control directory to ask the platform through")
    os.makedirs(control, exist_ok=True)
    target = os.path.join(control, "suspended.json")
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump({"time": time.time(), "pid": os.getpid(), "requeue": True}, file)
    os.replace(tmp, target)
    return 0


# --- entry ------------------------------------------------------------------------------

_COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "batch": batch,
    "srun": srun,
    "scontrol": scontrol,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in _COMMANDS:
        print(f"usage: slurmstep.py {{{'|'.join(_COMMANDS)}}} ...", file=sys.stderr)
        return EXIT_USAGE
    name = args[0]
    try:
        return _COMMANDS[name](args[1:])
    except SlurmError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
