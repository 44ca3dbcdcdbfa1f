"""Entry point: ``gpuyard <command>``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuyard.cli import access as access_cli
from gpuyard.cli import admin as admin_cli
from gpuyard.cli import checkpoints as checkpoints_cli
from gpuyard.cli import config as config_cli
from gpuyard.cli import datasets as datasets_cli
from gpuyard.cli import images as images_cli
from gpuyard.cli import interactive as interactive_cli
from gpuyard.cli import job_exec as exec_cli
from gpuyard.cli import jobs as jobs_cli
from gpuyard.cli import server as server_cli
from gpuyard.cli import simulate as simulate_cli
from gpuyard.cli import slurm as slurm_cli
from gpuyard.cli import top as top_cli

app = typer.Typer(
    name="gpuyard",
    help="An AI compute pool: submit, schedule, run and watch training jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from gpuyard import __version__

        typer.echo(f"gpuyard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """An AI compute pool: submit, schedule, run and watch training jobs."""


jobs_cli.register(app)
exec_cli.register(app)
server_cli.register(app)
admin_cli.register(app)
access_cli.register(app)
images_cli.register(app)
datasets_cli.register(app)
interactive_cli.register(app)
checkpoints_cli.register(app)
simulate_cli.register(app)
slurm_cli.register(app)
top_cli.register(app)
app.add_typer(config_cli.app, name="config")


def main() -> None:
    from gpuyard.errors import GpuyardError

    try:
        app()
    except GpuyardError as exc:
        from gpuyard.cli.output import err_console

        err_console().print(f"[red]error:[/] {exc.detail}", highlight=False, markup=True)
        sys.exit(2 if exc.status_code == 422 else 1)
