"""``gpuyard exec JOB status|stop|start|run|kill|shell``: debug a job (docs/jobs.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client
    from gpuyard.models import ExecOutcome

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

app = typer.Typer(
    help="Debug a job: hold it (stop its processes, keep its nodes), run a command on each of "
    "its nodes, check its nodes, open a shell in a worker's context, kill what you ran, start "
    "it again. Example: gpuyard exec 7 stop; gpuyard exec 7 run -- hostname; gpuyard logs 7 "
    "--worker 200000; gpuyard exec 7 shell; gpuyard exec 7 start.",
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
            help="command (the default: the one given), task: the job's own command (as start) "
            "or checker: the node check.",
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


@app.command()
def shell(
    ctx: typer.Context,
    worker: Annotated[
        int, typer.Option("--worker", "-w", help="Whose context: a rank of the job's own workers.")
    ] = 0,
) -> None:
    """An interactive shell in the context of a held job's worker: its node, OS account,
    environment, working directory and limits. Leaving it (exit, Ctrl-D, a lost connection)
    ends it and what it started; its exit code is this command's."""
    import os
    import shutil
    import sys
    import threading

    from gpuyard.cli.output import err_console
    from gpuyard.client.shell import ShellEnded

    stdin = sys.stdin.fileno()
    interactive = os.isatty(stdin)
    size = shutil.get_terminal_size()
    conn = _client().open_shell(ctx.obj, worker=worker, rows=size.lines, cols=size.columns)
    if interactive:
        err_console().print(
            f"shell of job {ctx.obj} on {conn.node} (worker {conn.rank}); exit or Ctrl-D ends it",
            markup=False,
            highlight=False,
        )
    saved: list[Any] | None = None
    ended = ShellEnded(None, "")
    try:
        if interactive:
            saved = _raw_terminal(conn, stdin)
        threading.Thread(target=_feed, args=(conn, stdin), daemon=True).start()
        out = sys.stdout.buffer
        while True:
            try:
                data = conn.recv()
            except ShellEnded as exc:
                ended = exc
                break
            out.write(data)
            out.flush()
    finally:
        if saved is not None:
            import termios

            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        conn.close()
    if ended.detail or ended.code is None:
        err_console().print(f"shell ended: {ended.detail or 'lost'}", markup=False)
    raise typer.Exit(1 if ended.code is None else ended.code)


def _raw_terminal(conn: Any, fd: int) -> list[Any]:
    """Put this terminal in raw mode (every key goes to the shell, Ctrl-C included) and follow
    its size; return its settings, to be given back."""
    import shutil
    import signal
    import sys
    import termios
    import threading
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)  # keeps what was typed ahead, as ssh does
    # The handler only wakes a thread that sends: it may interrupt the main thread inside the
    # connection's receive, which is no place to send from.
    resized = threading.Event()

    def resizer() -> None:
        while resized.wait():
            resized.clear()
            now = shutil.get_terminal_size()
            try:
                conn.resize(now.lines, now.columns)
            except Exception:  # the session is over
                return

    threading.Thread(target=resizer, daemon=True).start()
    signal.signal(signal.SIGWINCH, lambda *_: resized.set())
    # Killed, the client still gives the terminal back before it goes.
    for ending in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(ending, lambda signum, _: sys.exit(128 + signum))
    return saved


def _feed(conn: Any, fd: int) -> None:
    """Standard input -> the shell. At the end of an input that is not a terminal, the shell
    gets the end of its own (Ctrl-D), as a pipe into `sh` would."""
    import os

    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            return
        try:
            conn.send(data or b"\x04")
        except Exception:  # the session is over: the main thread reports how
            return
        if not data:
            return
