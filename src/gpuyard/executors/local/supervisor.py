"""The worker supervisor: one small process per worker, like Slurm's slurmstepd.

It is started as ``python -I -S supervisor_entry.py SUPERVISOR_DIR`` in a session of its own, so
nothing that happens to the control plane (a crash, ``kill -9`` of its process group, an OOM
kill) reaches it. The executor learns its pid and start time at launch and keeps them in the
worker's handle: while this process lives, the worker is running, whatever any file says. It

- reads ``spec.json`` from its directory (written by the executor) before anything of the job
  runs, and keeps that directory open, so later renames or links change nothing it writes;
- creates the worker's cgroup with its limits (:mod:`cgroups`); the child joins it before it
  execs, so no process of the job ever runs outside it;
- starts the command in a process group of its own, with stdout and stderr a pipe that a
  thread of the supervisor drains into the log file, which it keeps under the pool's cap by
  dropping the oldest part (:mod:`logcap`; the job never writes the file itself); or, for
  an interactive shell (``terminal`` in its spec), in a session of its own whose controlling
  terminal is the one the supervisor got as its stdin (which it then lets go of, so that the
  terminal's other side sees its end when the command's processes have closed it);
- when the spec names an ``account`` (docs/security.md), stays root itself (cgroups, signals,
  mounts) while the child prepares the workspace as that account and then drops to it for
  good (groups, gid, uid; umask 077) before it execs: nothing of the job runs as root;
- when the spec has an ``image``, the child builds the worker's root from it and enters it
  (:mod:`container`, docs/images.md) after the workspace's mounts and before the drop to the
  account, instead of the host's sandbox; the command runs there with the image's env below
  the job's and in the image's working directory;
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
import _thread
import errno
import os
import sys
import time

from gpuyard.executors.local import cgroups, logcap, untrusted
from gpuyard.executors.local.sandbox import Sandbox

TYPE_CHECKING = False  # typing itself costs an import
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any

    from gpuyard.executors.local.container import ContainerRuntime
else:
    import _signal

EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
REPORT_CAP = 4096
"""Bytes of the child's report of a failed step (one write to a pipe up to PIPE_BUF is whole)."""
SIGNAL_NAMES = {
    getattr(_signal, name): name
    for name in dir(_signal)
    if name.startswith("SIG")
    and not name.startswith("SIG_")
    and name not in ("SIGCLD", "SIGIOT", "SIGPOLL")
}
FULL_RETRY = 1.0
"""Seconds between tries to write the exit record while the disk is full."""
DRAIN_WAIT = 10.0
"""Seconds the supervisor waits, once the worker's processes are gone, for the rest of its
output before it writes the exit record."""
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
    tree but cannot enforce read-only.

    With an ``account`` (the command runs as another user, docs/security.md) the workspace is
    the job's, so it is prepared in the child, as that account, before it drops root for good
    (:meth:`apply`): a source the account cannot reach is refused, a volume is created only
    where the account may create it, and mount points are made below the workspace, walked
    without following links (a link planted there must not move a mount onto ``/etc``). The
    mounts themselves are done as root, onto the directories the account opened
    (``/proc/self/fd/N``): what gets mounted, and where, is what the account could reach.
    """

    def __init__(
        self,
        binds: list[tuple[str, str, bool, bool]],
        account: dict[str, Any] | None = None,
        workspace: str = "",
    ) -> None:
        self.binds = binds
        self.account = account
        self.workspace = workspace
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
        """In the supervisor, for a command that runs as the supervisor's user: check sources,
        create mount points or links. (With an account, :meth:`apply` does it, as the account.)"""
        if self.account is not None:
            return
        for target, source, readonly, _held in self.binds:
            if not os.path.isdir(source):
                if readonly:
                    raise SpawnError("source", errno.ENOENT, source)
                try:
                    os.makedirs(source, exist_ok=True)  # an output or volume directory to fill
                except OSError as exc:
                    raise SpawnError("volume", exc.errno or errno.EIO, source) from None
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if os.path.lexists(target):
                    continue  # prepared by an earlier start of this worker
                if self.mode == "bind":
                    os.mkdir(target)
                else:
                    os.symlink(source, target)
            except OSError as exc:
                raise SpawnError("target", exc.errno or errno.EIO, target) from None

    def apply(self) -> None:  # pragma: no cover - runs in the child between fork and exec
        if self.mode == "bind":
            self._unshare()
        if self.account is not None:
            self._apply_as(self.account)
            return
        if self.mode != "bind":
            return
        libc = self.libc
        for target, source, readonly, _held in self.binds:
            if libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
                raise OSError(ctypes_errno(libc), target)
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY
            if readonly and libc.mount(None, target.encode(), None, flags, None) != 0:
                raise OSError(ctypes_errno(libc), target)

    def _unshare(self) -> None:  # pragma: no cover - child side
        libc = self.libc
        if libc.unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes_errno(libc), "unshare")
        # Keep our mounts out of the host's mount table (and the host's changes out of ours).
        if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes_errno(libc), "mount --make-rprivate /")

    def _apply_as(self, account: dict[str, Any]) -> None:  # pragma: no cover - child side
        """Open and make everything as ``account`` (effective ids only), then mount as root.
        A source the pool holds (``held``) is opened first, as root: its directory is the
        pool's alone, reached only through the mounts the catalogue allows."""
        mounts: list[tuple[int, int, int, str, bool, str]] = []
        held = {source: _open_held(source) for _, source, _, is_held in self.binds if is_held}
        become(account)
        try:
            try:
                base = os.open(self.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise SpawnError("workspace", exc.errno or errno.EACCES, self.workspace) from None
            for target, source, readonly, is_held in self.binds:
                if is_held and self.mode != "bind":
                    # A link would lead the account to a directory it may not enter.
                    where = (
                        f"{source} (the pool's own: it needs a mount, which it cannot make here)"
                    )
                    raise SpawnError("source", errno.EPERM, where)
                src = held[source] if source in held else _open_source(source, readonly)
                parent, name = self._mount_point(base, target)
                if self.mode != "bind":
                    try:  # noqa: SIM105 - contextlib would cost an import
                        os.symlink(source, name, dir_fd=parent)
                    except FileExistsError:
                        pass  # prepared by an earlier start of this worker
                    continue
                try:  # noqa: SIM105 - as above
                    os.mkdir(name, 0o700, dir_fd=parent)
                except FileExistsError:
                    pass
                try:
                    point = os.open(name, PATH_NOFOLLOW, dir_fd=parent)
                except OSError as exc:
                    raise SpawnError("target", exc.errno or errno.EINVAL, target) from None
                mounts.append((src, point, parent, name, readonly, target))
        finally:
            unbecome()
        libc = self.libc
        for src, point, parent, name, readonly, target in mounts:
            source_path, point_path = f"/proc/self/fd/{src}", f"/proc/self/fd/{point}"
            if libc.mount(source_path.encode(), point_path.encode(), None, MS_BIND | MS_REC, None):
                raise OSError(ctypes_errno(libc), target)
            if readonly:
                # The mount's own root, as the name is looked up again (through the new mount).
                mounted = os.open(name, PATH_NOFOLLOW, dir_fd=parent)
                flags = MS_BIND | MS_REMOUNT | MS_RDONLY
                if libc.mount(None, f"/proc/self/fd/{mounted}".encode(), None, flags, None):
                    raise OSError(ctypes_errno(libc), target)

    def _mount_point(self, base: int, target: str) -> tuple[int, str]:  # pragma: no cover
        """The directory that holds ``target``'s mount point, reached from the workspace one
        name at a time without following links (made as the account where missing)."""
        relative = os.path.relpath(target, self.workspace)
        parts = relative.split(os.sep)
        if relative == os.curdir or os.pardir in parts:
            raise SpawnError("target", errno.EXDEV, target)
        fd = os.dup(base)
        for part in parts[:-1]:
            try:  # noqa: SIM105 - as above
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(part, DIR_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise SpawnError("target", exc.errno or errno.EINVAL, target) from None
            finally:
                os.close(fd)
            fd = child
        return fd, parts[-1]


PATH_NOFOLLOW = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_held(source: str) -> int:  # pragma: no cover - child side
    """A directory the pool holds, opened by the pool (no link followed at its end)."""
    try:
        return os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SpawnError("source", exc.errno or errno.ENOENT, source) from None


def _open_source(source: str, readonly: bool) -> int:  # pragma: no cover - child side
    """The directory to mount, opened as the account; a writable one made when missing."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return os.open(source, flags)
    except FileNotFoundError:
        if readonly:
            raise SpawnError("source", errno.ENOENT, source) from None
    except OSError as exc:
        raise SpawnError("source", exc.errno or errno.EACCES, source) from None
    try:
        os.makedirs(source, exist_ok=True)  # an output or volume directory to fill
        return os.open(source, flags)
    except OSError as exc:
        raise SpawnError("volume", exc.errno or errno.EACCES, source) from None


def execvpe(argv: list[str], env: dict[str, str]) -> None:  # pragma: no cover - child side
    """``os.execvpe``, without its import of ``warnings``: the child may run as an account
    that cannot read this Python's standard library, so it imports nothing after it drops
    root. Searches the command's PATH the same way (the first error other than "not there"
    wins)."""
    name = argv[0]
    if os.sep in name:
        os.execve(name, argv, env)  # noqa: S606 - argv, never a shell
    found: OSError | None = None
    last: OSError = FileNotFoundError(errno.ENOENT, "not found", name)
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            os.execve(os.path.join(directory or os.curdir, name), argv, env)  # noqa: S606
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            last = exc
            found = found or exc
    raise found or last


def become(account: dict[str, Any]) -> None:  # pragma: no cover - child side
    """Act as ``account`` for file access (effective ids), keeping the way back to root."""
    os.setgroups(account["groups"] or [account["gid"]])
    os.setegid(account["gid"])
    os.seteuid(account["uid"])


def unbecome() -> None:  # pragma: no cover - child side
    os.seteuid(0)
    os.setegid(0)


def drop_to(account: dict[str, Any]) -> None:  # pragma: no cover - child side
    """Become ``account`` for good: real, effective and saved ids (root's capabilities go)."""
    os.setgroups(account["groups"] or [account["gid"]])
    os.setresgid(account["gid"], account["gid"], account["gid"])
    os.setresuid(account["uid"], account["uid"], account["uid"])
    if os.getuid() == 0 or os.geteuid() == 0:  # never run a job as root by mistake
        raise OSError(errno.EPERM, "still root")


def ctypes_errno(libc: Any) -> int:  # pragma: no cover - child side
    import ctypes

    return ctypes.get_errno() or errno.EPERM


class Child:
    """What the forked child does before it execs the command."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        cgroup: cgroups.Cgroup | None,
        account: dict[str, Any] | None = None,
        terminal: bool = False,
        sandbox: Sandbox | None = None,
        runtime: ContainerRuntime | None = None,
    ) -> None:
        self.argv = argv
        self.sandbox = sandbox
        self.runtime = runtime
        """The image the command runs in (:mod:`container`); None: the host."""
        self.env = env
        self.cwd = cwd
        self.cgroup = cgroup
        self.account = account
        self.terminal = terminal
        """fd 0 is a terminal, to be the command's controlling terminal and its stdio."""
        self.ioctl: Any = None
        if terminal:  # only for shells: it costs imports
            import fcntl
            import termios

            self.ioctl = (fcntl.ioctl, termios.TIOCSCTTY)

    def spawn(self, out_fd: int, binder: Binder) -> int:
        """fork + exec in a new process group (with a terminal: a new session); raise
        SpawnError if a step before exec fails."""
        read_fd, write_fd = os.pipe()  # close-on-exec: EOF on read means exec succeeded
        devnull = os.open(os.devnull, os.O_RDONLY)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child either execs or exits
            self._exec(write_fd, devnull, out_fd, binder)
        os.close(write_fd)
        if self.terminal:
            # The terminal is the command's now: without our copy, its other side sees the
            # end once the command's processes are gone. (No setpgid here: the child makes a
            # session of its own, which a process group leader cannot.)
            os.dup2(devnull, 0)
        else:
            try:  # noqa: SIM105 - as above
                os.setpgid(pid, pid)  # also in the parent: no signal can race the child's call
            except OSError:
                pass
        os.close(devnull)
        report = os.read(read_fd, REPORT_CAP).decode(errors="replace")
        os.close(read_fd)
        if report:
            os.waitpid(pid, 0)
            step, code, where = [*report.split(":", 2), "", ""][:3]
            raise SpawnError(step, int(code or 0), where)
        return pid

    def _sandbox(self, binder: Binder) -> None:  # pragma: no cover - child side
        """The worker's private /tmp and hidden devices, in the namespace the binder made (or
        one of its own): SpawnError("sandbox") naming the path that failed."""
        if self.sandbox is None:
            return
        try:
            self.sandbox.apply(unshared=binder.mode == "bind")
        except OSError as exc:
            where = f"{exc.filename}: {exc.strerror}"
            raise SpawnError("sandbox", exc.errno or errno.EPERM, where) from None

    def _isolate(self, binder: Binder) -> None:  # pragma: no cover - child side
        """The host's sandbox, or the image, which has its own /tmp and /dev (the sandbox
        would only hide from it the host paths it is built from)."""
        if self.runtime is None:
            self._sandbox(binder)
        else:
            self._enter_image()

    def _enter_image(self) -> None:  # pragma: no cover - child side
        """Into the image's root (after the host's mounts, before the drop to the account):
        SpawnError("image") naming the path that failed."""
        if self.runtime is None:
            return
        try:
            self.runtime.enter()
        except OSError as exc:
            where = f"{exc.filename}: {exc.strerror}"
            raise SpawnError("image", exc.errno or errno.EPERM, where) from None

    def _exec(
        self, report_fd: int, devnull: int, out_fd: int, binder: Binder
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
            if self.terminal:
                step = "terminal"
                os.setsid()
                ioctl, set_controlling = self.ioctl
                ioctl(0, set_controlling, 0)
                if self.account is not None:  # its own terminal, as login(1) makes it
                    os.fchown(0, self.account["uid"], -1)
            else:
                os.setpgid(0, 0)
            if self.account is not None:
                os.umask(0o077)  # what the job makes is its account's alone
            step = "mount"
            binder.apply()
            step = "sandbox"
            self._isolate(binder)
            if self.account is not None:
                step = "account"
                drop_to(self.account)  # root (cgroup, mounts) ends here, before the job runs
            step = "chdir"
            os.chdir(self.cwd)
            if self.terminal:
                os.dup2(0, 1)
                os.dup2(0, 2)
            else:
                os.dup2(devnull, 0)
                os.dup2(out_fd, 1)
                os.dup2(out_fd, 2)
            step = "exec"
            execvpe(self.argv, self.env)
        except SpawnError as exc:
            report = f"{exc.step}:{exc.errno or 0}:{exc.where}"
            os.write(report_fd, report.encode()[:REPORT_CAP])
        except OSError as exc:
            where = exc.strerror if step in ("mount", "cgroup", "account", "terminal") else ""
            os.write(report_fd, f"{step}:{exc.errno or 0}:{where}".encode()[:REPORT_CAP])
        except BaseException as exc:  # a bug of ours: say so rather than exit in silence
            report = f"setup:{errno.EIO}:{type(exc).__name__}: {exc}"
            os.write(report_fd, report.encode()[:REPORT_CAP])
        finally:
            os._exit(EXIT_NOT_FOUND)


CANNOT_START = {
    "source:missing": "the directory to mount, {where!r}, does not exist",
    "source": "cannot reach the directory to mount, {where!r}{who}: {why}",
    "volume": "cannot create the directory to mount, {where!r}{who}: {why}",
    "target:outside": "the mount point {where!r} is not inside the worker's workspace",
    "target": "cannot make the mount point {where!r}{who}: {why}",
    "workspace": "the OS account {name!r} cannot reach the worker's workspace {where!r}: {why} "
    "(every directory above the pool's home must let other accounts pass)",
    "files": "cannot write {where!r}: {why}",
    "account": "cannot switch to the OS account {name!r}: {detail}",
    "mount": "cannot mount the workspace at {where!r}: {why}",
    "cgroup": "cannot set up the worker's cgroup: {detail}",
    "sandbox": "cannot set up the worker's private /tmp and devices: {detail}",
    "image": "cannot set up the worker's image: {detail}",
    "terminal": "cannot make the terminal the command's own: {detail}",
    "chdir:missing": "working directory {cwd!r} does not exist",
    "chdir": "cannot enter working directory {cwd!r}{who}: {why}",
    "setup": "cannot prepare the command: {detail}",
    "exec:missing": "{argv0!r}: command not found",
    "exec": "cannot execute {argv0!r}{who}: {why}",
    "exec:denied": "cannot execute {argv0!r}{who}: {why} (the account may not search a "
    "directory on the way to it or run it: install it into a path other accounts can read and "
    'search, or run the job in an image; docs/jobs.md, "The job\'s environment")',
}
"""What the log and the exit record say when a step before exec failed, by step (and cause)."""


class WorkerSpec:
    """``spec.json``, read once: the fields of :class:`gpuyard.models.workerdir.SupervisorSpec`,
    which the executor writes in full, so their defaults live there and nowhere here. A plain
    class with slots, not a model: the supervisor starts on builtin modules only."""

    __slots__ = (
        "account",
        "argv",
        "attempt",
        "binds",
        "cgroup",
        "cwd",
        "env",
        "files",
        "grace",
        "image",
        "job",
        "job_dir",
        "log",
        "log_max",
        "notify",
        "rank",
        "sandbox",
        "terminal",
        "workspace",
    )
    job: int
    attempt: int
    rank: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    grace: float
    log: str
    log_max: int
    files: dict[str, dict[str, Any]]
    binds: list[dict[str, Any]]
    notify: str
    cgroup: dict[str, Any] | None
    account: dict[str, Any] | None
    workspace: str
    job_dir: str
    sandbox: dict[str, Any] | None
    image: dict[str, Any] | None
    terminal: bool

    def __init__(self, data: dict[str, Any]) -> None:
        for name in self.__slots__:
            setattr(self, name, data[name])


class Supervisor:
    def __init__(self, directory: str) -> None:
        # Opened before anything of the job runs: what the job later does to the path (a
        # rename, a link) cannot redirect what we read or write here.
        self.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dir = directory
        raw = untrusted.read_file(self.dir_fd, "spec.json", 16 << 20)
        if raw is None:
            raise SystemExit(f"no spec.json in {directory}")
        self.spec = WorkerSpec(loads(raw.decode()))
        self.key = {"job": self.spec.job, "attempt": self.spec.attempt, "rank": self.spec.rank}
        self.argv = self.spec.argv
        self.cwd = self.spec.cwd
        self.notify_address = self.spec.notify
        self.cgroup = cgroups.Cgroup.from_json(self.spec.cgroup)
        self.account = self.spec.account
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
        log = logcap.CappedLog(
            self.spec.log,
            self.spec.log_max,
            lambda meta: self.write(logcap.META, meta),
            group=None if self.account is None else self.account["gid"],
        )
        binder = Binder(
            [
                (b["target"], b["source"], b["readonly"], b.get("held", False))
                for b in self.spec.binds
            ],
            self.account,
            self.spec.workspace,
        )
        runtime = self._runtime()
        if runtime is not None:
            self.argv, self.cwd = runtime.argv(self.argv), runtime.workdir()
        child = Child(
            self.argv,
            self.spec.env if runtime is None else self._image_env(),
            self.cwd,
            self.cgroup,
            self.account,
            terminal=self.spec.terminal,
            sandbox=Sandbox(self.spec.sandbox, self.account) if self.spec.sandbox else None,
            runtime=runtime,
        )
        try:
            self._write_files()
            if self.cgroup is not None:
                try:
                    self.cgroup.create()
                except cgroups.CgroupError as exc:
                    raise SpawnError(
                        "cgroup", exc.errno or errno.EPERM, exc.strerror or ""
                    ) from None
            binder.prepare()
            pid, drained, pipe = self._spawn(child, binder, log)
        except SpawnError as exc:
            return self._cannot_start(log, exc)
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
        if self._drained(drained, pipe, log):
            log.close()  # else its thread still holds it: it goes with this process
        self._record_exit({**record, "finished_at": time.time()})
        return 0

    def _runtime(self) -> ContainerRuntime | None:
        if self.spec.image is None:
            return None
        from gpuyard.executors.local import container  # only for workers in an image

        return container.runtime_for(self.spec.image, self.account)

    def _image_env(self) -> dict[str, str]:
        from gpuyard.executors.local import container

        image = self.spec.image or {}
        return container.environment(image.get("env") or {}, self.spec.env)

    def _record_exit(self, record: dict[str, Any]) -> None:
        """Write ``exit.json`` and say so; on a full disk, wait for room (the worker shows
        running until then, and its exit is recorded once space is freed)."""
        while True:
            try:
                self.write("exit.json", record, sync=True)
                break
            except OSError as exc:
                if exc.errno not in logcap.FULL:
                    raise
                time.sleep(FULL_RETRY)
        self.notify("exited")

    def _spawn(
        self, child: Child, binder: Binder, log: logcap.CappedLog
    ) -> tuple[int, _thread.LockType, int]:
        """Start the command with its output on a pipe that a thread drains into ``log``;
        the lock is released when the pipe has ended. (A terminal is the command's output:
        no pipe, -1.)"""
        drained = _thread.allocate_lock()
        if child.terminal:
            return child.spawn(-1, binder), drained, -1
        read_fd, write_fd = os.pipe()
        try:
            pid = child.spawn(write_fd, binder)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        drained.acquire()
        _thread.start_new_thread(self._drain, (log, read_fd, drained))
        return pid, drained, read_fd

    def _drained(self, drained: _thread.LockType, pipe: int, log: logcap.CappedLog) -> bool:
        """Wait for the rest of the worker's output. With a cgroup every process of the worker
        is gone, so the pipe ends at once. Without one, a process that escaped the group
        (``setsid``) may hold it open for ever: take what is in the pipe now, then stop
        waiting (the executor kills that process when it reports the end)."""
        if self.cgroup is not None or pipe < 0:
            return drained.acquire(True, DRAIN_WAIT)
        import fcntl  # only here: it costs an import
        import termios

        deadline, seen, count = time.monotonic() + DRAIN_WAIT, -1, bytearray(4)
        while not drained.acquire(True, 0.05):
            try:
                fcntl.ioctl(pipe, termios.FIONREAD, count)
            except OSError:  # its thread has just closed it: the pipe ended
                return drained.acquire(True, DRAIN_WAIT)
            idle = not int.from_bytes(count, sys.byteorder) and not log.busy
            if (idle and log.consumed == seen) or time.monotonic() > deadline:
                return False
            seen = log.consumed if idle else -1
        return True

    @staticmethod
    def _drain(log: logcap.CappedLog, read_fd: int, drained: _thread.LockType) -> None:
        try:
            log.drain(read_fd)
        finally:
            drained.release()

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
        """The launch's files (hostfiles, agents): SpawnError("files") when one cannot be."""
        for path, file in self.spec.files.items():
            try:
                if self.account is None:
                    self._write_file(path, file["content"], file["mode"])
                else:
                    self._write_job_file(path, file["content"], file["mode"])
            except untrusted.Unreadable:
                raise SpawnError("files", errno.ENOTDIR, path) from None
            except OSError as exc:
                raise SpawnError("files", exc.errno or errno.EIO, path) from None

    def _write_job_file(self, path: str, content: str, mode: int) -> None:
        """For a job of another account: below the job's directory (root's, which the job
        cannot change), reached without following links; new folders 0755 (the job reads
        them; other accounts cannot enter the job's directory)."""
        job_dir = self.spec.job_dir
        relative = os.path.relpath(os.path.dirname(path), job_dir) if job_dir else os.pardir
        if relative.split(os.sep)[0] == os.pardir:
            raise OSError(errno.EXDEV, "not below the job's directory")
        fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in [] if relative == os.curdir else relative.split(os.sep):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
                except FileExistsError:
                    made = False
                child = os.open(part, DIR_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = child
                if made:
                    os.fchmod(fd, 0o755)  # whatever the umask
            untrusted.write_file(fd, os.path.basename(path), content.encode(), mode=mode)
        finally:
            os.close(fd)

    @staticmethod
    def _write_file(path: str, content: str, mode: int) -> None:
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

    def _cannot_start(self, log: logcap.CappedLog, exc: SpawnError) -> int:
        what = self._describe(exc)
        log.write(f"gpuyard: {what}\n".encode())
        code = EXIT_NOT_FOUND if exc.errno == errno.ENOENT else EXIT_CANNOT_EXECUTE
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()
        now = time.time()
        record = {"exit_code": code, "started_at": now, "finished_at": now, "message": what}
        log.close()
        self._record_exit(record)
        return 0

    def _describe(self, exc: SpawnError) -> str:
        """Why the command could not start, in one line."""
        key = exc.step
        if key not in CANNOT_START or (key == "setup" and not exc.where):
            key = "exec"
        if exc.errno == errno.ENOENT and key in ("source", "chdir", "exec"):
            key += ":missing"
        elif key == "target" and exc.errno == errno.EXDEV:
            key += ":outside"
        name = self.account["name"] if self.account is not None else ""
        if key == "exec" and exc.errno == errno.EACCES and name:
            key += ":denied"  # what the submission checks first (gpuyard.launch.program)
        why = os.strerror(exc.errno)
        return CANNOT_START[key].format(
            argv0=self.argv[0] if self.argv else "",
            cwd=self.cwd,
            where=exc.where,
            detail=exc.where or why,
            why=why,
            name=name,
            who=f" as {name!r}" if name else "",
        )

    def _grace(self) -> float:
        """The graceful period: the executor's terminate.json if it is sound, else the spec's."""
        try:
            raw = untrusted.read_file(self.dir_fd, "terminate.json", 4096)
            grace = loads(raw.decode())["grace"] if raw is not None else None
        except (untrusted.Unreadable, ValueError, TypeError, KeyError, UnicodeDecodeError):
            grace = None
        if isinstance(grace, int | float) and not isinstance(grace, bool) and 0 <= grace < 1e9:
            return float(grace)
        return float(self.spec.grace)

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
