"""The PyTorch command rules of docs/distributed.md (PyTorch 模式), with today's launcher.

A command that starts with ``python``/``python3`` and does not already use the torch launcher is
wrapped in ``python -m torch.distributed.run`` (what ``torchrun`` runs: each process finds
``LOCAL_RANK``, ``RANK`` and ``WORLD_SIZE`` in its environment) with ``--nproc_per_node``,
``--nnodes``, ``--node_rank``, ``--master_addr`` (``localhost`` on the master, as the reference
shows) and ``--master_port``. The reference's own form, ``python -m torch.distributed.launch``,
which also passes ``--local-rank=N`` to the script (deprecated by PyTorch, and fatal to a script
whose argparse does not expect it), is the ``legacy`` launcher, for scripts that parse
``--local_rank``. A command that uses ``torchrun``, ``torch.distributed.launch`` or
``torch.distributed.run``, or starts with anything else, runs unchanged.

Interpreter options before the script (``python -u train.py``) stay before ``-m``; a module
(``python -m pkg.train``) is passed with the launcher's own ``-m``; ``python -c`` cannot be
wrapped and runs unchanged.
"""

from __future__ import annotations

import posixpath
import re

from gpuyard.models.command import Literal, ParsedCommand, Word
from gpuyard.models.job import TorchLauncher

__all__ = ["LAUNCHER_MODULES", "is_python", "uses_torch_launcher", "wrap_python"]

_PYTHON = re.compile(r"^python(3(\.\d+)*)?$")
_LAUNCHERS = ("torch.distributed.launch", "torch.distributed.run")
LAUNCHER_MODULES = {
    TorchLauncher.TORCHRUN: "torch.distributed.run",
    TorchLauncher.LEGACY: "torch.distributed.launch",
}
# Interpreter options that take a value in the next word.
_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def is_python(command: ParsedCommand) -> bool:
    return bool(_PYTHON.match(posixpath.basename(command.executable)))


def uses_torch_launcher(command: ParsedCommand) -> bool:
    words = command.display_words()
    if posixpath.basename(words[0]) == "torchrun":
        return True
    return any(launcher in word for word in words for launcher in _LAUNCHERS)


def _literal(text: str) -> Word:
    return (Literal(text, True),)


def wrap_python(
    command: ParsedCommand,
    *,
    nproc_per_node: int,
    nnodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    launcher: TorchLauncher = TorchLauncher.TORCHRUN,
) -> ParsedCommand | None:
    """The wrapped command, or None when the rules leave it unchanged."""
    if not is_python(command) or uses_torch_launcher(command):
        return None
    words = command.words
    shown = command.display_words()
    i = 1
    while i < len(words) and shown[i].startswith("-") and shown[i] != "-":
        if shown[i] == "-c":
            return None  # code on the command line: the launcher runs files and modules only
        if shown[i] == "-m":
            break
        i += 2 if shown[i] in _OPTIONS_WITH_VALUE else 1
    prefix = [
        "-m",
        LAUNCHER_MODULES[launcher],
        f"--nproc_per_node={nproc_per_node}",
        f"--nnodes={nnodes}",
        f"--node_rank={node_rank}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
    ]
    return ParsedCommand(words[:i] + tuple(_literal(w) for w in prefix) + words[i:])
