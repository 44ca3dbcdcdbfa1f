"""The worker supervisor: one small process per worker, like Slurm's slurmstepd.

It is started as ``python -I -S supervisor_entry.py SUPERVISOR_DIR`` in a session of its own, so
nothing that happens to the control plane (a crash, ``kill -9`` of its process group, an OOM
kill) reaches it. The executor learns its pid and start time at launch and keeps them in the
worker's handle: while this process lives, the worker is running, whatever any file says. It

- reads ``spec.json`` from its directory (written by the executor) before anything of the job
  runs, and keeps that directory open, so later renames or links change nothing it writes;
- creates the worker's cgroup with its limits (:mod:`cgroups`); the child joins it before it
  execs, so no process of the job ever runs outside it;
- starts the command in a process group of its own, with stdout and stderr going straight to
  the log file (no pipe to drain, so the log is complete even if nobody is watching);
- writes ``state.json`` (its own pid and start time, the command's pid) as a hint for adoption;
- sleeps in ``sigwaitinfo`` until SIGCHLD or SIGTERM (or the end of a graceful period): an
  idle supervisor never wakes up;
- on SIGTERM, sends SIGTERM to the command's process group and, if the command has not exited
  after the graceful period, SIGKILLs the whole cgroup;
- when the command has exited, kills whatever is left in the cgroup (``setsid`` and double
  forks included), reads the OOM kill count, removes the cgroup, and only then writes
  ``exit.json`` and exits: no process of the job is left to forge the record;
- pokes the executor's notification socket on start and exit, naming the worker, so the
  controller reacts without waiting for its next pass (best effort).

It is on the path of every launch, so it starts fast: ``python -I -S`` and builtin modules
only (``_signal``, ``_socket``, ``_json`` rather than ``signal``, ``socket`` and ``json``,
which pull in ``enum`` and ``re``: docs/runtime.md has the measurement; ``fork``/``exec``
rather than ``subprocess``).
"""

from __future__ import annotations

import _json
import _socket
import errno
import os
import sys
import time

from gpuyard.executors.local import cgroups, untrusted

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
WAKE_SIGNALS = {_signal.SIGCHLD, _signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP}
"""Blocked for the supervisor's life and waited for with sigwaitinfo (SIGHUP only so that a
stray one does not end it)."""


# -- JSON with the C accelerator only (the json package would import re) -----------------------


class _Decoding:
    """What ``_json.make_scanner`` reads from a JSONDecoder: strict JSON, no NaN."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")


def _unserializable(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


_decoding: Any = _Decoding()  # duck-typed: what the scanner reads is these attributes
_scan = _json.make_scanner(_decoding)
_encode = _json.make_encoder(
    None, _unserializable, _json.encode_basestring_ascii, None, ": ", ", ", True, False, False
)


def loads(text: str) -> Any:
    """Parse a JSON document; ValueError when it is not one."""
    start = len(text) - len(text.lstrip())
    try:
        value, end = _scan(text, start)
    except StopIteration:
        raise ValueError("not JSON") from None
    if text[end:].strip():
        raise ValueError("extra data after the JSON value")
    return value


def dumps(value: Any) -> str:
    return "".join(_encode(value, 0))


def proc_start_time(pid: int | str = "self") -> int:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): with the pid, a process's identity."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return int(data[data.rindex(b")") + 2 :].split()[19])


def boot_id() -> str:
    try:
        fd = os.open("/proc/sys/kernel/random/boot_id", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, 64).decode().strip()
    finally:
        os.close(fd)


def _notify(address: str, message: dict[str, Any]) -> None:
    if not address:
        return
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
        try:
            sock.sendto(dumps(message).encode(), "\0" + address)
        finally:
            sock.close()
    except OSError:
        pass  # nobody listening: the controller asks on its next pass


def _killpg(pgid: int, sig: int) -> None:
    try:  # noqa: SIM105 - contextlib would cost an import on every launch
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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


class Child:
    """What the forked child does before it execs the command."""

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: str, cgroup: cgroups.Cgroup | None
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.cgroup = cgroup

    def spawn(self, log_fd: int, binder: Binder) -> int:
        """fork + exec in a new process group; raise SpawnError if a step before exec fails."""
        read_fd, write_fd = os.pipe()  # close-on-exec: EOF on read means exec succeeded
        devnull = os.open(os.devnull, os.O_RDONLY)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child either execs or exits
            self._exec(write_fd, devnull, log_fd, binder)
        os.close(write_fd)
        os.close(devnull)
        try:  # noqa: SIM105 - as above
            os.setpgid(pid, pid)  # also in the parent, so no signal can race the child's call
        except OSError:
            pass
        report = os.read(read_fd, 512).decode()
        os.close(read_fd)
        if report:
            os.waitpid(pid, 0)
            step, code, where = [*report.split(":", 2), "", ""][:3]
            raise SpawnError(step, int(code or 0), where)
        return pid

    def _exec(
        self, report_fd: int, devnull: int, log_fd: int, binder: Binder
    ) -> None:  # pragma: no cover
        step = "setup"
        try:
            # The command gets no blocked signals, and the defaults Python changed.
            _signal.pthread_sigmask(_signal.SIG_SETMASK, set())
            _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
            _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
            if self.cgroup is not None:
                step = "cgroup"
                self.cgroup.join()
            os.setpgid(0, 0)
            step = "mount"
            binder.apply()
            step = "chdir"
            os.chdir(self.cwd)
            os.dup2(devnull, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            step = "exec"
            os.execvpe(self.argv[0], self.argv, self.env)  # noqa: S606 - argv, never a shell
        except OSError as exc:
            where = exc.strerror if step in ("mount", "cgroup") else ""
            os.write(report_fd, f"{step}:{exc.errno or 0}:{where}".encode())
        finally:
            os._exit(EXIT_NOT_FOUND)


class Supervisor:
    def __init__(self, directory: str) -> None:
        # Opened before anything of the job runs: what the job later does to the path (a
        # rename, a link) cannot redirect what we read or write here.
        self.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dir = directory
        raw = untrusted.read_file(self.dir_fd, "spec.json", 16 << 20)
        if raw is None:
            raise SystemExit(f"no spec.json in {directory}")
        self.spec: dict[str, Any] = loads(raw.decode())
        self.key = {k: self.spec[k] for k in ("job", "attempt", "rank")}
        self.argv: list[str] = self.spec["argv"]
        self.cwd: str = self.spec["cwd"]
        self.notify_address: str = self.spec.get("notify", "")
        self.cgroup = cgroups.Cgroup.from_json(self.spec.get("cgroup"))
        self.pgid = 0
        self.identity = {
            "supervisor_pid": os.getpid(),
            "supervisor_start_time": proc_start_time(),
            "boot_id": boot_id(),
        }

    def write(self, name: str, data: dict[str, Any], *, sync: bool = False) -> None:
        untrusted.write_file(self.dir_fd, name, dumps(data).encode(), sync=sync)

    def notify(self, event: str) -> None:
        _notify(self.notify_address, {"event": event, **self.key})

    def run(self) -> int:
        if untrusted.read_file(self.dir_fd, "exit.json") is not None:
            return 0  # already ran to the end (a second start by mistake)
        self.write("state.json", self.identity)
        self._write_files()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        log_fd = os.open(self.spec["log"], flags, 0o644)
        binder = Binder([(b["target"], b["source"], b["readonly"]) for b in self.spec["binds"]])
        child = Child(self.argv, self.spec["env"], self.cwd, self.cgroup)
        try:
            if self.cgroup is not None:
                try:
                    self.cgroup.create()
                except cgroups.CgroupError as exc:
                    raise SpawnError(
                        "cgroup", exc.errno or errno.EPERM, exc.strerror or ""
                    ) from None
            binder.prepare()
            pid = child.spawn(log_fd, binder)
        except SpawnError as exc:
            return self._cannot_start(log_fd, exc)
        self.pgid = pid
        started_at = time.time()
        self.write(
            "state.json",
            {**self.identity, "pid": pid, "started_at": started_at, "workspace": binder.mode},
        )
        self.notify("started")
        code, escalated, terminated = self._wait(pid)
        record = {
            "exit_code": code if code >= 0 else 128 - code,
            "signal": SIGNAL_NAMES.get(-code, f"signal {-code}") if code < 0 else None,
            "terminated": terminated,
            "escalated": escalated,
            "started_at": started_at,
            **self._end(),
        }
        os.close(log_fd)
        self.write("exit.json", {**record, "finished_at": time.time()}, sync=True)
        self.notify("exited")
        return 0

    def _end(self) -> dict[str, Any]:
        """Kill every process of the worker that is left, and say what the cgroup saw."""
        if self.cgroup is None:
            _killpg(self.pgid, _signal.SIGKILL)  # a process that called setsid escapes this
            return {}
        leftovers = self.cgroup.kill()
        facts = {
            "leftovers": leftovers,
            "oom_kills": self.cgroup.oom_kills(),
            "memory_limit": self.cgroup.memory,
            "pids_limit_hits": self.cgroup.pids_limit_hits(),
            "pids_limit": self.cgroup.pids,
        }
        self.cgroup.remove()
        return facts

    def _write_files(self) -> None:
        files: dict[str, dict[str, Any]] = self.spec.get("files") or {}
        for path, file in files.items():
            content, mode = file["content"], file["mode"]
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"  # workers of one job on one host share the files
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, mode)
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
        elif exc.step == "cgroup":
            what = f"cannot set up the worker's cgroup: {exc.where or os.strerror(exc.errno)}"
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
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()
        now = time.time()
        record = {"exit_code": code, "started_at": now, "finished_at": now, "message": what}
        os.close(log_fd)
        self.write("exit.json", record, sync=True)
        self.notify("exited")
        return 0

    def _grace(self) -> float:
        """The graceful period: the executor's terminate.json if it is sound, else the spec's."""
        try:
            raw = untrusted.read_file(self.dir_fd, "terminate.json", 4096)
            grace = loads(raw.decode())["grace"] if raw is not None else None
        except (untrusted.Unreadable, ValueError, TypeError, KeyError, UnicodeDecodeError):
            grace = None
        if isinstance(grace, int | float) and not isinstance(grace, bool) and 0 <= grace < 1e9:
            return float(grace)
        return float(self.spec.get("grace", 30.0))

    def _kill_all(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
        else:
            _killpg(self.pgid, _signal.SIGKILL)

    def _wait(self, pid: int) -> tuple[int, bool, bool]:
        deadline: float | None = None
        terminated = escalated = False
        term_requested = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), escalated, terminated
            if term_requested and not terminated:
                terminated = True
                _killpg(pid, _signal.SIGTERM)
                deadline = time.monotonic() + self._grace()
            if deadline is not None and not escalated and time.monotonic() >= deadline:
                escalated = True
                self._kill_all()
            info: _signal.struct_siginfo | None
            if deadline is None or escalated:
                info = _signal.sigwaitinfo(WAKE_SIGNALS)
            else:
                info = _signal.sigtimedwait(WAKE_SIGNALS, max(0.0, deadline - time.monotonic()))
            if info is not None and info.si_signo in (_signal.SIGTERM, _signal.SIGINT):
                term_requested = True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    # First of all: a SIGTERM that arrives while we start must wait for us, not end us.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, WAKE_SIGNALS)
    if len(argv) != 2:
        sys.stderr.write("usage: supervisor_entry.py SUPERVISOR_DIR\n")
        return 2
    return Supervisor(argv[1]).run()
