"""``gpuyard exec JOB status|stop|start|run|kill``: debug a job (reference 000's ``jmt``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client
    from gpuyard.models import ExecOutcome

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

app = typer.Typer(
    help="Debug a job: hold it (stop its processes, keep its nodes), run a command on each of "
    "its nodes, check its nodes, kill what you ran, start it again. "
    "Example: gpuyard exec 7 stop; gpuyard exec 7 run -- hostname; gpuyard logs 7 --worker "
    "200000; gpuyard exec 7 start.",
    no_args_is_help=True,
)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="exec")


@app.callback()
def job(
    ctx: typer.Context,
    job_id: Annotated[int, typer.Argument(help="The job.", metavar="JOB")],
) -> None:
    ctx.obj = job_id


def _client() -> Client:
    from gpuyard.client import Client

    return Client()


def _report(outcome: ExecOutcome, as_json: bool) -> None:
    from rich.text import Text

    from gpuyard.cli.output import console, print_json

    if as_json:
        print_json(outcome)
        return
    # The outcome quotes the command, which is the user's text: never markup.
    console().print(Text(f"job {outcome.job_id} ({outcome.state.value}): {outcome.outcome}"))


@app.command()
def status(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The job's state and each worker of its current attempt (rank, node, state, exit, pid)."""
    from rich.table import Table
    from rich.text import Text

    from gpuyard.cli.output import console, print_json

    found = _client().exec_status(ctx.obj)
    if as_json:
        print_json(found)
        return
    out = console()
    held = ""
    if found.held_until is not None:
        held = f", held until {found.held_until.astimezone().isoformat(timespec='seconds')}"
    state = f"{found.state.value} ({found.status.label})"
    out.print(Text(f"job {found.job_id}: {state}, attempt {found.attempt}{held}"))
    if found.reason:
        out.print(Text(f"reason: {found.reason}"))
    table = Table("RANK", "ROLE", "NODE", "STATE", "EXIT", "PID", "DETAIL", box=None)
    for w in found.workers:
        detail = " ".join(w.command) if w.command and not w.detail else (w.detail or "")
        table.add_row(
            str(w.rank),
            w.role,
            Text(w.node),
            w.state,
            "-" if w.exit_code is None else str(w.exit_code),
            "-" if w.pid is None else str(w.pid),
            Text(detail),
        )
    out.print(table)


@app.command()
def stop(
    ctx: typer.Context,
    hold: Annotated[
        str | None,
        typer.Option(
            help="How long it may stay held, e.g. 30m, 2h (at most 24h; default: its "
            "keep_failed, else 1h)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Hold a running job: its workers get SIGTERM (SIGKILL after its graceful period), its
    nodes stay its own. Of a held job: stop the command `run` started."""
    _report(_client().exec_stop(ctx.obj, hold=hold), as_json)


@app.command()
def start(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Run a held job's command again, as its next attempt on the same nodes."""
    _report(_client().exec_start(ctx.obj), as_json)


@app.command(
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
def run(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None, typer.Argument(help="The command (after --), run once per node.")
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "-t",
            "--target",
            help="task: the job's own command (as start); checker: the node check.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a command once on each node of a held job, in its workers' context (environment,
    workspace, OS account, limits). It returns at once; the output is in the logs of the
    workers it names: gpuyard logs JOB --worker RANK."""
    args = list(command or [])
    if args and args[0] == "--":
        args = args[1:]
    outcome = _client().exec_run(ctx.obj, args, target=(target or "command").strip().lower())
    _report(outcome, as_json)


@app.command()
def kill(
    ctx: typer.Context,
    ranks: Annotated[list[int], typer.Argument(help="Worker ranks (see `exec JOB status`).")],
    as_json: JsonOpt = False,
) -> None:
    """SIGKILL these workers of a held job (those `run` started)."""
    _report(_client().exec_kill(ctx.obj, ranks), as_json)
