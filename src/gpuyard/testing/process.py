"""Run a real ``gpuyard up`` in a subprocess and drive it with the real CLI, for e2e tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from gpuyard.client import Client

__all__ = ["ServerProcess", "kill_workers"]


class ServerProcess:
    """``gpuyard up`` in its own process group, in ``home``, on a free port.

    Its jobs run as the pool's own user (``run_as="pool"``) unless a test asks for ``"owner"``:
    tests' jobs run the test's interpreter on files in pytest's temporary directories, which
    only the user running the tests can reach (pytest makes ``/tmp/pytest-of-<user>`` 0700),
    so an owner's account could not even start them. Tests of running as owners
    (docs/security.md) ask for it, in a home every account can pass through.
    """

    def __init__(
        self,
        home: Path,
        *args: str,
        run_as: str = "pool",
        settings: dict[str, str] | None = None,
    ) -> None:
        """``settings``: further ``GPUYARD_*`` variables of the pool's process."""
        self.home = home
        self.args = args
        self.run_as = run_as
        self.settings = dict(settings or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._client: Client | None = None

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
        env["GPUYARD_HOME"] = str(self.home)
        env["GPUYARD_RUN_AS"] = self.run_as
        # Tests keep their files in pytest's directories under /tmp, which a worker with a
        # private /tmp cannot see; the tests of that sandbox turn it back on in ``settings``.
        env["GPUYARD_PRIVATE_TMP"] = "false"
        env.update(self.settings)
        return env

    def slurm_env(self, shims: Path) -> dict[str, str]:
        """:attr:`env` with the Slurm commands (``gpuyard slurm-shims``, written into
        ``shims``) and this interpreter's directory first on PATH, as a Slurm user's shell."""
        from gpuyard.slurm.shims import write_shims

        write_shims(shims)
        path = f"{shims}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        return {**self.env, "PATH": path}

    def start(self, timeout: float = 30) -> ServerProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "pool.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuyard", "up", "--port", "0", *self.args],
            env=self.env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpuyard up exited: {self.log_tail()}")
            try:
                info = json.loads((self.home / "server.json").read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                info = {}
            if info.get("pid") == self.proc.pid:
                self.url = info["url"]
                self._client = None
                return self
            time.sleep(0.05)
        raise RuntimeError(f"gpuyard up not ready in {timeout}s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return (self.home / "pool.log").read_text(errors="replace")[-3000:]
        except FileNotFoundError:
            return ""

    def crash(self) -> None:
        """SIGKILL the whole process group, as an OOM kill or a crash would."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, *, workers: bool = True) -> None:
        """Stop ``gpuyard up`` (SIGTERM, then SIGKILL). A pool that stops leaves its workers
        running for the next one to adopt; a test's pool is not started again, so with
        ``workers`` its supervisors and jobs are killed too, rather than left to load the
        machine for the tests after it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if workers:
            kill_workers(self.home)
        if self._client is not None:
            self._client.close()
            self._client = None

    def cli(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "gpuyard", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"gpuyard {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n"
                f"{result.stderr}"
            )
        return result

    def cli_json(self, command: str, *args: str) -> Any:
        """Run ``gpuyard COMMAND --json ARGS…`` (--json first: a job's command follows --)."""
        return json.loads(self.cli(command, "--json", *args).stdout)

    @property
    def client(self) -> Client:
        """A client of this pool in the test's own process, signed in as the CLI would be
        (``GPUYARD_TOKEN`` of :attr:`settings`, else the owner's token), for polling: each
        ``gpuyard show`` is a Python start of about a second of CPU, which a test waiting on
        a job spent several times a second, and the tests beside it waited for."""
        if self._client is None:
            from gpuyard.client import Client

            token = self.settings.get("GPUYARD_TOKEN")
            if not token:
                token = (self.home / "owner.token").read_text().strip()
            self._client = Client(self.url, token=token)
        return self._client

    def job(self, job_id: int) -> dict[str, Any]:
        """What ``gpuyard show --json JOB`` prints, asked without starting the CLI."""
        return self.client.job(job_id).model_dump(mode="json")

    def log(self, job_id: int, *, worker: int = 0) -> str:
        """What ``gpuyard logs JOB --worker N`` prints, asked without starting the CLI."""
        from gpuyard.terminal import StreamFilter

        clean, text, offset = StreamFilter(), [], 0
        while True:
            chunk = self.client.logs(job_id, worker=worker, offset=offset, limit=1 << 20)
            text.append(clean.feed(chunk.data.encode()))
            if chunk.next_offset >= chunk.size or chunk.next_offset == chunk.offset:
                break
            offset = chunk.next_offset
        text.append(clean.feed(b"", final=True))
        return "".join(text)

    def wait_status(self, job_id: int, statuses: set[str], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["status"] in statuses:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {job['status']}, not {statuses}")
            time.sleep(0.2)

    def wait_for_step(self, job_id: int, step: int, timeout: float = 90) -> None:
        """Until rank 0 of the job's first attempt reports ``step`` in its progress.json."""
        progress = self.home / "jobs" / str(job_id) / "attempts/0/worker-0/control/progress.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if json.loads(progress.read_text())["step"] >= step:
                    return
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not reach step {step}: {self.log_tail()}")


def kill_workers(home: Path) -> int:
    """SIGKILL every supervisor and job process of the pool in ``home``: those started with a
    job directory of it in their environment, or whose command line names its supervisors'
    directory. How many there were."""
    root = os.path.realpath(home)
    supervisors = os.path.join(root, "supervisors") + os.sep
    jobs = os.path.join(root, "jobs") + os.sep
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if supervisors in cmdline or str(home) + "/supervisors/" in cmdline:
                found.append(proc)
                continue
            job_dir = proc.environ().get("GPUYARD_JOB_DIR", "")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if job_dir and os.path.realpath(job_dir).startswith(jobs):
            found.append(proc)
    for proc in found:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.kill()
    psutil.wait_procs(found, timeout=5)
    unmount_node_memory(home)
    return len(found)


def training_process(
    job_dir: Path, rank: int, script: str, *, attempt: int | None = None
) -> psutil.Process:
    """The process of ``script`` of one global rank of the job whose directory is ``job_dir``
    (under its worker's torchrun: ``RANK`` with ``LOCAL_RANK``), of ``attempt`` when given.
    By the job's directory, not its id: another pool on the machine numbers its jobs from 1
    too."""
    wanted = os.path.realpath(job_dir)
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if script not in " ".join(proc.info["cmdline"] or []):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        here = os.path.realpath(env.get("GPUYARD_JOB_DIR", "")) == wanted
        mine = here and env.get("RANK") == str(rank) and "LOCAL_RANK" in env
        if mine and (attempt is None or env.get("GPUYARD_ATTEMPT") == str(attempt)):
            return proc
    raise LookupError(f"no process of {script} for rank {rank} of the job in {job_dir}")


def unmount_node_memory(home: Path) -> None:
    """Unmount the node memory of the pool's jobs (``<home>/memory/<node>/<job>``, tmpfs
    mounts a job that had not ended when the pool stopped still holds), so its home can go."""
    below = os.path.join(os.path.realpath(home), "memory") + os.sep
    with contextlib.suppress(OSError), open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if len(line.split()) > 1]
    for point in points:
        if point.startswith(below):
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
