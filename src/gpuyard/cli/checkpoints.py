"""Checkpoint commands (docs/checkpoints.md): `gpuyard checkpoints JOB`, and the step a job
resumes from (`gpuyard resume JOB --from STEP|latest`, in cli/jobs.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuyard.models.checkpoints import CheckpointList

__all__ = ["parse_step", "print_listing", "register"]


def register(app: typer.Typer) -> None:
    app.command()(checkpoints)


def checkpoints(
    job_id: Annotated[int, typer.Argument(help="A job id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    pin: Annotated[
        int | None, typer.Option(help="Keep this step on storage whatever the retention.")
    ] = None,
    unpin: Annotated[int | None, typer.Option(help="Let a pinned step go again.")] = None,
) -> None:
    """The job's complete checkpoints saved through `gpuyard.runtime.save`: step, time, size,
    and where each is held (storage; node memory while the job has not ended)."""
    from gpuyard.cli.output import print_json
    from gpuyard.client import Client

    client = Client()
    if pin is not None:
        client.pin_checkpoint(job_id, pin)
    if unpin is not None:
        client.pin_checkpoint(job_id, unpin, pinned=False)
    listing = client.checkpoints(job_id)
    if as_json:
        print_json(listing)
        return
    print_listing(listing)


def print_listing(listing: CheckpointList) -> None:
    import time

    from rich.table import Table

    from gpuyard.cli.output import console
    from gpuyard.quantities import format_bytes

    table = Table("STEP", "SAVED", "SIZE", "HELD", "PINNED", box=None)
    for view in listing.checkpoints:
        held = ", ".join(
            p.value + (f" ({', '.join(view.nodes)})" if p.value == "memory" else "")
            for p in view.held
        )
        saved = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view.time)) if view.time else "-"
        table.add_row(
            str(view.step),
            saved,
            format_bytes(view.size) if view.size else "-",
            held,
            "yes" if view.pinned else "",
        )
    out = console()
    if not listing.checkpoints:
        out.print(
            f"job {listing.job_id}: no complete checkpoint saved through gpuyard.runtime.save"
        )
    else:
        out.print(table)
    if listing.partial:
        out.print(f"incomplete (not resumed from): {', '.join(map(str, listing.partial))}")
    if listing.resume_step is not None:
        out.print(f"its next attempt resumes from step {listing.resume_step}")


def parse_step(text: str) -> int | None:
    """``latest`` -> None, a whole number -> itself; else a clear error."""
    value = text.strip().lower()
    if value == "latest":
        return None
    if not value.isdigit():
        raise typer.BadParameter(f"--from takes a step number or 'latest', not {text!r}")
    return int(value)
