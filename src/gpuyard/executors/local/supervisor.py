"""The worker supervisor: one small process per worker, like Slurm's slurmstepd.

It is started in a session of its own, so nothing that happens to the control plane (a crash,
``kill -9`` of its process group, an OOM kill) reaches it. It

- takes an exclusive lock on the worker directory for its whole life (a second supervisor for
  the same worker exits at once, so a retried launch never duplicates a job);
- starts the command in a process group of its own, with stdout and stderr going straight to
  the log file (no pipe to drain, so the log is complete even if nobody is watching);
- records ``state.json`` (pids) once the command runs, and ``exit.json`` when it ends;
- on SIGTERM, sends SIGTERM to the command's process group and, if it has not exited after the
  graceful period, SIGKILL; after the command exits it kills what is left of its group;
- pokes the executor's notification socket on start and exit, so the controller reacts
  without waiting for its next pass (best effort: the files are the truth).

It is on the path of every launch, so it starts fast: ``python -I -S`` and builtin modules only
(``_signal`` and ``_socket`` rather than ``signal`` and ``socket``, which pull in ``enum``;
``marshal`` for its input rather than ``json``, which pulls in ``re``; ``fork``/``exec`` rather
than ``subprocess``). That keeps its own start to a few milliseconds over a bare interpreter.

Worker directory: ``spec.marshal`` (written by the executor: argv, env, cwd, grace, log path,
files, notification address), ``lock``, ``state.json``, ``exit.json``, ``terminate.json``
(optional graceful-period override), ``log``.
"""

from __future__ import annotations

import _socket
import errno
import fcntl
import marshal
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing itself costs an import
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any
else:
    import _signal

EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
SIGNAL_NAMES = {
    getattr(_signal, name): name
    for name in dir(_signal)
    if name.startswith("SIG")
    and not name.startswith("SIG_")
    and name not in ("SIGCLD", "SIGIOT", "SIGPOLL")
}

Value = str | int | float | bool | None


def _json(data: dict[str, Value]) -> str:
    """JSON for a flat dict of scalars (the ``json`` module would cost its import)."""
    parts = []
    for key, value in data.items():
        if value is None:
            text = "null"
        elif value is True or value is False:
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(value)
        else:
            text = _json_string(value)
        parts.append(f"{_json_string(key)}: {text}")
    return "{" + ", ".join(parts) + "}"


def _json_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _write_json(path: str, data: dict[str, Value]) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, _json(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _notify(address: str, message: str) -> None:
    if not address:
        return
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
        try:
            sock.sendto(message.encode(), "\0" + address)
        finally:
            sock.close()
    except OSError:
        pass  # nobody listening: the controller reads the files on its next pass


def _killpg(pgid: int, sig: int) -> None:
    try:  # noqa: SIM105 - contextlib would cost an import on every launch
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _take_lock(fd: int) -> bool:
    # The executor probes the lock for a few microseconds to see if a supervisor is alive;
    # retry briefly so such a probe is never mistaken for a live owner.
    for _ in range(40):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            time.sleep(0.025)
        else:
            return True
    return False


class SpawnError(Exception):
    def __init__(self, step: str, code: int, where: str = "") -> None:
        super().__init__(step)
        self.step = step
        self.errno = code
        self.where = where


CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18


class Binder:
    """The worker's workspace: bind mounts in a private mount namespace, read-only where asked,
    when this process may (root or CAP_SYS_ADMIN); symbolic links otherwise, which show the same
    tree but cannot enforce read-only."""

    def __init__(self, binds: list[tuple[str, str, bool]]) -> None:
        self.binds = binds
        self.libc: Any = None
        self.mode = ""
        if binds:
            import ctypes  # only for jobs with a workspace: it costs an import

            self.libc = ctypes.CDLL(None, use_errno=True)
            self.mode = "bind" if self._may_unshare() else "link"

    def _may_unshare(self) -> bool:
        if os.geteuid() != 0:
            return False
        pid = os.fork()
        if pid == 0:  # pragma: no cover - probe child
            os._exit(0 if self.libc.unshare(CLONE_NEWNS) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0

    def prepare(self) -> None:
        """In the supervisor: check sources, create mount points or links."""
        for target, source, readonly in self.binds:
            if not os.path.isdir(source):
                if readonly:
                    raise SpawnError("source", errno.ENOENT, source)
                os.makedirs(source, exist_ok=True)  # an output or volume directory to fill
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.lexists(target):
                continue  # prepared by an earlier start of this worker
            if self.mode == "bind":
                os.mkdir(target)
            else:
                os.symlink(source, target)

    def apply(self) -> None:  # pragma: no cover - runs in the child between fork and exec
        if self.mode != "bind":
            return
        libc = self.libc
        if libc.unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes_errno(libc), "unshare")
        # Keep our mounts out of the host's mount table (and the host's changes out of ours).
        if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes_errno(libc), "mount --make-rprivate /")
        for target, source, readonly in self.binds:
            if libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
                raise OSError(ctypes_errno(libc), target)
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY
            if readonly and libc.mount(None, target.encode(), None, flags, None) != 0:
                raise OSError(ctypes_errno(libc), target)


def ctypes_errno(libc: Any) -> int:  # pragma: no cover - child side
    import ctypes

    return ctypes.get_errno() or errno.EPERM


def _spawn(argv: list[str], env: dict[str, str], cwd: str, log_fd: int, binder: Binder) -> int:
    """fork + exec in a new process group; raise SpawnError if a step before exec fails."""
    read_fd, write_fd = os.pipe()  # close-on-exec: EOF on read means exec succeeded
    devnull = os.open(os.devnull, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child either execs or exits
        step = "setup"
        try:
            os.setpgid(0, 0)
            # Python ignores SIGPIPE and SIGXFSZ; an exec'd program must get the defaults.
            _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
            _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
            step = "mount"
            binder.apply()
            step = "chdir"
            os.chdir(cwd)
            os.dup2(devnull, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            step = "exec"
            os.execvpe(argv[0], argv, env)  # noqa: S606 - argv, never a shell string
        except OSError as exc:
            where = exc.strerror if step == "mount" else ""
            os.write(write_fd, f"{step}:{exc.errno or 0}:{where}".encode())
        finally:
            os._exit(EXIT_NOT_FOUND)
    os.close(write_fd)
    os.close(devnull)
    try:  # noqa: SIM105 - as above
        os.setpgid(pid, pid)  # also in the parent, so no signal can race the child's call
    except OSError:
        pass
    report = os.read(read_fd, 256).decode()
    os.close(read_fd)
    if report:
        os.waitpid(pid, 0)
        step, code, where = [*report.split(":", 2), "", ""][:3]
        raise SpawnError(step, int(code or 0), where)
    return pid


class Supervisor:
    def __init__(self, worker_dir: str) -> None:
        self.dir = worker_dir
        with open(os.path.join(worker_dir, "spec.marshal"), "rb") as fh:
            # Written by our executor into a directory only the pool writes.
            self.spec: dict[str, Any] = marshal.load(fh)  # noqa: S302
        self.argv: list[str] = self.spec["argv"]
        self.cwd: str = self.spec["cwd"]
        self.notify_address: str = self.spec.get("notify", "")
        self.term_requested = False

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def run(self) -> int:
        lock_fd = os.open(self.path("lock"), os.O_CREAT | os.O_RDWR, 0o600)
        if not _take_lock(lock_fd):
            return 0  # another supervisor owns this worker
        if os.path.exists(self.path("exit.json")):
            return 0  # already ran to the end
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        _signal.set_wakeup_fd(write_fd)
        _signal.signal(_signal.SIGTERM, self._on_term)
        _signal.signal(_signal.SIGINT, self._on_term)
        # Handlers, not SIG_IGN: an ignored signal would stay ignored in the command.
        _signal.signal(_signal.SIGHUP, self._on_other)
        _signal.signal(_signal.SIGCHLD, self._on_other)
        self._write_files()
        log_fd = os.open(self.spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        binder = Binder(self.spec.get("binds") or [])
        try:
            binder.prepare()
            pid = _spawn(self.argv, self.spec["env"], self.cwd, log_fd, binder)
        except SpawnError as exc:
            return self._cannot_start(log_fd, exc)
        started_at = time.time()
        _write_json(
            self.path("state.json"),
            {
                "supervisor_pid": os.getpid(),
                "pid": pid,
                "pgid": pid,
                "started_at": started_at,
                "workspace": binder.mode,
            },
        )
        _notify(self.notify_address, f"started {self.dir}")
        code, escalated, terminated = self._wait(pid, read_fd)
        _killpg(pid, _signal.SIGKILL)  # whatever the command left behind in its group
        _write_json(
            self.path("exit.json"),
            {
                "exit_code": code if code >= 0 else 128 - code,
                "signal": SIGNAL_NAMES.get(-code, f"signal {-code}") if code < 0 else None,
                "terminated": terminated,
                "escalated": escalated,
                "started_at": started_at,
                "finished_at": time.time(),
            },
        )
        os.close(log_fd)
        _notify(self.notify_address, f"exited {self.dir}")
        return 0

    def _write_files(self) -> None:
        files: dict[str, tuple[str, int]] = self.spec.get("files") or {}
        for path, (content, mode) in files.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"  # workers of one job on one host share the files
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            try:
                os.write(fd, content.encode())
            finally:
                os.close(fd)
            os.chmod(tmp, mode)
            os.replace(tmp, path)

    def _cannot_start(self, log_fd: int, exc: SpawnError) -> int:
        argv0 = self.argv[0] if self.argv else ""
        if exc.step == "source":
            what = f"the directory to mount, {exc.where!r}, does not exist"
        elif exc.step == "mount":
            what = f"cannot mount the workspace at {exc.where!r}: {os.strerror(exc.errno)}"
        elif exc.step == "chdir" and exc.errno == errno.ENOENT:
            what = f"working directory {self.cwd!r} does not exist"
        elif exc.step == "chdir":
            what = f"cannot enter working directory {self.cwd!r}: {os.strerror(exc.errno)}"
        elif exc.errno == errno.ENOENT:
            what = f"{argv0!r}: command not found"
        else:
            what = f"cannot execute {argv0!r}: {os.strerror(exc.errno)}"
        os.write(log_fd, f"gpuyard: {what}\n".encode())
        code = EXIT_NOT_FOUND if exc.errno == errno.ENOENT else EXIT_CANNOT_EXECUTE
        now = time.time()
        _write_json(
            self.path("exit.json"),
            {
                "exit_code": code,
                "signal": None,
                "terminated": False,
                "escalated": False,
                "started_at": now,
                "finished_at": now,
                "message": what,
            },
        )
        os.close(log_fd)
        _notify(self.notify_address, f"exited {self.dir}")
        return 0

    def _on_term(self, _signum: int, _frame: object) -> None:
        self.term_requested = True

    def _on_other(self, _signum: int, _frame: object) -> None:
        pass  # SIGCHLD just wakes the loop; a stray SIGHUP must not end the supervisor

    def _grace(self) -> float:
        try:
            with open(self.path("terminate.json"), encoding="utf-8") as fh:
                text = fh.read()
            # {"grace": N} written by the executor; parsed without the json module.
            return float(text.split(":", 1)[1].strip(" }\n"))
        except (OSError, ValueError, IndexError):
            return float(self.spec.get("grace", 30.0))

    def _wait(self, pid: int, read_fd: int) -> tuple[int, bool, bool]:
        deadline: float | None = None
        terminated = escalated = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), escalated, terminated
            if self.term_requested and not terminated:
                terminated = True
                _killpg(pid, _signal.SIGTERM)
                deadline = time.monotonic() + self._grace()
            if deadline is not None and not escalated and time.monotonic() >= deadline:
                escalated = True
                _killpg(pid, _signal.SIGKILL)
            timeout = 1.0
            if deadline is not None and not escalated:
                timeout = max(0.0, min(timeout, deadline - time.monotonic()))
            try:
                ready, _, _ = select.select([read_fd], [], [], timeout)
            except InterruptedError:
                continue
            if ready:
                os.read(read_fd, 512)


def main() -> int:
    if len(sys.argv) != 2:
        sys.stderr.write("usage: supervisor.py WORKER_DIR\n")
        return 2
    return Supervisor(sys.argv[1]).run()


if __name__ == "__main__":
    sys.exit(main())
