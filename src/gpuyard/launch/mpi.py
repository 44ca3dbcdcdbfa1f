"""The MPI command rules of docs/distributed.md (Horovod 模式, MPI jobs).

A command without ``mpirun`` gets a prefix; one with ``mpirun`` is left alone, since the user
then gives every MPI argument. The Open MPI prefix is the reference's, word for word. It writes
``-bind-to none -map-by slot``, which Open MPI up to 4 read, while Open MPI 5's mpirun (the one
we ship, 5.0.x from PyPI) loses the value of a single-dash long option (``-bind-to none`` ends
with "Executable: none"); an Open MPI job's launcher therefore finds a small ``mpirun`` of ours
first on its PATH that spells those options with two dashes and runs the real one
(``launch.plan.MPIRUN_SHIM``), so the prefix, and users' commands written for Open MPI 4, run
unchanged. Hydra (MPICH) does not take Open MPI's ``-x``/``-mca`` flags and forwards the
environment by itself, so its prefix only sets the process count.
"""

from __future__ import annotations

from gpuyard.models.command import Literal, ParsedCommand
from gpuyard.models.job import MpiImplementation

__all__ = ["mpi_prefix", "uses_mpirun", "with_mpi_prefix"]


def mpi_prefix(implementation: MpiImplementation, processes: int) -> list[str]:
    if implementation is MpiImplementation.MPICH:
        return ["mpirun", "-np", str(processes)]
    return [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(processes),
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        "-x",
        "NCCL_DEBUG=INFO",
        "-x",
        "LD_LIBRARY_PATH",
        "-x",
        "PATH",
        "-mca",
        "pml",
        "ob1",
        "-mca",
        "btl",
        "^openib",
    ]


def uses_mpirun(command: ParsedCommand) -> bool:
    """The reference's test: the command contains ``mpirun`` (or, as an extension, ``mpiexec``)."""
    return any("mpirun" in w or "mpiexec" in w for w in command.display_words())


def with_mpi_prefix(
    command: ParsedCommand, implementation: MpiImplementation, processes: int
) -> ParsedCommand:
    if uses_mpirun(command):
        return command
    prefix = tuple((Literal(w, True),) for w in mpi_prefix(implementation, processes))
    return ParsedCommand(prefix + command.words)
