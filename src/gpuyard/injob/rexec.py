"""Remote execution inside a job's workers: how ``mpirun`` starts its daemons without ssh.

A multi-node MPI job runs as one worker per node. Worker 0 (the *launcher*) runs the user's
``mpirun``; the other workers (the *targets*) run ``rexec.py serve`` and wait. ``mpirun`` starts
its per-node daemon (Open MPI's ``prted``, MPICH Hydra's ``hydra_pmi_proxy``) through a
"remote shell agent" that it calls with ssh's conventions::

    AGENT [ssh options] HOST WORD...

(the words are joined with spaces and run by a shell on HOST). Kubernetes' MPI operator points
that agent at a ``kubectl exec`` script; we point it at ``rexec.py agent``, which asks the target
worker's ``rexec.py serve`` to run the command. So the daemon, and the ranks it starts, run
inside the target worker's process tree, with the target worker's environment, GPUs and limits,
and die with it.

This file is started as ``python -I -S rexec.py …`` (it is on the path of every daemon launch,
and it must not depend on the job's Python environment), so it uses the standard library only
and imports what each entry point needs lazily. The frames and the opening below are
:mod:`gpuyard.injob.channel`'s, shared with the Slurm step's ``srun``.

Environment
-----------
``serve``: ``GPUYARD_REXEC_ADDRESS`` (the worker's address on the pool's interface; a wildcard
address is refused), ``GPUYARD_REXEC_PORT`` (0 picks a free port), ``GPUYARD_JOB_TOKEN``, and
optionally ``GPUYARD_REXEC_MAX_SESSIONS`` (default ``MAX_SESSIONS``). It prints ``rexec:
listening on ADDRESS:PORT`` on stderr once ready.

``agent``: ``GPUYARD_REXEC_HOSTS`` (a JSON file ``{"w1": {"address": "127.0.0.3", "port":
23001}, …}``), ``GPUYARD_REXEC_SELF`` (this worker's name: a command for it runs here, with no
network), ``GPUYARD_JOB_TOKEN``. A refused connection (the target is still starting) is retried
for ``CONNECT_TIMEOUT`` seconds.

Both: ``GPUYARD_REXEC_HOSTNAME``, set when the job's nodes are virtual nodes of one host: what
this worker runs for mpirun gets that host name, in a UTS namespace (see ``_take_hostname``).

A SIGKILL of ``serve`` itself (not its SIGTERM) leaves the commands it started in their own
process groups: the MPI daemons then end when their mpirun does (Open MPI's and Hydra's daemons
exit when they lose their connection to it).

Who may run what
----------------
``serve`` is the target worker's command, so it runs as that worker's OS account (its owner's,
docs/security.md), never as root: a session gets a shell of that account and nothing more. A
session must present the job's token (``GPUYARD_JOB_TOKEN``, a secret of this attempt of the
job, compared in constant time): another job, which holds another token, is refused. The token
reaches the job's processes in their environment only; ``/proc/<pid>/environ`` is readable by
the same account (and root) alone, so jobs of other accounts cannot learn it. Two jobs of the
*same* account can read each other's environment, and so each other's token: they are one
user's jobs, and that user can already act as either.

Protocol
--------
One TCP connection per remote command. The client first sends the job's token alone on one
line (at most ``MAX_TOKEN_LINE`` bytes with its newline), then one header line::

    <job token>\n
    {"argv": ["word", ...]}\n

The header may add ``"env": {"NAME": "value", ...}`` (set on top of the server's own
environment: what ``srun`` forwards from the batch shell and each task's ``SLURM_*``) and
``"cwd": "/dir"`` (used when it exists on this node, else the server's own).

Nothing is allocated for a connection before its token is checked (docs/security.md, "The
remote-exec channel"): the server's one thread accepts connections and reads their token lines
without blocking, at most ``MAX_TOKEN_LINE`` bytes each, within ``AUTH_DEADLINE`` seconds for
the whole line (a byte dripped now and then does not extend it); at most ``MAX_UNAUTHENTICATED``
connections wait for their token at once (a new one past that closes the oldest waiting one,
so a client that sends its token at once, as ours do, always gets in); a thread and a buffer
for the header come only with a good token, and at most ``MAX_SESSIONS`` sessions run at once.

then both sides exchange frames::

    +---------+----------------------+-------------------+
    | channel | length (4 bytes, BE) | payload (length)  |
    +---------+----------------------+-------------------+

    client -> server   0 STDIN    bytes for the command's stdin; an empty payload is EOF
                       5 SIGNAL   4 bytes, big-endian: a signal for the command's group
                                  (``srun`` forwarding what it received)
    server -> client   1 STDOUT   bytes the command wrote to stdout
                       2 STDERR   bytes the command wrote to stderr
                       3 EXIT     4 bytes, big-endian: the exit status (128+n for signal n);
                                  the last frame of a session
                       4 ERROR    a UTF-8 message (bad token, bad header, cannot start); the
                                  server closes the connection after it

The client never half-closes its side: the end of its connection means the client is gone
(mpirun killed the agent, or the launcher died), and the server kills the command's process
group (SIGTERM, then SIGKILL after ``KILL_GRACE`` seconds).

The server runs ``/bin/sh -c "<argv joined with spaces>"`` in a new process group, in its own
environment and working directory. When the command's shell exits, the server waits up to
``OUTPUT_GRACE`` seconds for the output pipes to close, kills whatever is left in the group (a
session's processes do not outlive it, like the worker supervisor's rule for its own group) and
sends EXIT. On SIGTERM or SIGINT it kills every running command's group and exits 0.
"""

from __future__ import annotations

import contextlib
import os
import sys

TYPE_CHECKING = False  # importing typing costs time on every daemon launch
if TYPE_CHECKING:
    import queue
    import socket
    import subprocess
    from collections.abc import Callable, Sequence
    from typing import BinaryIO

if not __package__:
    # Started by its file (``python -I -S rexec.py``): our package is not on the path. Its root
    # goes at the end, so that nothing in it can shadow the standard library (as the Slurm
    # step's entry.py does); of gpuyard this file imports only the stdlib-only channel.
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gpuyard.injob.channel import (  # noqa: E402 - after the path it may need
    ENV_TOKEN,
    ERROR,
    EXIT,
    MAX_TOKEN_LINE,
    SIGNAL,
    STDERR,
    STDIN,
    STDOUT,
    AgentError,
    connect,
    exit_status,
    hello,
    pack,
    read_frame,
)

MAX_HEADER = 1 << 20  # prted's command line is ~2 KB; leave room for long environments
CHUNK = 64 * 1024
AUTH_DEADLINE = 5.0  # for the whole token line, from the connection's accept
MAX_UNAUTHENTICATED = 64  # connections waiting for their token line at once
MAX_SESSIONS = 512  # authenticated sessions at once (each costs a few threads and processes)
ACCEPTS_PER_ROUND = 16  # new connections taken per loop, so waiting ones are read in between
REPORT_EVERY = 5.0  # refused connections are logged as a count at most this often
HEADER_TIMEOUT = 10.0  # after authentication, per read of the header line
KILL_GRACE = 3.0  # between SIGTERM and SIGKILL of a command's group
OUTPUT_GRACE = 2.0  # after the command exits, how long a background child may keep its pipes
EXIT_CONNECTION = 255  # what ssh returns for its own failures; mpirun reports it as such
EXIT_USAGE = 2
MAX_LOGGED = 4096  # characters of a command that serve writes to its log

ENV_ADDRESS = "GPUYARD_REXEC_ADDRESS"
ENV_PORT = "GPUYARD_REXEC_PORT"
ENV_HOSTS = "GPUYARD_REXEC_HOSTS"
ENV_SELF = "GPUYARD_REXEC_SELF"
ENV_HOSTNAME = "GPUYARD_REXEC_HOSTNAME"
ENV_MAX_SESSIONS = "GPUYARD_REXEC_MAX_SESSIONS"

# ssh options that take no value / take one. mpirun does not add any today, but Hydra's "ssh"
# launcher adds -x (no X11 forwarding) and users often configure agents like "ssh -q"; skipping
# them keeps the agent a drop-in replacement for ssh.
_SSH_FLAGS = frozenset("1246AaCfGgKkMNnqsTtVvXxYy")  # -x, -q, -tt, -qx ...
_SSH_VALUED = frozenset("BbcDEeFIiJLlmOopQRSWw")  # -o Key=value, -oKey=value, -p 22 ...


def remote_command(words: Sequence[str]) -> str:
    """The shell command for ssh-style words: joined with spaces, as ssh does (no quoting)."""
    return " ".join(words)


# ----------------------------------------------------------------------------------- framing


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# ---------------------------------------------------------------------------------- hostname

CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000


def _take_hostname(log: Callable[[str], None]) -> None:
    """Give this process, and every daemon it starts, the host name in ``ENV_HOSTNAME``.

    Virtual nodes share one host, and so one host name, but MPI runtimes identify a node by
    its host name: Open MPI merges two daemons that report the same name into one node, and
    its ranks then disagree about who is local (``MPI_Comm_split_type`` gives different
    groups on different ranks, hierarchical collectives hang, shared-memory segments named
    after the host collide). A UTS namespace per node gives each daemon its node's name, as a
    pod has its own. It needs CAP_SYS_ADMIN, or else an unprivileged user namespace; without
    either, we go on with the host's name and say so.

    Call it while the process has one thread: unshare() applies to the calling thread only.
    """
    import ctypes
    import socket

    name = os.environ.get(ENV_HOSTNAME, "")
    if not name or socket.gethostname() == name:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUTS) != 0:
        # Not privileged: a user namespace of our own grants the capability over a UTS
        # namespace it owns. Map our ids to themselves, so that files and processes keep them.
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWUTS) != 0:
            error = os.strerror(ctypes.get_errno())
            log(
                f"cannot take the host name {name!r} ({error}); MPI daemons of several nodes "
                "on this host will share its name"
            )
            return
        for path, text in (
            ("/proc/self/setgroups", "deny"),
            ("/proc/self/uid_map", f"{uid} {uid} 1"),
            ("/proc/self/gid_map", f"{gid} {gid} 1"),
        ):
            with contextlib.suppress(OSError), open(path, "w") as file:
                file.write(text)
    try:
        socket.sethostname(name)
    except OSError as exc:
        log(f"cannot take the host name {name!r} ({exc.strerror})")


# ------------------------------------------------------------------------------------- serve


def _kill_group(pgid: int, signum: int) -> None:
    import signal

    # ProcessLookupError: the group is gone; PermissionError: its id now names someone else's.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.Signals(signum))


class _Session:
    """One connection: authenticate, run the command, relay its streams, report its end."""

    def __init__(self, server: _Server, conn: socket.socket, peer: str) -> None:
        import threading

        self.server = server
        self.conn = conn
        self.peer = peer
        self.proc: subprocess.Popen[bytes] | None = None
        self._send_lock = threading.Lock()
        self._client_gone = threading.Event()
        self._exited = threading.Event()  # the command's shell has exited
        self._finished = threading.Event()  # the session has sent its last frame
        self._killing = threading.Lock()
        self._reader: threading.Thread | None = None

    # Sending is shared by the stdout and stderr pumps and the session thread.
    def send(self, channel: int, payload: bytes = b"") -> bool:
        if self._client_gone.is_set():
            return False
        try:
            with self._send_lock:
                self.conn.sendall(pack(channel, payload))
        except OSError:
            self._lost_client()
            return False
        return True

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a session must never take the server down
            self.server.log(f"session from {self.peer} failed: {exc!r}")
        finally:
            self._finished.set()
            self.server.forget(self)
            self._close()

    def _run(self) -> None:
        import subprocess
        import threading

        rfile = self.conn.makefile("rb")
        header = self._read_header(rfile)
        if header is None:
            return
        argv, env, cwd = header
        command = remote_command(argv)
        # The whole line (a daemon's is ~1.5 KB, once per job): what a failed launch ran.
        shown = command if len(command) <= MAX_LOGGED else command[: MAX_LOGGED - 3] + "..."
        self.server.log(f"{self.peer} runs: {shown}")
        try:
            # A group of its own: on disconnect or shutdown we signal the command's whole tree
            # (the daemon and the ranks it forked), and nothing else of the worker's.
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                process_group=0,
                env={**os.environ, **env} if env else None,
                cwd=cwd if cwd and os.path.isdir(cwd) else None,
            )
        except OSError as exc:
            self.send(ERROR, f"cannot start /bin/sh: {exc}".encode())
            return
        proc = self.proc
        if not self.server.adopt(self):
            self.terminate()  # the server began shutting down while we were starting
        pumps = [
            threading.Thread(target=self._pump, args=(proc.stdout, STDOUT), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, STDERR), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        self._reader = threading.Thread(target=self._read_client, args=(rfile,), daemon=True)
        self._reader.start()

        returncode = proc.wait()
        self._exited.set()
        for pump in pumps:
            pump.join(OUTPUT_GRACE)
        # Whatever the command left behind in its group would otherwise outlive the session
        # (and keep its pipes open, so the pumps would never end).
        _kill_group(proc.pid, 9)
        for pump in pumps:
            pump.join(1.0)
        self.send(EXIT, exit_status(returncode).to_bytes(4, "big"))

    def _read_header(  # noqa: PLR0911 - one refusal per way a header can be wrong
        self, rfile: BinaryIO
    ) -> tuple[list[str], dict[str, str], str | None] | None:
        import json

        # The client has already proven it holds the job's token (see _Gate): this buffer and
        # this wait are spent on the job's own agent only.
        self.conn.settimeout(HEADER_TIMEOUT)
        try:
            line = rfile.readline(MAX_HEADER + 1)
        except OSError:
            return None  # timed out or reset before saying anything: nobody to answer
        self.conn.settimeout(None)
        if not line.endswith(b"\n"):
            self._refuse("bad header: expected one JSON line")
            return None
        try:
            header = json.loads(line)
        except ValueError:
            self._refuse("bad header: not JSON")
            return None
        argv = header.get("argv") if isinstance(header, dict) else None
        if not isinstance(argv, list) or not argv or not all(isinstance(w, str) for w in argv):
            self._refuse("bad header: argv must be a non-empty list of strings")
            return None
        env = header.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str)
            and isinstance(v, str)
            and k
            and "=" not in k
            and "\0" not in k
            and "\0" not in v
            for k, v in env.items()
        ):
            self._refuse("bad header: env must map variable names to strings")
            return None
        cwd = header.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or "\0" in cwd):
            self._refuse("bad header: cwd must be a path")
            return None
        return argv, env, cwd

    def _refuse(self, reason: str) -> None:
        self.server.log(f"refused {self.peer}: {reason}")
        self.send(ERROR, reason.encode())

    def _pump(self, pipe: BinaryIO | None, channel: int) -> None:
        if pipe is None:
            return
        try:
            while chunk := pipe.read(CHUNK):
                # Keep draining after the client is gone, or the command blocks on a full pipe
                # instead of getting the SIGTERM it is about to receive.
                self.send(channel, chunk)
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def _read_client(self, rfile: BinaryIO) -> None:
        import queue
        import threading

        # Writes to the command's stdin happen on their own thread, through an unbounded queue,
        # so a command that does not read its stdin can never stop us from noticing that the
        # client went away. (What a client sends is mpirun's stdin: empty in practice.)
        pending: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        threading.Thread(target=self._feed_stdin, args=(pending,), daemon=True).start()
        stdin_open = True
        try:
            while (frame := read_frame(rfile)) is not None:
                channel, payload = frame
                if channel == SIGNAL and len(payload) == 4:
                    self._signal(int.from_bytes(payload, "big"))
                    continue
                if channel != STDIN:
                    raise ValueError(f"unexpected channel {channel} from the client")
                if stdin_open:  # stdin after its EOF is ignored
                    pending.put(payload or None)  # an empty payload is stdin's EOF
                    stdin_open = bool(payload)
        except (OSError, ValueError):
            pass
        pending.put(None)  # the client is gone: close the command's stdin if it is still open
        self._lost_client()

    def _feed_stdin(self, pending: queue.SimpleQueue[bytes | None]) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None:
            return
        try:
            while (data := pending.get()) is not None:
                proc.stdin.write(data)
        except OSError:
            pass  # the command closed its stdin or exited: the rest of its input is dropped
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    def _signal(self, signum: int) -> None:
        proc = self.proc
        if proc is not None and 0 < signum < 65 and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)

    def _lost_client(self) -> None:
        if self._client_gone.is_set():
            return
        self._client_gone.set()
        if not self._exited.is_set():
            self.server.log(f"client {self.peer} went away; killing its command")
            self.terminate()

    def terminate(self) -> None:
        """SIGTERM the command's group, SIGKILL it after KILL_GRACE (returns once it is dead)."""
        import subprocess

        proc = self.proc
        if proc is None:
            return
        with self._killing:  # disconnect and shutdown may both ask; kill once
            if proc.poll() is not None:
                return
            _kill_group(proc.pid, 15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(KILL_GRACE)
            _kill_group(proc.pid, 9)

    def wait_finished(self, timeout: float) -> bool:
        return self._finished.wait(timeout)

    def _close(self) -> None:
        """Close so that the client can read our last frame (EXIT or ERROR).

        Closing a socket that still has unread input makes the kernel send a reset, which can
        destroy the frame we just sent before the client reads it. So we half-close our side
        and keep reading (and dropping) until the client, having read the frame, closes its
        side; only then, or after KILL_GRACE, do we close.
        """
        import socket

        try:
            self.conn.shutdown(socket.SHUT_WR)
            if self._reader is None:  # no reader thread yet (refused, or failed to start)
                self.conn.settimeout(KILL_GRACE)
                while self.conn.recv(CHUNK):
                    pass
            else:
                self._reader.join(KILL_GRACE)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)  # wakes a reader still blocked on the socket
        self.conn.close()


class _Server:
    def __init__(self, token: str, max_sessions: int = MAX_SESSIONS) -> None:
        import threading

        self.token = token
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._sessions: set[_Session] = set()
        self._stopping = False

    def log(self, message: str) -> None:
        try:
            sys.stderr.write(f"rexec: {message}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def admit(self, session: _Session) -> bool:
        """Count a new authenticated session in, unless MAX_SESSIONS already run."""
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                return False
            self._sessions.add(session)
            return True

    def adopt(self, session: _Session) -> bool:
        """Whether a session that has just started its command may keep it (not stopping)."""
        with self._lock:
            self._sessions.add(session)
            return not self._stopping

    def forget(self, session: _Session) -> None:
        with self._lock:
            self._sessions.discard(session)

    def stop(self) -> None:
        """Kill every running command (concurrently) and give the sessions time to report."""
        import threading

        with self._lock:
            self._stopping = True
            sessions = list(self._sessions)
        killers = [threading.Thread(target=s.terminate, daemon=True) for s in sessions]
        for killer in killers:
            killer.start()
        for killer in killers:
            killer.join(KILL_GRACE + 2.0)
        for session in sessions:
            session.wait_finished(OUTPUT_GRACE + 2.0)


class _Waiting:
    """A connection that has not sent its token line yet: a socket and at most 256 bytes."""

    __slots__ = ("buffer", "conn", "deadline", "draining", "peer")

    def __init__(self, conn: socket.socket, peer: str, deadline: float) -> None:
        self.conn = conn
        self.peer = peer
        self.deadline = deadline
        self.buffer = b""
        self.draining = False  # refused: reading what the client still sends until it closes


class _Gate:
    """The server's one thread: accepts connections and authenticates them, allocating nothing
    per connection but a socket and its token line; a session thread starts only after it.

    Every wait is bounded: a connection is closed ``AUTH_DEADLINE`` seconds after its accept
    unless its token line is complete by then, however it trickles in; one past
    ``MAX_UNAUTHENTICATED`` waiting closes the oldest waiting one.
    """

    def __init__(self, server: _Server, listener: socket.socket, wake: int) -> None:
        import collections
        import selectors

        self.server = server
        self.listener = listener
        self.wake = wake
        self.selector = selectors.DefaultSelector()
        self.waiting: dict[int, _Waiting] = {}  # by fd, oldest first
        self.refused: collections.Counter[str] = collections.Counter()
        self.next_report = 0.0

    def run(self) -> None:
        """Serve until a signal writes to the wake pipe."""
        import selectors
        import time

        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake, selectors.EVENT_READ)
        while True:
            for key, _ in self.selector.select(self._timeout(time.monotonic())):
                if key.fd == self.wake:
                    for waiting in list(self.waiting.values()):
                        self._drop(waiting, "")
                    return
                if key.fd != self.listener.fileno() and key.fd in self.waiting:
                    self._read(self.waiting[key.fd])
            # After the waiting connections' reads: a client that sent its token is served
            # before new connections can push it out.
            self._accept()
            now = time.monotonic()
            for waiting in [w for w in self.waiting.values() if w.deadline <= now]:
                self._drop(waiting, "" if waiting.draining else "no token within the deadline")
            self._report(now)

    def _timeout(self, now: float) -> float | None:
        times = [w.deadline for w in self.waiting.values()]
        if self.refused:
            times.append(self.next_report)
        return max(0.0, min(times) - now) if times else None

    def _accept(self) -> None:
        import selectors
        import time

        for _ in range(ACCEPTS_PER_ROUND):
            try:
                conn, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, or the peer gave up: try again later
                self.refused[f"cannot accept ({exc.strerror or exc})"] += 1
                return
            conn.setblocking(False)
            if len(self.waiting) >= MAX_UNAUTHENTICATED:
                self._drop(next(iter(self.waiting.values())), "too many waiting for their token")
            waiting = _Waiting(conn, f"{peer[0]}:{peer[1]}", time.monotonic() + AUTH_DEADLINE)
            self.waiting[conn.fileno()] = waiting
            self.selector.register(conn, selectors.EVENT_READ)
            self._read(waiting)  # ours send the token with the connection: no wait at all

    def _read(self, waiting: _Waiting) -> None:
        import socket

        conn = waiting.conn
        try:
            if waiting.draining:
                if not conn.recv(CHUNK):
                    self._drop(waiting, "")
                return
            # Peek, so that only the token line is taken: the header behind it stays in the
            # kernel for the session (or for nobody).
            room = MAX_TOKEN_LINE - len(waiting.buffer)
            data = conn.recv(room, socket.MSG_PEEK)
            if not data:
                self._drop(waiting, "closed before its token")
                return
            end = data.find(b"\n")
            waiting.buffer += conn.recv(end + 1 if end >= 0 else len(data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(waiting, "" if waiting.draining else "reset before its token")
            return
        if end >= 0:
            self._authenticate(waiting)
        elif len(waiting.buffer) >= MAX_TOKEN_LINE:
            self._refuse(waiting, f"bad header: the token line is over {MAX_TOKEN_LINE} bytes")

    def _authenticate(self, waiting: _Waiting) -> None:
        import hmac
        import threading

        # compare_digest: the time taken must not tell an attacker how much of a guess is right.
        if not hmac.compare_digest(waiting.buffer[:-1], self.server.token.encode()):
            self._refuse(waiting, "authentication failed: bad token")
            return
        session = _Session(self.server, waiting.conn, waiting.peer)
        if not self.server.admit(session):
            limit = self.server.max_sessions
            self._refuse(waiting, f"too many sessions: {limit} are running on this worker")
            return
        self._forget(waiting)
        waiting.conn.setblocking(True)
        threading.Thread(target=session.run, daemon=True).start()

    def _refuse(self, waiting: _Waiting, reason: str) -> None:
        """Say why in an ERROR frame, then read until the client closes (or the deadline)
        before closing: closing with its header unread would reset the connection, and the
        reset can destroy the frame before the client reads it."""
        import socket
        import time

        self.refused[reason] += 1
        self._report(time.monotonic())  # before the client hears of it: a log to check
        try:
            waiting.conn.send(pack(ERROR, reason.encode()))  # a few bytes: the buffer has room
            waiting.conn.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(waiting, "")
            return
        waiting.draining = True
        waiting.deadline = min(waiting.deadline, time.monotonic()) + KILL_GRACE

    def _forget(self, waiting: _Waiting) -> None:
        self.waiting.pop(waiting.conn.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(waiting.conn)

    def _drop(self, waiting: _Waiting, reason: str) -> None:
        if reason:
            self.refused[reason] += 1
        self._forget(waiting)
        waiting.conn.close()

    def _report(self, now: float) -> None:
        """Log refusals as counts: a flood of connections must not flood the worker's log."""
        if not self.refused or now < self.next_report:
            return
        counts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.refused.items()))
        self.server.log(f"refused unauthenticated connections: {counts}")
        self.refused.clear()
        self.next_report = now + REPORT_EVERY


def _listen(address: str, port_text: str) -> socket.socket:
    """The listening socket, on the worker's own address only (ValueError for a wildcard)."""
    import ipaddress
    import socket

    try:
        wildcard = ipaddress.ip_address(address).is_unspecified
    except ValueError:
        wildcard = False  # a host name: it resolves to one interface's address
    if wildcard:
        raise ValueError(
            f"{address} is every interface; give the worker's address on the pool's network"
        )
    return socket.create_server((address, int(port_text)), backlog=MAX_UNAUTHENTICATED)


def _settings() -> tuple[str, str, str, int] | str:
    """(token, address, port, max sessions) from the environment, or what is wrong."""
    token = os.environ.get(ENV_TOKEN, "")
    address = os.environ.get(ENV_ADDRESS, "")
    port_text = os.environ.get(ENV_PORT, "")
    sessions_text = os.environ.get(ENV_MAX_SESSIONS, "") or str(MAX_SESSIONS)
    if not token:
        return f"{ENV_TOKEN} is not set"
    if len(token.encode()) >= MAX_TOKEN_LINE or "\n" in token or "\r" in token:
        return f"{ENV_TOKEN} must be one line of at most {MAX_TOKEN_LINE - 1} bytes"
    if not address or not port_text.isdigit():
        return f"set {ENV_ADDRESS} and {ENV_PORT}"
    if not sessions_text.isdigit() or int(sessions_text) < 1:
        return f"{ENV_MAX_SESSIONS} must be a positive number, not {sessions_text!r}"
    return token, address, port_text, int(sessions_text)


def serve() -> int:
    import signal

    settings = _settings()
    if isinstance(settings, str):
        print(f"rexec serve: {settings}", file=sys.stderr)
        return EXIT_USAGE
    token, address, port_text, max_sessions = settings

    # Signals only wake the accept loop (through the wakeup fd); the loop itself decides to
    # stop, so a signal never lands in the middle of starting a session.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)

    server = _Server(token, max_sessions)
    _take_hostname(server.log)
    try:
        listener = _listen(address, port_text)
    except (OSError, ValueError) as exc:
        print(f"rexec serve: cannot listen on {address}:{port_text}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    host, port = listener.getsockname()[:2]
    server.log(f"listening on {host}:{port}")
    with listener:
        _Gate(server, listener, wake_r).run()
    server.log("stopping: killing running commands")
    server.stop()
    return 0


# ------------------------------------------------------------------------------------- agent


def _parse_agent_args(args: Sequence[str]) -> tuple[str, list[str]]:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        option = args[index]
        if option == "--":
            index += 1
            break
        letters = option[1:]
        if letters and letters[0] in _SSH_VALUED:
            index += 1 if len(letters) > 1 else 2  # value attached ("-p22") or next word
        elif letters and all(letter in _SSH_FLAGS for letter in letters):
            index += 1
        else:
            raise AgentError(f"unsupported ssh option {option!r}")
    if index >= len(args):
        raise AgentError("usage: rexec.py agent [ssh options] HOST COMMAND...")
    host, words = args[index], list(args[index + 1 :])
    if not words:
        raise AgentError(f"no command for {host}: interactive sessions are not supported")
    return host, words


def _load_hosts() -> dict[str, tuple[str, int]]:
    import json

    path = os.environ.get(ENV_HOSTS)
    if not path:
        raise AgentError(f"{ENV_HOSTS} is not set")
    try:
        with open(path, "rb") as file:
            data = json.load(file)
    except (OSError, ValueError) as exc:
        raise AgentError(f"cannot read the hosts file {path}: {exc}") from None
    hosts: dict[str, tuple[str, int]] = {}
    if isinstance(data, dict):
        for name, entry in data.items():
            if isinstance(entry, dict):
                address, port = entry.get("address"), entry.get("port")
                if isinstance(address, str) and isinstance(port, int):
                    hosts[str(name)] = (address, port)
    if not hosts:
        raise AgentError(f"the hosts file {path} lists no hosts")
    return hosts


def _resolve(host: str, hosts: dict[str, tuple[str, int]]) -> str:
    """The worker name for HOST: a name from the file, or (for tools that pass them) an address."""
    if host in hosts:
        return host
    by_address = [name for name, (address, _) in hosts.items() if address == host]
    if len(by_address) == 1:
        return by_address[0]
    known = ", ".join(sorted(hosts))
    raise AgentError(f"unknown host {host!r} (known: {known})")


def _exec_local(command: str) -> None:
    import signal

    _take_hostname(lambda message: print(f"rexec: {message}", file=sys.stderr))

    # Python ignores SIGPIPE and SIGXFSZ, and ignored signals survive exec: restore the
    # defaults a shell expects (subprocess does the same with restore_signals).
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    sys.stderr.flush()
    os.execv("/bin/sh", ["/bin/sh", "-c", command])  # noqa: S606 - running a shell is the job


def _forward_stdin(conn: socket.socket) -> None:
    try:
        while True:
            try:
                data = os.read(0, CHUNK)
            except OSError:
                data = b""  # no usable stdin (closed fd): the command sees EOF
            conn.sendall(pack(STDIN, data))
            if not data:
                return
    except OSError:
        pass  # the connection ended; the main thread reports how


def _run_remote(name: str, address: str, port: int, words: list[str]) -> int:
    import socket
    import threading

    token = os.environ.get(ENV_TOKEN, "")
    if not token:
        raise AgentError(f"{ENV_TOKEN} is not set")
    where = f"{name} at {address}:{port}"
    conn = connect(address, port, where)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    header = hello(token, {"argv": words})
    try:
        conn.sendall(header)
    except OSError as exc:
        raise AgentError(f"lost {where}: {exc.strerror or exc}") from None
    threading.Thread(target=_forward_stdin, args=(conn,), daemon=True).start()

    rfile = conn.makefile("rb")
    closed: set[int] = set()  # our own stdout/stderr, once their reader has gone away
    try:
        while (frame := read_frame(rfile)) is not None:
            channel, payload = frame
            if channel in (STDOUT, STDERR):
                if channel not in closed:
                    try:
                        _write_all(channel, payload)  # channel numbers are the fds
                    except OSError:
                        closed.add(channel)  # keep relaying the other stream and the status
            elif channel == EXIT and len(payload) == 4:
                return int.from_bytes(payload, "big")
            elif channel == ERROR:
                raise AgentError(f"{where}: {payload.decode(errors='replace')}")
            else:
                raise AgentError(f"{where}: unexpected frame on channel {channel}")
    except (OSError, ValueError) as exc:
        raise AgentError(f"lost {where}: {exc}") from None
    raise AgentError(f"lost {where}: the connection closed before the command's exit status")


def agent(args: Sequence[str]) -> int:
    import signal

    # Killed or interrupted (mpirun tears its launch agents down this way): end at once. The
    # kernel closes our connection, and the server kills the remote command's group.
    def _die(signum: int, _frame: object) -> None:
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _die)

    host, words = _parse_agent_args(args)
    command = remote_command(words)
    own = os.environ.get(ENV_SELF, "")
    if own and host == own:
        _exec_local(command)
    hosts = _load_hosts()
    name = _resolve(host, hosts)
    if own and name == own:
        _exec_local(command)
    address, port = hosts[name]
    return _run_remote(name, address, port, words)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"] and len(args) == 1:
        return serve()
    if args[:1] == ["agent"]:
        try:
            return agent(args[1:])
        except AgentError as exc:
            print(f"rexec: {exc}", file=sys.stderr)
            return EXIT_CONNECTION
    print("usage: rexec.py serve | rexec.py agent [ssh options] HOST COMMAND...", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    status = main()
    sys.stderr.flush()
    # os._exit: daemon threads may still be blocked in reads (stdin, sockets); a normal
    # interpreter exit would wait on nothing, but flushing and finalizing is pointless here.
    os._exit(status)
