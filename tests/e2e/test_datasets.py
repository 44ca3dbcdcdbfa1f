"""Datasets end to end (issue 28): `gpuyard datasets upload` through a connection that drops
mid-way resumes from the server's offset rather than starting over; `gpuyard datasets create
--from` a path below the pool's dataset root; a job of the local executor mounts a version
read-only at workspace/dataset/<name> and sees its files."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow


class CuttingProxy:
    """A TCP proxy to ``target`` whose first connection is cut (both ways, with a reset) once
    ``cut_after`` bytes went upstream; later connections pass whole. ``upstream`` counts the
    bytes sent to the server over all connections."""

    def __init__(self, target: tuple[str, int], cut_after: int) -> None:
        self.target = target
        self.cut_after = cut_after
        self.connections = 0
        self.upstream = 0
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            first = self.connections == 1
            server = socket.create_connection(self.target)
            threading.Thread(target=self._up, args=(client, server, first), daemon=True).start()
            threading.Thread(target=_pipe, args=(server, client), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, cutting: bool) -> None:
        sent = 0
        try:
            while data := client.recv(65536):
                if cutting and sent + len(data) > self.cut_after:
                    self.cut.set()
                    for end in (client, server):  # a reset, as a dropped link gives
                        end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
                        end.close()
                    return
                server.sendall(data)
                sent += len(data)
                self.upstream += len(data)
        except OSError:
            pass
        _close(client, server)

    def close(self) -> None:
        self.listener.close()


LINGER_RESET = (1).to_bytes(4, "little") + (0).to_bytes(4, "little")


def _pipe(source: socket.socket, dest: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            dest.sendall(data)
    except OSError:
        pass
    _close(source, dest)


def _close(*ends: socket.socket) -> None:
    for end in ends:
        with suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


@contextmanager
def cutting_proxy(url: str, cut_after: int) -> Iterator[CuttingProxy]:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    proxy = CuttingProxy((host, int(port)), cut_after)
    try:
        yield proxy
    finally:
        proxy.close()


def _json(pool: ServerProcess, *args: str) -> Any:
    """``gpuyard datasets ARGS… --json``."""
    return json.loads(pool.cli("datasets", *args, "--json").stdout)


def test_an_upload_cut_mid_way_resumes_and_a_job_mounts_the_version_read_only(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    (shared / "corpus").mkdir(parents=True)
    (shared / "corpus" / "words.txt").write_text("alpha beta\n")
    pool = pool_factory(
        tmp_path / "home", settings={"GPUYARD_DATASET_ROOTS": f"/nonexistent:{shared}"}
    ).start()
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "hello.txt").write_text("hello from the dataset\n")
    blob = os.urandom(1_500_000)
    (tree / "blob.bin").write_bytes(blob)

    token = (pool.home / "owner.token").read_text().strip()
    with cutting_proxy(pool.url, cut_after=600_000) as proxy:
        proxied = ServerProcess(
            pool.home,
            settings={"GPUYARD_URL": f"http://127.0.0.1:{proxy.port}", "GPUYARD_TOKEN": token},
        )
        done = proxied.cli(
            "datasets", "upload", "mine", str(tree), "--chunk-size", "131072", timeout=120
        )
    assert proxy.cut.is_set() and proxy.connections >= 2, done.stderr
    archive = len(blob) + 10_000  # the tar's headers and padding
    assert proxy.upstream < archive + 400_000  # resumed, not sent again from the start
    assert "sent 100%" in done.stderr
    shown = _json(pool, "show", "mine")
    (version,) = shown["versions"]
    assert (version["state"], version["files"]) == ("ready", 2), version
    assert version["size"] == len(blob) + len("hello from the dataset\n")

    made = _json(pool, "create", "corpus", "--from", str(shared / "corpus"))
    assert made["versions"][0]["state"] == "ready"
    assert made["versions"][0]["path"] == str(shared / "corpus")
    refused = pool.cli("datasets", "create", "x", "--from", str(tmp_path / "tree"), check=False)
    said = " ".join(refused.stderr.split())  # the terminal's width wraps it
    assert refused.returncode == 2 and "is not below a dataset root" in said

    script = (
        'cat "$GPUYARD_WORKSPACE/dataset/data/sub/hello.txt" '
        '"$GPUYARD_WORKSPACE/dataset/corpus/words.txt"; '
        'if touch "$GPUYARD_WORKSPACE/dataset/data/new" 2>/dev/null; '
        "then echo writable; else echo read-only; fi"
    )
    job = pool.cli_json(
        "submit",
        "--dataset",
        "mine@1:data",
        "--dataset",
        "corpus",
        "--workdir",
        str(tmp_path),
        "--",
        "sh",
        "-c",
        script,
    )
    me = pool.client.user
    mounts = job["spec"]["mounts"]["datasets"]
    assert [(m["name"], m["dataset"], m["readonly"]) for m in mounts] == [
        ("data", f"{me}/mine@1", True),
        ("corpus", f"{me}/corpus@1", True),
    ]
    assert pool.cli("wait", str(job["id"]), check=False).returncode == 0, pool.log(job["id"])
    lines = pool.log(job["id"]).splitlines()
    assert lines[:2] == ["hello from the dataset", "alpha beta"]
    if os.geteuid() == 0:  # bind mounts: read-only is the kernel's (links elsewhere)
        assert lines[2] == "read-only"
    pool.cli("datasets", "rm", "mine")
    assert [d["name"] for d in _json(pool, "ls")] == ["corpus"]


class OwnerPool(ServerProcess):
    """A pool run by root whose jobs run as their owners' accounts, with a pool user of this
    test's own (its account, gpy-<user>, is this test's to remove)."""

    def __init__(self, home: Path, user: str, roots: str) -> None:
        super().__init__(
            home,
            "--virtual-nodes",
            "1",
            run_as="owner",
            settings={"GPUYARD_USER": user, "GPUYARD_DATASET_ROOTS": roots},
        )
        self.user = user


@pytest.fixture
def owner_pool() -> Iterator[OwnerPool]:
    # pytest's temporary directories are private to root: the pool's home and the shared
    # storage must be somewhere every account can pass through.
    base = Path(tempfile.mkdtemp(prefix="gpuyard-e2e-datasets-"))
    base.chmod(0o711)
    (base / "shared").mkdir(mode=0o755)
    pool = OwnerPool(base / "home", f"e2e{secrets.token_hex(4)}", str(base / "shared"))
    try:
        yield pool.start()
    finally:
        pool.stop()
        account = f"gpy-{pool.user}"
        with suppress(KeyError):
            uid = pwd.getpwnam(account).pw_uid
            for proc in psutil.process_iter(["uids"]):  # only this test's account runs them
                if proc.info["uids"].real == uid:
                    with suppress(psutil.Error):
                        proc.kill()
            time.sleep(0.2)
            subprocess.run(["userdel", account], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as other OS accounts needs root")
def test_where_jobs_run_as_their_owners_a_dataset_holds_only_what_the_owner_may_read(
    owner_pool: OwnerPool, tmp_path: Path
) -> None:
    pool = owner_pool
    shared = pool.home.parent / "shared"
    (shared / "open").mkdir(mode=0o755)
    (shared / "open" / "f.txt").write_text("open data\n")
    (shared / "open" / "f.txt").chmod(0o644)
    (shared / "closed").mkdir(mode=0o700)  # root's alone
    refused = pool.cli(
        "datasets", "create", "closed", "--from", str(shared / "closed"), check=False
    )
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and f"gpy-{pool.user}, the OS account your jobs" in said, said
    (shared / "open" / "hidden.txt").write_text("root's\n")
    (shared / "open" / "hidden.txt").chmod(0o600)
    failed = pool.cli("datasets", "create", "open", "--from", str(shared / "open"), check=False)
    assert failed.returncode == 1 and "hidden.txt" in failed.stdout, failed.stdout
    (shared / "open" / "hidden.txt").unlink()
    _json(pool, "create", "open", "--from", str(shared / "open"))

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "up.txt").write_text("uploaded\n")
    (tree / "up.txt").chmod(0o600)  # the pool makes it readable to the jobs it mounts it in
    stored = _json(pool, "upload", "up", str(tree))["versions"][0]["path"]
    # Only through its mount: the stored directory's path (its owner sees it) leads nowhere
    # for any account, so a job of someone it was shared with once keeps nothing after.
    script = (
        'id -un; cd "$GPUYARD_WORKSPACE/dataset"; cat open/f.txt up/up.txt; '
        "touch up/x 2>/dev/null && echo writable || echo read-only; "
        f"cat {stored}/up.txt 2>/dev/null || echo denied"
    )
    job = pool.cli_json(
        "submit",
        "--workdir",
        str(pool.home.parent),
        "--dataset",
        "open@2",
        "--dataset",
        "up",
        "--",
        "sh",
        "-c",
        script,
    )
    done = pool.wait_status(job["id"], {"succeeded", "failed"})
    log = pool.log(job["id"])
    assert done["status"] == "succeeded", log
    assert log.splitlines() == [f"gpy-{pool.user}", "open data", "uploaded", "read-only", "denied"]

    # The node's copy is the pool's alone too: the job reads it through its mount.
    flags = ("--workdir", str(pool.home.parent), "--dataset", "up", "--prepare-data")
    job = pool.cli_json(
        "submit", *flags, "--", "sh", "-c", 'cat "$GPUYARD_WORKSPACE/dataset/up/up.txt"'
    )
    done = pool.wait_status(job["id"], {"succeeded", "failed"})
    assert (done["status"], pool.log(job["id"])) == ("succeeded", "uploaded\n")

    # `gpuyard exec` into a held job mounts its datasets the same way.
    job = pool.cli_json("submit", *flags, "--", "sleep", "120")
    pool.wait_status(job["id"], {"running"})
    pool.cli("exec", str(job["id"]), "stop", "--hold", "5m")
    deadline = time.monotonic() + 60
    while pool.job(job["id"])["state"] != "held":
        assert time.monotonic() < deadline, pool.log_tail()
        time.sleep(0.3)
    read = 'cat "$GPUYARD_WORKSPACE/dataset/up/up.txt"'
    ran = json.loads(
        pool.cli("exec", str(job["id"]), "run", "--json", "--", "sh", "-c", read).stdout
    )
    (rank,) = ran["ranks"]
    deadline = time.monotonic() + 60
    while pool.cli("logs", str(job["id"]), "--worker", str(rank)).stdout != "uploaded\n":
        assert time.monotonic() < deadline, pool.log_tail()
        time.sleep(0.3)
    pool.cli("stop", str(job["id"]))
