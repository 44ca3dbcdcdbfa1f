"""Whether a job's OS account can run its program: the rule checked at submission.

A job's worker ``exec``s its command's first word as the job's account (docs/security.md,
"Jobs run as their owner"), looked up on the ``PATH`` the job gets. When that account may not
search a directory on the way to the file, or may not execute the file, the kernel refuses
the ``exec`` and the job fails at launch (``cannot execute 'python' as 'gpy-alice':
Permission denied``). The submission checks the same thing first, so the refusal comes with
its fix before anything is queued (docs/jobs.md, "The job's environment").

Pure: the facts about each path (mode, owner, group) and the account come in as values; the
lookups are :mod:`gpuyard.services.program_check`'s. The rules, POSIX's:

- each directory from ``/`` down to the file's needs ``x`` (search), the file itself ``x``;
- the bits that count are the owner's when the account owns the path, else the group's when
  the path's group is one of the account's groups, else the others';
- an account that does not exist yet (a ``gpy-…`` account is made at the first launch, with a
  group of its own) owns nothing and is in no group: the others' bits count.

What is not checked (no guess is a refusal): a job in an image (its files are the image's), a
Slurm batch job (its script names its programs), a first word that is a ``$VARIABLE``, and a
program not found on the job's ``PATH`` (the node it runs on may have it).
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuyard.models.command import CommandError, parse_command
from gpuyard.models.job import JobMode, JobSpec

__all__ = [
    "Account",
    "PathFacts",
    "blocked_at",
    "candidates",
    "chain_of",
    "program_of",
    "refusal",
    "search_path",
]

_SEARCH = 0o1  # the x bit of a permission triplet


@dataclass(frozen=True, slots=True)
class PathFacts:
    """What the permission rule needs of one path (``os.stat``'s)."""

    path: str
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Account:
    """The OS account a job runs as; ``uid`` None: not made yet (it owns nothing)."""

    name: str
    uid: int | None
    groups: frozenset[int]


def _may_pass(facts: PathFacts, account: Account) -> bool:
    if facts.uid == account.uid:
        shift = 6
    elif facts.gid in account.groups:
        shift = 3
    else:
        shift = 0
    return bool((facts.mode >> shift) & _SEARCH)


def blocked_at(chain: Sequence[PathFacts], account: Account) -> PathFacts | None:
    """The first path of ``chain`` (each directory from ``/`` down, then the file) that
    ``account`` may not pass, or None when it may run the file."""
    return next((facts for facts in chain if not _may_pass(facts, account)), None)


def program_of(spec: JobSpec) -> list[str]:
    """The programs the job's workers ``exec`` (one per task), as typed: the first word of
    each command. Empty where the check does not apply (an image, a Slurm batch job)."""
    if spec.image is not None or spec.mode is JobMode.SLURM:
        return []
    programs = []
    for command in spec.commands():
        try:
            first = parse_command(command).executable
        except CommandError:
            continue  # the submission's own check says why
        if "${" not in first and first not in programs:
            programs.append(first)
    return programs


def search_path(spec: JobSpec, pool_env: Mapping[str, str]) -> str:
    """The ``PATH`` the job's program is looked up on: the job's own (``env``, where the
    submitter's is captured), else the one it inherits from the pool."""
    return spec.env.get("PATH", pool_env.get("PATH", ""))


def candidates(program: str, path: str, workdir: str | None) -> list[str]:
    """Where ``exec`` looks for ``program``, in order: itself when it names a path (relative
    to ``workdir``, none when that is unknown), else each directory of ``path``."""
    if "/" in program:
        if program.startswith("/"):
            return [posixpath.normpath(program)]
        return [posixpath.normpath(posixpath.join(workdir, program))] if workdir else []
    return [posixpath.join(d or ".", program) for d in path.split(":") if d.startswith("/")]


def chain_of(file: str) -> list[str]:
    """``/a/b/python`` → ``/``, ``/a``, ``/a/b``, ``/a/b/python``: what ``exec`` passes."""
    parts = file.strip("/").split("/")
    return ["/", *("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))]


def refusal(program: str, file: str, blocked: PathFacts, account: Account) -> str:
    """Why the submission is refused, and what to do."""
    what = "search the directory" if stat.S_ISDIR(blocked.mode) else "execute"
    found = f" (found at {file} on the job's PATH)" if "/" not in program else ""
    return (
        f"the job's account {account.name!r} cannot run {program!r}{found}: it may not "
        f"{what} {blocked.path} (mode {blocked.mode & 0o7777:04o}). Install the program into "
        "a path other accounts can read and search (e.g. a virtual environment outside /root "
        "and your home, or chmod o+x the directories on the way), or run the job in an image "
        "(--image)"
    )
