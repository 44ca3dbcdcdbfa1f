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

Standard library only, and started with ``python -I -S``: it must start fast and must not
depend on the environment of the job or of the control plane.

Worker directory layout: ``spec.json`` (written by the executor), ``lock``, ``state.json``,
``exit.json``, ``terminate.json`` (optional graceful period override), ``log``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _notify(address: str, message: str) -> None:
    if not address:
        return
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode(), "\0" + address)
    except OSError:
        pass  # nobody listening: the controller reads the files on its next pass


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


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


class Supervisor:
    def __init__(self, worker_dir: str) -> None:
        self.dir = worker_dir
        with open(os.path.join(worker_dir, "spec.json"), encoding="utf-8") as fh:
            self.spec: dict[str, Any] = json.load(fh)
        self.notify_address: str = self.spec.get("notify", "")
        self.term_requested = False
        self.child_exited = False

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
        signal.set_wakeup_fd(write_fd)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        # A handler, not SIG_IGN: an ignored signal would stay ignored in the command.
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGCHLD, self._on_child)
        self._write_files()
        log_fd = os.open(self.spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            child = subprocess.Popen(
                self.spec["argv"],
                cwd=self.spec["cwd"],
                env=self.spec["env"],
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                process_group=0,
                close_fds=True,
            )
        except OSError as exc:
            return self._cannot_start(log_fd, exc)
        started_at = time.time()
        _write_json(
            self.path("state.json"),
            {
                "supervisor_pid": os.getpid(),
                "pid": child.pid,
                "pgid": child.pid,
                "started_at": started_at,
            },
        )
        _notify(self.notify_address, f"started {self.dir}")
        code, escalated, terminated = self._wait(child, read_fd)
        _killpg(child.pid, signal.SIGKILL)  # whatever the command left behind in its group
        result: dict[str, Any] = {
            "exit_code": code if code >= 0 else 128 - code,
            "signal": signal.Signals(-code).name if code < 0 else None,
            "terminated": terminated,
            "escalated": escalated,
            "started_at": started_at,
            "finished_at": time.time(),
        }
        _write_json(self.path("exit.json"), result)
        os.close(log_fd)
        _notify(self.notify_address, f"exited {self.dir}")
        return 0

    def _write_files(self) -> None:
        for path, content in self.spec.get("files", {}).items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)

    def _cannot_start(self, log_fd: int, exc: OSError) -> int:
        argv0 = self.spec["argv"][0] if self.spec["argv"] else ""
        if isinstance(exc, FileNotFoundError) and exc.filename == self.spec["cwd"]:
            what = f"working directory {self.spec['cwd']!r} does not exist"
        elif isinstance(exc, FileNotFoundError):
            what = f"{argv0!r}: command not found"
        elif isinstance(exc, NotADirectoryError):
            what = f"working directory {self.spec['cwd']!r} is not a directory"
        else:
            what = f"cannot execute {argv0!r}: {exc.strerror or exc}"
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

    def _on_term(self, _signum: int, _frame: Any) -> None:
        self.term_requested = True

    def _on_hup(self, _signum: int, _frame: Any) -> None:
        pass  # the supervisor has no terminal; a stray SIGHUP must not end it

    def _on_child(self, _signum: int, _frame: Any) -> None:
        self.child_exited = True

    def _grace(self) -> float:
        try:
            with open(self.path("terminate.json"), encoding="utf-8") as fh:
                return float(json.load(fh)["grace"])
        except (OSError, ValueError, KeyError):
            return float(self.spec.get("grace", 30.0))

    def _wait(self, child: subprocess.Popen[bytes], read_fd: int) -> tuple[int, bool, bool]:
        deadline: float | None = None
        terminated = escalated = False
        while True:
            code = child.poll()
            if code is not None:
                return code, escalated, terminated
            if self.term_requested and not terminated:
                terminated = True
                _killpg(child.pid, signal.SIGTERM)
                deadline = time.monotonic() + self._grace()
            if deadline is not None and not escalated and time.monotonic() >= deadline:
                escalated = True
                _killpg(child.pid, signal.SIGKILL)
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
