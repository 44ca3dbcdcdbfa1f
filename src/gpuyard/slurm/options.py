"""``sbatch``'s options: the command line and the script's ``#SBATCH`` lines, as Slurm reads them.

Pure: text in, values out. The command line overrides the script; inside the script, the first
line that is neither blank nor a comment ends the directives, and one ``#SBATCH`` line may hold
several options. Options Slurm has and gpuyard has no use for are kept (``SbatchOptions.kept``)
when they cannot change what the job computes; the others are refused with a message that says
so, never silently dropped.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "ArraySpec",
    "OptionError",
    "SbatchOptions",
    "parse_array",
    "parse_memory_mb",
    "parse_sbatch",
    "parse_time",
    "script_components",
]


class OptionError(ValueError):
    """What sbatch prints after ``sbatch: error: ``."""


# long name -> (short, takes a value)
_OPTIONS: dict[str, tuple[str | None, bool]] = {
    "job-name": ("J", True),
    "partition": ("p", True),
    "time": ("t", True),
    "nodes": ("N", True),
    "ntasks": ("n", True),
    "ntasks-per-node": (None, True),
    "tasks-per-node": (None, True),
    "cpus-per-task": ("c", True),
    "gpus": ("G", True),
    "gpus-per-node": (None, True),
    "gpus-per-task": (None, True),
    "gres": (None, True),
    "mem": (None, True),
    "mem-per-cpu": (None, True),
    "mem-per-gpu": (None, True),
    "cpus-per-gpu": (None, True),
    "output": ("o", True),
    "error": ("e", True),
    "input": ("i", True),
    "open-mode": (None, True),
    "array": ("a", True),
    "signal": (None, True),
    "requeue": (None, False),
    "no-requeue": (None, False),
    "exclusive": (None, False),
    "dependency": ("d", True),
    "chdir": ("D", True),
    "export": (None, True),
    "hold": ("H", False),
    "wrap": (None, True),
    "parsable": (None, False),
    "qos": ("q", True),
    "account": ("A", True),
    "comment": (None, True),
    "constraint": ("C", True),
    "exclude": ("x", True),
    "nodelist": ("w", True),
    "wckey": (None, True),
    "mail-type": (None, True),
    "mail-user": (None, True),
    "reservation": (None, True),
    "begin": ("b", True),
    "deadline": (None, True),
    "test-only": (None, False),
    "verbose": ("v", False),
    "quiet": ("Q", False),
    "wait": ("W", False),
    "kill-on-invalid-dep": (None, True),
    "nice": (None, True),
    "priority": (None, True),
    "profile": (None, True),
    "distribution": ("m", True),
    "hint": (None, True),
    "cpu-bind": (None, True),
    "mem-bind": (None, True),
    "propagate": (None, True),
    "licenses": ("L", True),
    "get-user-env": (None, False),
    "export-file": (None, True),
    "sockets-per-node": (None, True),
    "cores-per-socket": (None, True),
    "threads-per-core": (None, True),
    "ntasks-per-core": (None, True),
    "ntasks-per-socket": (None, True),
    "ntasks-per-gpu": (None, True),
    "tmp": (None, True),
    "spread-job": (None, False),
    "use-min-nodes": (None, False),
    "switches": (None, True),
    "gres-flags": (None, True),
    "acctg-freq": (None, True),
    "overcommit": ("O", False),
    "oversubscribe": ("s", False),
    "contiguous": (None, False),
    "no-kill": ("k", False),
    "cluster-constraint": (None, True),
    "clusters": ("M", True),
    "uid": (None, True),
    "gid": (None, True),
    "container": (None, True),
    "network": (None, True),
    "power": (None, True),
    "thread-spec": (None, True),
    "core-spec": ("S", True),
    "wait-all-nodes": (None, True),
    "x11": (None, False),
    "mcs-label": (None, True),
    "delay-boot": (None, True),
    "batch": (None, True),
    "bb": (None, True),
    "bbf": (None, True),
    "cpu-freq": (None, True),
    "ignore-pbs": (None, False),
    # pyxis (NVIDIA's container plugin for Slurm): docs/slurm.md, "Containers"
    "container-image": (None, True),
    "container-mounts": (None, True),
    "container-workdir": (None, True),
    "container-env": (None, True),
    "container-name": (None, True),
    "container-save": (None, True),
    "container-mount-home": (None, False),
    "no-container-mount-home": (None, False),
    "container-remap-root": (None, False),
    "no-container-remap-root": (None, False),
    "container-entrypoint": (None, False),
    "no-container-entrypoint": (None, False),
    "container-writable": (None, False),
    "container-readonly": (None, False),
}
_SHORT = {short: long for long, (short, _) in _OPTIONS.items() if short}
_ALIASES = {"tasks-per-node": "ntasks-per-node", "cpu_bind": "cpu-bind", "mem_bind": "mem-bind"}

KEPT = frozenset(
    {
        "wckey",
        "mail-type",
        "mail-user",
        "comment",
        "reservation",
        "account",
        "constraint",
        "profile",
        "distribution",
        "hint",
        "cpu-bind",
        "mem-bind",
        "propagate",
        "licenses",
        "get-user-env",
        "sockets-per-node",
        "cores-per-socket",
        "threads-per-core",
        "ntasks-per-core",
        "ntasks-per-socket",
        "tmp",
        "spread-job",
        "use-min-nodes",
        "switches",
        "gres-flags",
        "acctg-freq",
        "overcommit",
        "oversubscribe",
        "contiguous",
        "no-kill",
        "kill-on-invalid-dep",
        "nice",
        "verbose",
        "quiet",
        "wait-all-nodes",
        "mcs-label",
        "cpu-freq",
        "ignore-pbs",
        "network",
        "power",
        "thread-spec",
        "core-spec",
        "delay-boot",
        "container",
        "cpus-per-gpu",
        "ntasks-per-gpu",
        "priority",
        "no-container-mount-home",
        "no-container-remap-root",
        "container-entrypoint",
        "container-writable",
    }
)
"""Options kept with the job and without effect here: they cannot change what it computes."""

REFUSED = {
    "deadline": "--deadline is not supported yet",
    "test-only": "--test-only is not supported; `gpuyard predict` estimates the start",
    "clusters": "gpuyard is one cluster; remove --clusters",
    "cluster-constraint": "gpuyard is one cluster; remove --cluster-constraint",
    "uid": "jobs run as their owner; remove --uid",
    "gid": "jobs run as their owner; remove --gid",
    "x11": "X11 forwarding is not supported",
    "bb": "burst buffers are not supported",
    "bbf": "burst buffers are not supported",
    "batch": "--batch (node features for the batch step) is not supported",
    "export-file": "--export-file is not supported; use --export",
    "wait": "--wait is not supported; poll with squeue or sacct",
    "input": "a batch job reads no standard input here; remove --input",
    "gres": "",
    "ntasks-per-gpu": "",
    "container-name": "named containers are not kept between steps here; the job's own "
    "writable layer lasts as long as each worker",
    "container-save": "saving a container is not supported; push an image with "
    "`gpuyard images push`",
    "container-mount-home": "the home directory is not mounted into images here; mount it "
    "with --container-mounts=$HOME",
    "container-remap-root": "jobs run as their owner inside images, never as root",
    "no-container-entrypoint": "the image's ENTRYPOINT always runs here (docs/images.md)",
    "container-readonly": "the image's root is writable here, in a layer of the worker's own",
}
"""Options refused with the reason (an empty reason: refused only for some values)."""


PROPAGATED = frozenset(
    {
        "account",
        "begin",
        "comment",
        "dependency",
        "error",
        "export",
        "exclude",
        "hold",
        "job-name",
        "mail-type",
        "mail-user",
        "no-requeue",
        "open-mode",
        "output",
        "partition",
        "qos",
        "requeue",
        "reservation",
        "signal",
        "time",
        "wckey",
    }
)
"""Options a heterogeneous job's component takes from the one before it unless it sets them
(Slurm's list, less what gpuyard has no use for); the others start from their defaults."""

HETJOB = ("hetjob", "packjob")
"""The ``#SBATCH`` line that ends a component of a heterogeneous job (packjob: its old name)."""


@dataclass
class SbatchOptions:
    values: dict[str, str] = field(default_factory=dict)
    """Long name -> the last value given (flags: ""): the job's own options, which are its
    first component's."""
    script_args: list[str] = field(default_factory=list)
    script_path: str | None = None
    components: list[dict[str, str]] = field(default_factory=list)
    """A heterogeneous job's components, each as ``values`` (the first is ``values``); empty
    for a plain job."""


def _split_cli(  # noqa: PLR0912 - getopt's cases, read top to bottom
    args: Sequence[str], *, stop_at_positional: bool, source: str
) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    i = 0
    rest: list[str] = []
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest = list(args[i + 1 :])
            break
        if not arg.startswith("-") or arg == "-":
            if stop_at_positional:
                rest = list(args[i:])
                break
            raise OptionError(f"{source}: unexpected word {arg!r}")
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            name = _ALIASES.get(name, name)
            if name not in _OPTIONS:
                raise OptionError(f"unrecognized option '{arg}'")
            takes = _OPTIONS[name][1]
            if takes and not eq:
                if i + 1 >= len(args):
                    raise OptionError(f"option '--{name}' requires an argument")
                value = args[i + 1]
                i += 1
            elif (
                not takes
                and eq
                and name in ("requeue", "no-requeue", "exclusive", "hold", "parsable")
            ):
                raise OptionError(f"option '--{name}' doesn't allow an argument")
            values[name] = value if takes else ""
        else:
            letter = arg[1:2]
            if letter not in _SHORT:
                raise OptionError(f"invalid option -- '{letter}'")
            name = _SHORT[letter]
            if _OPTIONS[name][1]:
                value = arg[2:]
                if not value:
                    if i + 1 >= len(args):
                        raise OptionError(f"option requires an argument -- '{letter}'")
                    value = args[i + 1]
                    i += 1
                values[name] = value
            else:
                values[name] = ""
                for extra in arg[2:]:  # -vv, -HQ
                    if extra not in _SHORT or _OPTIONS[_SHORT[extra]][1]:
                        raise OptionError(f"invalid option -- '{extra}'")
                    values[_SHORT[extra]] = ""
        i += 1
    return values, rest


def script_components(script: str) -> list[list[str]]:
    """The words of the script's ``#SBATCH`` lines, in order (several options per line), per
    component: a ``#SBATCH hetjob`` line starts the next component of a heterogeneous job."""
    components: list[list[str]] = [[]]
    for number, line in enumerate(script.splitlines()):
        stripped = line.strip()
        if number == 0 and stripped.startswith("#!"):
            continue
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break  # the first command ends the directives
        text = stripped[len("#SBATCH") :]
        if text and not text[0].isspace():
            continue  # "#SBATCHfoo" is a comment
        try:
            words = shlex.split(text, comments=True)  # an unquoted '#' ends it, as in Slurm
        except ValueError as exc:
            raise OptionError(f"script line {number + 1}: {exc}: {stripped}") from None
        if words and words[0] in HETJOB:
            if len(words) > 1:
                raise OptionError(
                    f"script line {number + 1}: {words[0]} stands alone on its line: {stripped}"
                )
            components.append([])
            continue
        components[-1] += words
    return components


def _cli_components(args: Sequence[str]) -> tuple[list[dict[str, str]], list[str]]:
    """The command line's options per component (``sbatch A : B script``), and what follows
    them (the script and its arguments)."""
    components: list[dict[str, str]] = []
    rest = list(args)
    while True:
        values, rest = _split_cli(rest, stop_at_positional=True, source="command line")
        components.append(values)
        if not rest or rest[0] != ":":
            return components, rest
        rest = rest[1:]


def parse_sbatch(args: Sequence[str], script: str | None) -> SbatchOptions:
    """The command line (``args``: options, then the script and its arguments) over the
    script's directives. ``script`` is None while the script is not read yet (the first call
    finds its path); the second call passes it.

    A heterogeneous job's components (``:`` on the command line, ``#SBATCH hetjob`` in the
    script) are read one by one: the command line's n-th over the script's n-th, each over
    what the one before it propagates (:data:`PROPAGATED`)."""
    cli, rest = _cli_components(args)
    options = SbatchOptions()
    if rest:
        options.script_path, options.script_args = rest[0], rest[1:]
    directives: list[dict[str, str]] = []
    if script is not None:
        directives = [
            _split_cli(words, stop_at_positional=False, source="#SBATCH")[0]
            for words in script_components(script)
        ]
    count = max(len(cli), len(directives))
    components: list[dict[str, str]] = []
    for index in range(count):
        values = {}
        if components:
            values = {k: v for k, v in components[-1].items() if k in PROPAGATED}
        if index < len(directives):
            values.update(directives[index])
        if index < len(cli):
            values.update(cli[index])
        components.append(values)
    options.values = components[0] if components else {}
    if len(components) > 1:
        options.components = components
    return options


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time(text: str) -> float | None:
    """``--time``: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; None for UNLIMITED/INFINITE/0... as
    Slurm reads it (0 is no limit)."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    match = _TIME.match(value)
    if match is None:
        raise OptionError("Invalid --time specification")
    days, a, b, c = match.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # H:M:S
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # M:S
        seconds = int(a) * 60 + int(b)
    else:  # M
        seconds = int(a) * 60
    return None if seconds == 0 else float(seconds)


_BEGIN_UNITS = {
    "": 1,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_BEGIN_NAMED = {"midnight": (0, 0), "elevenses": (11, 0), "noon": (12, 0), "fika": (15, 0),
                "teatime": (16, 0)}  # fmt: skip
_BEGIN_NOW = re.compile(r"^now(?:([+-])(\d+)\s*([a-z]*))?$")
_BEGIN_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?$")
_BEGIN_ISO = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[t-](\d{1,2}):(\d{2})(?::(\d{2}))?)?$")
_BEGIN_DATE = re.compile(
    r"^(\d{2})[/.]?(\d{2})(?:[/.]?(\d{2}))?(?:-(\d{1,2}):(\d{2})(?::(\d{2}))?)?$"
)


def parse_begin(text: str, now: float) -> float:
    """``--begin``, as Slurm's parse_time reads it, in local time: ``now[+N[units]]`` (units
    seconds by default, or minutes, hours, days, weeks), ``HH:MM[:SS][AM|PM]`` and ``midnight
    noon elevenses fika teatime`` (today, or tomorrow once passed), ``today``, ``tomorrow``,
    ``YYYY-MM-DD[THH:MM[:SS]]``, ``MMDD[YY]``, ``MM/DD[/YY]``, ``MM.DD[.YY]`` (with
    ``-HH:MM[:SS]``). Anything else raises OptionError as Slurm's sbatch words it."""
    found = slurm_time(text, now)
    if found is None:
        raise OptionError("Invalid --begin specification")
    return found


def slurm_time(text: str, now: float, *, past: bool = False) -> float | None:  # noqa: PLR0911 - a return per form Slurm reads
    """A time in one of the forms of :func:`parse_begin` (also ``now-N[units]``), or None.
    ``past``: a time of day or a date without a year means the last one, not the next one
    (sacct's ``--starttime``)."""
    import datetime as dt

    value = text.strip().lower()
    today = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)

    def at(day: dt.datetime, hour: int, minute: int, second: int = 0) -> float:
        moment = day.replace(hour=hour, minute=minute, second=second)
        return moment.timestamp()

    def upcoming(hour: int, minute: int, second: int = 0) -> float:
        moment = at(today, hour, minute, second)
        if past:
            return (
                moment if moment <= now else at(today - dt.timedelta(days=1), hour, minute, second)
            )
        return moment if moment > now else at(today + dt.timedelta(days=1), hour, minute, second)

    try:
        if match := _BEGIN_NOW.match(value):
            sign, count, unit = match.groups()
            unit = unit or ""
            if unit not in _BEGIN_UNITS:
                raise ValueError(unit)
            delta = int(count or 0) * _BEGIN_UNITS[unit]
            return float(int(now) + (-delta if sign == "-" else delta))
        if value in _BEGIN_NAMED:
            return upcoming(*_BEGIN_NAMED[value])
        if value in ("today", "tomorrow"):
            return at(today + dt.timedelta(days=int(value == "tomorrow")), 0, 0)
        if match := _BEGIN_CLOCK.match(value):
            hour, minute, second, half = match.groups()
            hours = int(hour)
            if half:
                if not 1 <= hours <= 12:
                    raise ValueError(hour)
                hours = hours % 12 + (12 if half == "pm" else 0)
            return upcoming(hours, int(minute), int(second or 0))
        if match := _BEGIN_ISO.match(value):
            year, month, day, hour, minute, second = match.groups()
            moment = dt.datetime(int(year), int(month), int(day))
            return at(moment, int(hour or 0), int(minute or 0), int(second or 0))
        if match := _BEGIN_DATE.match(value):
            month, day, year, hour, minute, second = match.groups()
            full_year = 2000 + int(year) if year else today.year
            moment = dt.datetime(full_year, int(month), int(day))
            if not year and not past and at(moment, 23, 59, 59) < now:
                moment = moment.replace(year=full_year + 1)  # a date passed means next year's
            elif not year and past and at(moment, 0, 0) > now:
                moment = moment.replace(year=full_year - 1)
            return at(moment, int(hour or 0), int(minute or 0), int(second or 0))
    except (ValueError, OverflowError):
        pass
    return None


_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?$", re.IGNORECASE)


def parse_memory_mb(text: str, option: str) -> int:
    """``--mem`` and friends: a number of megabytes, or with K/M/G/T (also KB/MB/GB/TB)."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise OptionError(f"Invalid {option} specification")
    number, unit = float(match.group(1)), match.group(2).upper()
    factor = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return max(0, int(number * factor + 0.5))


@dataclass(frozen=True)
class ArraySpec:
    indices: tuple[int, ...]
    throttle: int | None
    text: str

    @property
    def step(self) -> int:
        gaps = {b - a for a, b in zip(self.indices, self.indices[1:], strict=False)}
        return gaps.pop() if len(gaps) == 1 else 1


MAX_ARRAY = 1001
"""Slurm's default MaxArraySize: indices 0..1000."""


def parse_array(text: str) -> ArraySpec:
    """``0-9``, ``0-15:4``, ``1,3,5``, ``0-9%2``."""
    body, percent, throttle_text = text.strip().partition("%")
    throttle = None
    if percent:
        if not throttle_text.isdigit():
            raise OptionError("Invalid job array specification")
        throttle = int(throttle_text) or None
    indices: set[int] = set()
    for part in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if match is None:
            raise OptionError("Invalid job array specification")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        step = int(match.group(3)) if match.group(3) else 1
        if high < low or step < 1 or high >= MAX_ARRAY:
            raise OptionError("Invalid job array specification")
        indices.update(range(low, high + 1, step))
    if not indices:
        raise OptionError("Invalid job array specification")
    return ArraySpec(tuple(sorted(indices)), throttle, text.strip())
