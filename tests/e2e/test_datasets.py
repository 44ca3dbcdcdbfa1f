"""Datasets end to end (issue 28): `gpuyard datasets upload` through a connection that drops
mid-way resumes from the server's offset rather than starting over; `gpuyard datasets create
--from` a path below the pool's dataset root; a job of the local executor mounts a version
read-only at workspace/dataset/<name> and sees its files."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

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
    assert refused.returncode == 2 and "not below a dataset root" in refused.stderr

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
