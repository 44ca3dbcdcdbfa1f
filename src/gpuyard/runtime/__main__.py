"""``python -m gpuyard.runtime simulate --after S -- COMMAND…``: test suspend/resume locally.

See `gpuyard.runtime.simulate` and docs/runtime.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuyard.runtime.simulate import simulate

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpuyard.runtime",
        description="Tools for scripts that use gpuyard.runtime.",
    )
    commands = parser.add_subparsers(dest="tool", required=True)
    sim = commands.add_parser(
        "simulate",
        help="run a command, preempt it after S seconds, and resume it as the platform would",
        description=(
            "Run COMMAND with GPUYARD_SIMULATE_PREEMPTION_AFTER=S. When it leaves suspended "
            "(exit 75, or a failing exit after it wrote suspended.json, as under torchrun), "
            "run it again with GPUYARD_ATTEMPT one higher and the same checkpoint dir, until "
            "it ends otherwise. Exits with the command's last exit status."
        ),
    )
    sim.add_argument(
        "--after",
        type=float,
        required=True,
        metavar="S",
        help="seconds after the script's first poll at which the notice arrives (attempt 0)",
    )
    sim.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="GPUYARD_CHECKPOINT_DIR for every attempt (default: $GPUYARD_CHECKPOINT_DIR, "
        "else checkpoints/ in the run's directory)",
    )
    sim.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="the run's directory: its checkpoints/ and outputs/ (GPUYARD_OUTPUT_DIR) unless "
        "the environment names them; name one to keep them, or to resume from them in a "
        "second run (default: a new temp dir, printed; never the current directory)",
    )
    sim.add_argument(
        "--control-dir",
        type=Path,
        default=None,
        help="create the run's control dirs under this directory (default: the temp dir)",
    )
    sim.add_argument(
        "--max-attempts",
        type=int,
        default=10,
        help="stop after this many attempts that all ended suspended (default 10)",
    )
    sim.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("simulate: give the command after --, e.g. -- python train.py")
    if args.after < 0:
        parser.error("simulate: --after must be >= 0 seconds")
    if args.max_attempts < 1:
        parser.error("simulate: --max-attempts must be >= 1")
    return simulate(
        command,
        after=args.after,
        checkpoint_dir=args.checkpoint_dir,
        control_root=args.control_dir,
        run_dir=args.out,
        max_attempts=args.max_attempts,
    )


if __name__ == "__main__":
    sys.exit(main())
