"""``gpuyard exec JOB shell``: an interactive shell in the context of a held job's worker.

The shell is a worker like the ones ``gpuyard exec run`` starts (its node, its own cgroup with
the job's limits, the job's OS account, environment, workspace and working directory; the
supervisor makes all of that, :mod:`gpuyard.launch.exec_workers`), launched on a terminal
(:meth:`~gpuyard.executors.base.Executor.launch_terminal`) by this server, which relays the
terminal to the person over a WebSocket. It is a run: one at a time per job, stopped with the
job's hold, listed by ``exec status``, killed by ``exec kill``, a usercall of the ft-log.

The relay (:meth:`ShellService.relay`) speaks a small protocol over any two-way channel:

- client -> server: binary messages are keystrokes (at most :data:`MAX_INPUT` bytes each); text
  messages are JSON control messages, only ``{"resize": {"rows": R, "cols": C}}``;
- server -> client: first ``{"ready": {"rank": R, "node": N}}``; then binary messages are
  the terminal's output; a text message ``{"exit": CODE, "detail": "..."}`` ends the session
  (``{"error": ..., "code": ...}`` instead when the client broke the protocol).

Everything the client sends is untrusted: a control message that is not one, or input too
large, ends the session with an error (and the shell with it). The shell is killed (its whole
cgroup) when the connection drops, and its exit code is reported when it exits. Flow control
both ways: output is read from the terminal only as fast as the client takes it, and input is
taken from the client only as fast as the shell reads it, so neither side can fill this
server's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from gpuyard.clock import Clock
from gpuyard.errors import (
    Conflict,
    GpuyardError,
    InvalidSpec,
    ServerUnavailable,
    Unauthenticated,
)
from gpuyard.executors.base import Executor, LaunchError, Terminal
from gpuyard.launch.accounts import AccountRefused
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState, WorkerStatus
from gpuyard.services.job_exec import ExecService
from gpuyard.services.notify import Notify, nobody
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow
from gpuyard.store.workers import launch_failed, set_worker_state_at

__all__ = ["MAX_INPUT", "PlanShell", "Shell", "ShellChannel", "ShellService"]

log = logging.getLogger(__name__)

MAX_INPUT = 64 * 1024
"""Bytes of input one message may carry (a paste; keystrokes are a few bytes)."""
MAX_CONTROL = 1024
MAX_SIZE = 1000
READ_CHUNK = 64 * 1024
EXIT_WAIT = 15.0
"""Seconds to wait for the shell's supervisor to record its exit once its terminal closed."""
RECHECK = 1.0
"""Seconds between checks that the token a shell was opened with is still valid: revoking it
(or its expiry) ends the shell."""
REVOKED = "the token this shell was opened with was revoked or has expired: the shell is ended"

PlanShell = Callable[[JobRow, int, str], WorkerLaunch]
"""The launch of a shell of a job at a rank, on a node (the controller plans it)."""


class ShellChannel(Protocol):
    """The client's side, as the relay sees it (a WebSocket in the server)."""

    async def receive(self) -> bytes | str | None:
        """The next message: bytes (input), str (control), None once the client has gone."""
        ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def send_text(self, text: str) -> None: ...


@dataclass
class Shell:
    job_id: int
    rank: int
    node: str
    handle: Handle
    terminal: Terminal


class _BadInput(Exception):
    pass


class ShellService:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        execs: ExecService,
        executor: Executor | None,
        plan: PlanShell | None,
        notify: Notify = nobody,
    ) -> None:
        self.store = store
        self.clock = clock
        self.execs = execs
        self.executor = executor
        self.plan = plan
        self.notify = notify

    # -- opening --------------------------------------------------------------------------

    def open(self, job_id: int, *, actor: str, worker: int, rows: int, cols: int) -> Shell:
        """Start a shell in the context of the held job's ``worker``, on a terminal of
        ``rows`` x ``cols``. Blocking (a read, a launch, a write): not on an event loop."""
        if self.executor is None or self.plan is None:
            raise ServerUnavailable(
                "this server does not run the pool's workers, so it cannot open a shell on "
                "them; ask the server that does (gpuyard up)"
            )
        _check_size(rows, cols)
        job, rank, node = self.execs.reserve_shell(job_id, actor=actor, worker=worker)
        try:
            launch = self.plan(job, rank, node)
            handle, terminal = self.executor.launch_terminal(launch, rows=rows, cols=cols)
        except (LaunchError, AccountRefused, ValueError, OSError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, ValidationError):
                why = "the job's stored spec no longer loads"
            self._lost(job, rank, f"could not start: {why}")
            raise Conflict(f"job {job_id}: cannot open a shell: {why}") from None
        except BaseException:
            self._lost(job, rank, "could not start: an error of the server's")
            raise
        try:
            with self.store.write() as session:
                set_worker_state_at(
                    session,
                    WorkerKey(job.id, job.attempt, rank),
                    WorkerState.PENDING,  # as reserve_shell wrote it
                    WorkerState.RUNNING,
                    handle=handle,
                    started_at=self.clock.now(),
                )
        except BaseException:
            self._kill(handle)
            terminal.close()
            raise
        self.notify(job_id)
        return Shell(job_id, rank, node, handle, terminal)

    def _lost(self, job: JobRow, rank: int, why: str) -> None:
        with self.store.write() as session:
            launch_failed(
                session,
                WorkerKey(job.id, job.attempt, rank),
                why,
                self.clock.now(),
                WorkerRow.handle.is_(None),
            )
        self.notify(job.id)

    def _kill(self, handle: Handle) -> None:
        if self.executor is not None:
            with contextlib.suppress(Exception):  # best effort: it may be gone already
                self.executor.kill(handle)

    # -- relaying -------------------------------------------------------------------------

    async def relay(
        self, shell: Shell, channel: ShellChannel, still_valid: Callable[[], bool] | None = None
    ) -> None:
        """Relay the shell's terminal to ``channel`` until the shell exits (then send its exit
        code), the client goes, or ``still_valid`` (its token) says no (then kill the shell).
        The terminal is closed either way."""
        fd = shell.terminal.fileno()
        tasks: list[asyncio.Task[None]] = []
        ended = False
        try:
            # First, and alone: the pumps start once the client knows the shell is there.
            await channel.send_text(json.dumps({"ready": {"rank": shell.rank, "node": shell.node}}))
            output = asyncio.create_task(self._pump_out(fd, channel))
            inputs = asyncio.create_task(self._pump_in(fd, shell.terminal, channel))
            tasks = [output, inputs]
            if still_valid is not None:
                tasks.append(asyncio.create_task(_until_invalid(still_valid)))
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if len(tasks) > 2 and tasks[2] in done and tasks[2].exception() is None:
                await _tell(channel, {"error": REVOKED, "code": Unauthenticated.code})
                return
            if output in done and output.exception() is None:
                # The terminal closed: the shell has ended (or let go of it).
                inputs.cancel()
                status = await self._ended(shell)
                ended = True
                await _tell(channel, _exit_message(status))
                return
            error = inputs.exception() if inputs in done else None
            if isinstance(error, _BadInput):
                await _tell(channel, {"error": str(error), "code": InvalidSpec.code})
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if not ended:  # the client went, or spoke nonsense: the shell goes with it
                await run_in_threadpool(self._kill, shell.handle)
            shell.terminal.close()
            self.notify(shell.job_id)

    @staticmethod
    async def _pump_out(fd: int, channel: ShellChannel) -> None:
        """Terminal -> client, a chunk at a time: the next is read once the last is sent."""
        while True:
            await _ready(fd, writing=False)
            try:
                data = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # Linux: every slave descriptor has been closed
                    return
                raise
            if not data:
                return
            await channel.send_bytes(data)

    @staticmethod
    async def _pump_in(fd: int, terminal: Terminal, channel: ShellChannel) -> None:
        """Client -> terminal: keystrokes written as the shell takes them; resizes applied."""
        while True:
            message = await channel.receive()
            if message is None:
                return
            if isinstance(message, str):
                rows, cols = _control(message)
                terminal.resize(rows, cols)
                continue
            if len(message) > MAX_INPUT:
                raise _BadInput(f"an input message of {len(message)} bytes; at most {MAX_INPUT}")
            view = memoryview(message)
            while view:
                try:
                    written = os.write(fd, view)
                except BlockingIOError:
                    await _ready(fd, writing=True)
                    continue
                except OSError as exc:
                    if exc.errno != errno.EIO:
                        raise
                    # The shell is gone: the output side sees it too and reports its exit.
                    await asyncio.Event().wait()
                view = view[written:]

    async def _ended(self, shell: Shell) -> WorkerStatus:
        """The shell's status once its supervisor has recorded its exit. A shell that let go of
        its terminal but runs on is killed: without its terminal, nobody can reach it."""
        executor = self.executor
        assert executor is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXIT_WAIT
        killed = False
        while True:
            [status] = await run_in_threadpool(executor.status, [shell.handle])
            if status.state is not WorkerState.RUNNING:
                return status
            if loop.time() > deadline and not killed:
                await run_in_threadpool(self._kill, shell.handle)
                killed, deadline = True, loop.time() + EXIT_WAIT
            elif loop.time() > deadline:
                return WorkerStatus(WorkerState.LOST, message="its exit was not recorded in time")
            await asyncio.sleep(0.05)


async def _until_invalid(still_valid: Callable[[], bool]) -> None:
    """Return once ``still_valid`` says no (asked every :data:`RECHECK` seconds)."""
    while await run_in_threadpool(still_valid):
        await asyncio.sleep(RECHECK)


async def _tell(channel: ShellChannel, message: dict[str, Any]) -> None:
    """The session's last message; a client that has gone meanwhile misses it."""
    with contextlib.suppress(Exception):
        await channel.send_text(json.dumps(message))


async def _ready(fd: int, *, writing: bool) -> None:
    """Until ``fd`` can be read (or written) without blocking."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    if writing:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await future
    finally:
        if writing:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def _check_size(rows: int, cols: int) -> None:
    if not (1 <= rows <= MAX_SIZE and 1 <= cols <= MAX_SIZE):
        raise InvalidSpec(f"a terminal has 1 to {MAX_SIZE} rows and columns; got {rows} x {cols}")


def _control(text: str) -> tuple[int, int]:
    """The size a control message asks for; _BadInput for anything else."""
    if len(text) > MAX_CONTROL:
        raise _BadInput(f"a control message of {len(text)} characters; at most {MAX_CONTROL}")
    try:
        message = json.loads(text)
        size = message["resize"]
        rows, cols = size["rows"], size["cols"]
    except (ValueError, TypeError, KeyError):
        raise _BadInput('a control message must be {"resize": {"rows": R, "cols": C}}') from None
    if not all(type(v) is int for v in (rows, cols)) or set(message) != {"resize"}:
        raise _BadInput('a control message must be {"resize": {"rows": R, "cols": C}}')
    try:
        _check_size(rows, cols)
    except GpuyardError as exc:
        raise _BadInput(exc.detail) from None
    return rows, cols


def _exit_message(status: WorkerStatus) -> dict[str, Any]:
    if status.state is WorkerState.EXITED:
        detail = status.message or (f"ended by {status.signal}" if status.signal else "")
        return {"exit": status.exit_code, "detail": detail}
    return {"exit": None, "detail": status.message or "the shell was lost"}
