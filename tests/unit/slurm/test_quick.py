"""sbatch's quick path and its HTTP/1.1 client, against real local servers.

A scripted server answers each connection with canned bytes (or drops it), so that what the
client does with an odd answer is tested as it happens on the wire: a connection refused
before anything was sent leaves the submission to the full command; once the request may have
reached the pool, a dropped connection or an unreadable answer is a clear error, never a second
submission.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuyard.slurm import quick
from gpuyard.slurm.shims import search_path, write_shims

Reply = Callable[[bytes], bytes | None]
"""The request's bytes -> the answer's bytes, or None to drop the connection."""


class Scripted:
    """A server on 127.0.0.1 that reads each request whole, records it, and answers as told."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        while len(body) < int(value):
                            body += connection.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                answer = self.reply(self.requests[-1])
                if answer is not None:
                    connection.sendall(answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Reply], Scripted]]:
    servers: list[Scripted] = []

    def start(reply: Reply) -> Scripted:
        servers.append(Scripted(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def created(job: int) -> Reply:
    body = json.dumps({"id": job, "state": "queued"}).encode()
    return lambda _: (
        b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


@pytest.fixture
def submit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[..., tuple[int | None, str]]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUYARD_TOKEN", "tok")

    def run(url: str, *args: str) -> tuple[int | None, str]:
        monkeypatch.setenv("GPUYARD_URL", url)
        out = io.StringIO()
        status = quick.sbatch(list(args) or ["--wrap", "true"], out)
        return status, out.getvalue()

    return run


def test_a_submission_is_posted_and_its_id_printed(
    serve: Callable[[Reply], Scripted], submit: Callable[..., tuple[int | None, str]]
) -> None:
    server = serve(created(41))
    assert submit(server.url, "-J", "x", "--wrap", "true") == (0, "Submitted batch job 41\n")
    assert submit(server.url, "--parsable", "--wrap", "true") == (0, "41\n")
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /api/v1/jobs HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert "Authorization: Bearer tok" in lines
    assert "Content-Type: application/json" in lines
    spec = json.loads(body)
    assert spec["mode"] == "slurm" and spec["slurm"]["job_name"] == "x"


def test_the_url_s_path_prefixes_the_api(
    serve: Callable[[Reply], Scripted], submit: Callable[..., tuple[int | None, str]]
) -> None:
    server = serve(created(5))
    assert submit(server.url + "/pool/", "--parsable", "--wrap", "true") == (0, "5\n")
    assert server.requests[0].startswith(b"POST /pool/api/v1/jobs HTTP/1.1\r\n")


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-length: 2\r\n\r\n{}",
        b'HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{"id": 1}',
        b"HTTP/1.0 503 Service Unavailable\r\n\r\n",
    ],
)
def test_a_refusal_leaves_the_submission_to_the_full_command(
    serve: Callable[[Reply], Scripted],
    submit: Callable[..., tuple[int | None, str]],
    answer: bytes,
) -> None:
    server = serve(lambda _: answer)
    assert submit(server.url) == (None, "")


def test_a_failed_tls_handshake_leaves_it_to_the_full_command(
    submit: Callable[..., tuple[int | None, str]],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as plain:  # no TLS: it hangs up at once
        port = plain.getsockname()[1]

        def refuse() -> None:
            plain.accept()[0].close()

        hang_up = threading.Thread(target=refuse, daemon=True)
        hang_up.start()
        assert submit(f"https://127.0.0.1:{port}") == (None, "")
        hang_up.join()


def test_what_the_quick_path_does_not_handle_is_never_sent(
    serve: Callable[[Reply], Scripted],
    submit: Callable[..., tuple[int | None, str]],
    tmp_path: Path,
) -> None:
    server = serve(created(1))
    assert submit(server.url, "--array=0-1", "--wrap", "true") == (None, "")
    assert submit(server.url, "--no-such-option", "--wrap", "true") == (None, "")
    assert server.requests == []


def test_a_refused_connection_leaves_it_to_the_full_command(
    submit: Callable[..., tuple[int | None, str]],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    assert submit(f"http://127.0.0.1:{port}") == (None, "")


@pytest.mark.parametrize(
    "answer",
    [
        None,  # dropped once the request arrived
        b"",  # closed without a word
        b'HTTP/1.1 201 Created\r\ncontent-length: 50\r\n\r\n{"id": 3}',  # cut short
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 201 Created\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 201 Created\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 201 Created\r\ncontent-length: -1\r\n\r\n",
    ],
)
def test_no_readable_answer_after_sending_is_a_clear_error(
    serve: Callable[[Reply], Scripted],
    submit: Callable[..., tuple[int | None, str]],
    answer: bytes | None,
) -> None:
    server = serve(lambda _: answer)
    with pytest.raises(SystemExit) as exc:
        submit(server.url)
    assert "the job may have been submitted: check with squeue" in str(exc.value)
    assert len(server.requests) == 1  # sent once, never again


def test_a_success_without_an_id_is_a_clear_error(
    serve: Callable[[Reply], Scripted], submit: Callable[..., tuple[int | None, str]]
) -> None:
    server = serve(lambda _: b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}")
    with pytest.raises(SystemExit, match="answered without a job id"):
        submit(server.url)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n"
        b'5;x=y\r\n{"id"\r\n4\r\n: 9}\r\n0\r\nx-trailer: 1\r\n\r\n',
        b'HTTP/1.1 201 Created\r\nconnection: close\r\n\r\n{"id": 9}',  # up to the close
        b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 9\r\n\r\n{"id": 9}',
    ],
)
def test_chunked_close_delimited_and_interim_answers_are_read(
    serve: Callable[[Reply], Scripted],
    submit: Callable[..., tuple[int | None, str]],
    answer: bytes,
) -> None:
    server = serve(lambda _: answer)
    assert submit(server.url, "--parsable", "--wrap", "true") == (0, "9\n")


def test_a_partition_is_checked_against_the_pools_first(
    serve: Callable[[Reply], Scripted], submit: Callable[..., tuple[int | None, str]]
) -> None:
    pools = json.dumps([{"name": "default"}, {"name": "gpu"}]).encode()

    def reply(request: bytes) -> bytes | None:
        if request.startswith(b"GET /api/v1/pools "):
            return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(pools), pools)
        return created(12)(request)

    server = serve(reply)
    assert submit(server.url, "--parsable", "-p", "gpu", "--wrap", "true") == (0, "12\n")
    assert json.loads(server.requests[1].partition(b"\r\n\r\n")[2])["pool"] == "gpu"
    # An unknown one: the full command words Slurm's error.
    assert submit(server.url, "-p", "nowhere", "--wrap", "true") == (None, "")


def test_request_against_a_standard_http_server() -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = json.dumps({"path": self.path, "auth": self.headers["Authorization"]})
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        where = quick.split_url(f"http://127.0.0.1:{server.server_address[1]}/x")
        assert where is not None
        status, body = quick.request(where, "t", "GET", "/pools")
        assert status == 200
        assert json.loads(body) == {"path": "/x/api/v1/pools", "auth": "Bearer t"}
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("http://h", ("http", "h", 80, "")),
        ("HTTPS://Pool.example:8443/", ("https", "pool.example", 8443, "")),
        ("http://127.0.0.1:9/a/b/", ("http", "127.0.0.1", 9, "/a/b")),
        ("http://[::1]:8000/x", ("http", "::1", 8000, "/x")),
        ("https://[fe80::1]", ("https", "fe80::1", 443, "")),
        ("", None),
        ("ftp://h", None),
        ("http://", None),
        ("http://user:pw@h", None),
        ("http://h:port", None),
        ("http://h:0", None),
        ("http://h:70000", None),
        ("http://h/?q=1", None),
        ("http://[::1", None),
        ("http://[::1]x", None),
    ],
)
def test_split_url(url: str, where: tuple[str, str, int, str] | None) -> None:
    assert quick.split_url(url) == where


def test_the_shims_start_python_without_site_and_still_run_the_full_command(
    tmp_path: Path,
) -> None:
    [sbatch, *_] = write_shims(tmp_path / "bin")
    text = sbatch.read_text()
    assert f"{sys.executable} -I -S -c " in text and text.endswith(' sbatch "$@"\n')
    assert search_path()[0] == str(Path(quick.__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    done = subprocess.run(
        [str(sbatch), "--version"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (0, "slurm-wlm 22.05.8\n"), done.stderr


def test_a_heterogeneous_job_goes_the_quick_way_whole(
    serve: Callable[[Reply], Scripted],
    submit: Callable[..., tuple[int | None, str]],
    tmp_path: Path,
) -> None:
    server = serve(created(5))
    (tmp_path / "het.sh").write_text(
        "#!/bin/sh\n#SBATCH -N1 -J a\n#SBATCH hetjob\n#SBATCH -N2\ntrue\n"
    )
    assert submit(server.url, "--parsable", "het.sh") == (0, "5\n")
    [request] = server.requests
    spec = json.loads(request.partition(b"\r\n\r\n")[2])
    assert spec["nodes"] == 3
    assert [(c["job_name"], c["nodes"]) for c in spec["slurm"]["het"]] == [("a", 1), ("a", 2)]
