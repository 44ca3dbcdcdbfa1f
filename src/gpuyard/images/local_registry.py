"""Running Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1: the pool's own image
registry when an admin asks for one (``GPUYARD_REGISTRY=local``; docs/images.md#the-pools-own-
registry), and the tests' throwaway one (:mod:`gpuyard.testing.registry`).

Nothing anonymous: TLS with a self-signed certificate made here (``openssl``; the certificate
is its own CA, given to clients as the CA file), bcrypt htpasswd users (``htpasswd -B``), the
configuration written as JSON (YAML is a superset of it), and a readiness check that waits for
the registry to ask for credentials. :class:`SupervisedRegistry` keeps one running: restarted
when it dies, stopped with its owner.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "POOL_USER",
    "PoolRegistryFiles",
    "SupervisedRegistry",
    "free_port",
    "make_certificate",
    "missing_tools",
    "pool_registry_files",
    "wait_ready",
    "write_config",
    "write_htpasswd",
]

log = logging.getLogger("gpuyard.images")

TOOLS = {"docker-registry": "docker-registry", "htpasswd": "apache2-utils", "openssl": "openssl"}
"""The commands needed, and the Debian packages that have them."""
POOL_USER = "gpuyard"
"""The pool's own account on its registry (it resolves tags, pulls and pushes)."""
READY_TIMEOUT = 30.0
RESTART_BACKOFF = (0.5, 30.0)
"""Seconds before restarting a registry that died: the first, and the most (doubling)."""
_DIES_WITH_US = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
"""A pool ended by a signal ends without running its clean-up (uvicorn raises the signal
again once it has stopped serving), or is killed outright: its registry is told to stop
(SIGTERM) by the kernel when the thread that started it goes (util-linux's setpriv)."""


def missing_tools() -> list[str]:
    """The Debian packages whose commands are missing here (empty: all are present)."""
    return [package for tool, package in TOOLS.items() if shutil.which(tool) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_certificate(directory: Path, *, days: int) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key (mode 0600)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec"),
            *("-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days)),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    key.chmod(0o600)
    return cert, key


def write_htpasswd(path: Path, users: dict[str, str], *, cost: int = 10) -> None:
    """Bcrypt entries for ``users`` (name -> password), mode 0600. The passwords go to
    ``htpasswd`` on its stdin, never on a command line another account could read."""
    path.unlink(missing_ok=True)
    for user, password in users.items():
        create = [] if path.exists() else ["-c"]
        subprocess.run(
            ["htpasswd", "-B", "-C", str(cost), "-i", *create, str(path), user],
            input=password.encode(),
            check=True,
            capture_output=True,
        )
    path.chmod(0o600)


def write_config(
    directory: Path, *, port: int, cert: Path, key: Path, realm: str, storage: Path
) -> Path:
    """``config.yml``: storage, TLS on 127.0.0.1:``port``, htpasswd auth, deletes allowed."""
    config = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {
            "addr": f"127.0.0.1:{port}",
            "secret": hashlib.sha256(str(directory).encode()).hexdigest(),
            "tls": {"certificate": str(cert), "key": str(key)},
        },
        "auth": {"htpasswd": {"realm": realm, "path": str(directory / "htpasswd")}},
    }
    path = directory / "config.yml"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def wait_ready(url: str, ca_file: Path, process: subprocess.Popen[bytes], log_file: Path) -> None:
    """Wait until the registry asks for credentials (401 on ``/v2/``); raise if it exits or
    does not answer within :data:`READY_TIMEOUT` seconds."""
    deadline = time.monotonic() + READY_TIMEOUT
    tls = ssl.create_default_context(cafile=str(ca_file))
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {_tail(log_file)}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/v2/", verify=tls, timeout=2.0).status_code == 401:
                return
        time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not answer in {READY_TIMEOUT:g} s: {_tail(log_file)}")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except FileNotFoundError:
        return "(no log)"


@dataclass(frozen=True)
class PoolRegistryFiles:
    """What the pool's own registry runs on, under ``<home>/registry``."""

    directory: Path
    config: Path
    ca_file: Path
    url: str
    user: str
    password: str


def pool_registry_files(home: Path, *, port: int) -> PoolRegistryFiles:
    """The pool's registry's files, made on first use and kept after: a certificate valid for
    ten years, the pool's credential (a random password in ``password``, mode 0600, and its
    htpasswd entry), the configuration and ``storage/`` (the images)."""
    directory = home / "registry"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    cert, key = directory / "cert.pem", directory / "key.pem"
    if not (cert.exists() and key.exists()):
        cert, key = make_certificate(directory, days=3650)
    secret = directory / "password"
    if not secret.exists():
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32))
    password = secret.read_text().strip()
    write_htpasswd(directory / "htpasswd", {POOL_USER: password})
    config = write_config(
        directory, port=port, cert=cert, key=key, realm="gpuyard", storage=directory / "storage"
    )
    url = f"https://127.0.0.1:{port}"
    return PoolRegistryFiles(directory, config, cert, url, POOL_USER, password)


class SupervisedRegistry:
    """One ``docker-registry serve <config>``, restarted when it dies until :meth:`stop`, and
    stopped by the kernel when the process that runs it goes (:data:`_DIES_WITH_US`)."""

    def __init__(self, config: Path, *, url: str, ca_file: Path, log_file: Path) -> None:
        self.config, self.url, self.ca_file, self.log_file = config, url, ca_file, log_file
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start it, wait until it answers, and watch it."""
        self._process = self._spawn()
        wait_ready(self.url, self.ca_file, self._process, self.log_file)
        self._watcher = threading.Thread(target=self._watch, name="registry", daemon=True)
        self._watcher.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End it (SIGTERM, SIGKILL after ``timeout`` seconds) and restart it no more."""
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._watcher is not None:
            self._watcher.join(timeout)

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_file.open("ab") as out:
            return subprocess.Popen(
                [*_DIES_WITH_US, "docker-registry", "serve", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def _watch(self) -> None:
        backoff = RESTART_BACKOFF[0]
        while True:
            process = self._process
            assert process is not None
            code = process.wait()
            if self._stopping.is_set():
                return
            log.warning("the pool's registry exited (%s); restarting it in %.1f s", code, backoff)
            if self._stopping.wait(backoff):
                return
            with self._lock:  # stop() either sees the new process or keeps it from starting
                if self._stopping.is_set():
                    return
                self._process = self._spawn()
                self.restarts += 1
            try:
                wait_ready(self.url, self.ca_file, self._process, self.log_file)
                backoff = RESTART_BACKOFF[0]
            except RuntimeError:
                log.warning("the pool's registry did not come back", exc_info=True)
                backoff = min(RESTART_BACKOFF[1], 2 * backoff)
