"""What a job takes from the submitter's environment: Slurm's ``--export`` rule, in one place.

``sbatch``, ``gpuyard submit`` (``--export``, a job file's ``export:``) and the Python client
(``submit(..., export=)``) all capture the submitting process's environment with
:func:`exported_environment` and send what it keeps as the spec's ``env`` (docs/jobs.md, "The
job's environment"). Standard library only: ``sbatch``'s quick path loads it without pydantic
and the models, which is why it sits with the foundations and not in ``models/``.

``export`` reads as Slurm's (``sbatch --export``):

- ``ALL`` (the default): every variable of the submitter, less what is never forwarded;
- ``NONE``: none of them;
- a comma-separated list, after ``ALL`` or ``NONE`` or alone (alone means ``NONE``): ``NAME``
  takes that variable from the submitter (when set), ``NAME=VALUE`` sets it (the value may hold
  ``=``, not ``,``).

Never forwarded, and refused when named: ``SLURM_*``, ``SLURMD_*``, ``SBATCH_*``, ``SRUN_*``,
``SALLOC_*`` and ``GPUYARD_*`` (the pool sets them; a token does not belong in a job's spec),
and :data:`POOL_SET` (the job's account's ``HOME``/``USER``/``LOGNAME``, its GPUs, a
notebook's ``JUPYTER_TOKEN``). Names that
are not variable names and values holding NUL are dropped from ``ALL``. When what is kept
exceeds the spec's limits (:data:`gpuyard.spec_limits.MAX_ENV`, ``MAX_ENV_BYTES``), the
biggest values go first (``LS_COLORS`` and exported shell functions rarely matter to a job);
``PATH``, ``PYTHONPATH``, ``LD_LIBRARY_PATH`` and ``VIRTUAL_ENV`` stay.
"""

from __future__ import annotations

import re

from gpuyard.spec_limits import MAX_ENV, MAX_ENV_BYTES

TYPE_CHECKING = False  # typing is not imported at run time: sbatch's quick path runs without it
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["NOT_FORWARDED", "POOL_SET", "ExportError", "exported_environment"]

NOT_FORWARDED = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "GPUYARD_")
"""Prefixes of what the pool sets itself, its tokens among them."""
POOL_SET = ("HOME", "USER", "LOGNAME", "CUDA_VISIBLE_DEVICES", "JUPYTER_TOKEN")
"""Set by the pool for the job's OS account and its GPUs (and a notebook's token: a job
submitted from a notebook does not carry it), whatever the submitter's say."""
_KEPT = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ExportError(ValueError):
    """An ``--export`` value that names what cannot be given; the message says what."""


def _forwardable(name: str) -> bool:
    return not name.startswith(NOT_FORWARDED) and name not in POOL_SET


def _check_name(name: str) -> None:
    if not _ENV_NAME.match(name):
        raise ExportError(f"--export: {name!r} is not a variable name")
    if not _forwardable(name):
        raise ExportError(
            f"--export: {name} cannot be given to a job (the pool sets SLURM_*, GPUYARD_*, "
            "HOME, USER, LOGNAME, CUDA_VISIBLE_DEVICES and JUPYTER_TOKEN itself, and a token "
            "does not belong in a job's spec)"
        )


def exported_environment(environ: Mapping[str, str], export: str | None) -> dict[str, str]:
    """What the job gets from ``environ`` (the submitter's) under ``export`` (None: ``ALL``)."""
    usable = {
        k: v for k, v in environ.items() if _ENV_NAME.match(k) and _forwardable(k) and "\0" not in v
    }
    items = [x.strip() for x in (export or "ALL").split(",") if x.strip()]
    first = items[0].upper() if items else "ALL"
    chosen: dict[str, str] = dict(usable) if first == "ALL" else {}
    if first in ("ALL", "NONE"):
        items = items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        _check_name(name)
        if eq:
            chosen[name] = value
        elif name in usable:
            chosen[name] = usable[name]
    return _within_limits(chosen)


def _size(env: Mapping[str, str]) -> int:
    return sum(len(k) + len(v) for k, v in env.items())


def _within_limits(chosen: dict[str, str]) -> dict[str, str]:
    if len(chosen) <= MAX_ENV and _size(chosen) <= MAX_ENV_BYTES:
        return chosen
    for name in sorted(chosen, key=lambda k: -len(chosen[k])):
        if len(chosen) <= MAX_ENV and _size(chosen) <= MAX_ENV_BYTES:
            break
        if name not in _KEPT:
            del chosen[name]
    return chosen
