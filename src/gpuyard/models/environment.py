"""What a job inherits from the pool's environment: an allowlist, never the whole of it.

The environment of ``gpuyard up`` may hold secrets (``PGPASSWORD``, cloud keys, tokens), and
every job's ``env`` would print them. So a job starts from the names below only (plus what an
admin adds with ``GPUYARD_JOB_ENV_ALLOW``), then gets what gpuyard sets (the env contract,
HOME/USER/LOGNAME of its account) and its own ``env``: docs/security.md, "What the job gets".

Rules, in order:

- ``GPUYARD_*`` is never inherited (the pool's own configuration, tokens among it), whatever
  the allowlist says; nor are ``HOME``, ``USER``, ``LOGNAME`` (a worker gets its account's) or
  ``CUDA_VISIBLE_DEVICES`` (the job's GPUs are gpuyard's to name);
- a name is inherited when it matches an entry of the allowlist: an exact name, or a glob
  (``LC_*``, ``NCCL_*``; ``fnmatch`` rules, case-sensitive).

Pure: the environment and the allowlist come in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

__all__ = [
    "DEFAULT_JOB_ENV_ALLOW",
    "HOST_ONLY_ENV",
    "NEVER_INHERITED",
    "inherited_environment",
    "parse_allowlist",
]

DEFAULT_JOB_ENV_ALLOW: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_MODULE_LOADING",
    "NCCL_*",
)
"""Names a job inherits from the pool's environment unless an admin says otherwise: where to
find programs and libraries, the locale and time zone, and the CUDA/NCCL tuning a site sets
for the whole machine (none of them a credential)."""

NEVER_INHERITED: tuple[str, ...] = (
    "GPUYARD_*",
    "HOME",
    "USER",
    "LOGNAME",
    "CUDA_VISIBLE_DEVICES",
)
"""Never taken from the pool, even when an admin's allowlist names them."""

HOST_ONLY_ENV: tuple[str, ...] = (
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "CUDA_HOME",
    "CUDA_PATH",
)
"""Where the node keeps its programs and libraries: a job in an image does not inherit them
from the pool (the image's ``ENV`` says where its own are); the job may still set them."""


def parse_allowlist(text: str | Iterable[str]) -> tuple[str, ...]:
    """An allowlist from ``GPUYARD_JOB_ENV_ALLOW`` (``NAME,LC_*,…``) or a list of entries:
    surrounding spaces and empty entries dropped. Raises ValueError on an entry that cannot
    be a variable name or a glob of one."""
    entries = text.split(",") if isinstance(text, str) else list(text)
    cleaned = tuple(e.strip() for e in entries if e.strip())
    for entry in cleaned:
        if "=" in entry or any(c.isspace() for c in entry):
            raise ValueError(
                f"{entry!r} is not an environment variable name or a glob of one "
                "(give names and globs separated by commas: PATH,LC_*,MY_SITE_*)"
            )
    return cleaned


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def inherited_environment(
    environment: Mapping[str, str], extra_allow: Iterable[str] = ()
) -> dict[str, str]:
    """The part of ``environment`` (the pool's) a job inherits: names matching
    :data:`DEFAULT_JOB_ENV_ALLOW` or ``extra_allow``, less :data:`NEVER_INHERITED`."""
    allow = (*DEFAULT_JOB_ENV_ALLOW, *extra_allow)
    return {
        name: value
        for name, value in environment.items()
        if _matches(name, allow) and not _matches(name, NEVER_INHERITED)
    }
