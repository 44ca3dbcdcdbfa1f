"""A throwaway PostgreSQL server for tests, from the binaries installed on this machine.

``initdb`` + ``pg_ctl`` in a temporary directory, listening on 127.0.0.1 and a unix socket
there, trust authentication, fsync off. PostgreSQL refuses to run as root, so under root the
server runs as the ``postgres`` system user (``runuser``) in a directory it owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_server", "unavailable_reason"]


def find_postgres_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _run_as() -> str | None:
    """The user to run the server as when we are root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    return None


def unavailable_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or None if they can."""
    if find_postgres_bin() is None:
        return (
            "PostgreSQL server binaries (initdb, pg_ctl) are not installed; install the "
            "`postgresql` package to run the PostgreSQL tests"
        )
    if os.geteuid() == 0 and (_run_as() is None or shutil.which("runuser") is None):
        return "running as root without a `postgres` user and runuser to start PostgreSQL as"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    port: int
    user: str = "gpuyard"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[-1]
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    bindir = find_postgres_bin()
    if bindir is None:
        raise RuntimeError(unavailable_reason() or "no PostgreSQL")
    as_user = _run_as()
    root = Path(tempfile.mkdtemp(prefix="gpuyard-pg-"))
    data = root / "data"
    if as_user:
        entry = pwd.getpwnam(as_user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    prefix = ["runuser", "-u", as_user, "--"] if as_user else []
    port = _free_port()
    server = PostgresServer(port=port)
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                server.user,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-w",
                "-l",
                str(root / "server.log"),
                "start",
            ],
            check=True,
            capture_output=True,
        )
        yield server
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
