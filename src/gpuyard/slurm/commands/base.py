"""What every Slurm command shares: its errors, its client, its getopt, job ids."""

from __future__ import annotations

from collections.abc import Sequence

from gpuyard.client import Client

__all__ = [
    "SLURM_VERSION",
    "Args",
    "BadJobId",
    "CommandError",
    "het_components",
    "open_client",
    "parse_ids",
]


SLURM_VERSION = "slurm-wlm 22.05.8"


class CommandError(Exception):
    """Printed as ``<command>: error: <message>`` (or as given, ``raw``); exits ``status``."""

    def __init__(self, message: str, *, status: int = 1, raw: bool = False) -> None:
        super().__init__(message)
        self.status, self.raw = status, raw


class BadJobId(CommandError):
    """A job id that is not one (``abc``, ``12_x``): each command words it as Slurm does."""

    def __init__(self, text: str) -> None:
        super().__init__(f"Invalid job id {text}")
        self.text = text


def open_client() -> Client:
    return Client()


class Args:
    """A small getopt: Slurm's commands mix short, long, ``--k=v`` and ``--k v``."""

    def __init__(self, args: Sequence[str], valued: dict[str, str], flags: dict[str, str]) -> None:
        self.values: dict[str, list[str]] = {}
        self.rest: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            if not arg.startswith("--") and len(arg) > 2 and arg[:2] in valued:
                name, eq, value = arg[:2], "=", arg[2:]
            if name in flags:
                self.values.setdefault(flags[name], []).append("")
            elif name in valued:
                if not eq:
                    if i + 1 >= len(args):
                        raise CommandError(f"option '{name}' requires an argument")
                    value = args[i + 1]
                    i += 1
                self.values.setdefault(valued[name], []).append(value)
            elif arg.startswith("-"):
                raise CommandError(f"unrecognized option '{arg}'")
            else:
                self.rest.append(arg)
            i += 1

    def has(self, key: str) -> bool:
        return key in self.values

    def last(self, key: str) -> str | None:
        return self.values[key][-1] if key in self.values else None

    def all(self, key: str) -> list[str]:
        return [x for v in self.values.get(key, []) for x in v.split(",") if x]


def parse_ids(texts: Sequence[str]) -> list[tuple[int, int | None]]:
    """``17``, ``17_3``, ``17_[1-3]`` (as bare array ids) → (job or array id, task or None)."""
    out: list[tuple[int, int | None]] = []
    for text in texts:
        for raw in text.split(","):
            part = raw.strip()
            if not part:
                continue
            head, _, task = part.partition("_")
            head = head.split(".")[0].split("+")[0]
            if not head.isdigit():
                raise BadJobId(part)
            if task and task.isdigit():
                out.append((int(head), int(task)))
            else:
                out.append((int(head), None))
    return out


def het_components(texts: Sequence[str]) -> dict[int, set[int]]:
    """The components that ids of the form ``L+k`` name (``sacct -j 516+1``), per job."""
    out: dict[int, set[int]] = {}
    for text in texts:
        for raw in text.split(","):
            head, plus, offset = raw.strip().split(".")[0].partition("+")
            if plus and head.isdigit() and offset.isdigit():
                out.setdefault(int(head), set()).add(int(offset))
    return out
