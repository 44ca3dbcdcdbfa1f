"""``sbatch``'s quick path: the same submission without loading the client and the models.

Every ``sbatch`` is a process of its own, and most of one is spent importing: httpx, pydantic,
the settings and every model take about a second on a busy 2-core machine, against a few
milliseconds for Slurm's C ``sbatch``. When the pool's address and a token are in the
environment (``GPUYARD_URL``, ``GPUYARD_TOKEN``), this path parses the options and builds the
spec with the same functions (``gpuyard.slurm.sbatch``, standard library only) and posts it
with a small HTTP/1.1 client on a socket (``http.client`` alone would load the ``email``
package, a third of what this path imports). Whatever it does not handle (an array, a script
on standard input, an option error, an answer that is not a success) it leaves to the full
command (:func:`gpuyard.slurm.commands.sbatch.sbatch`), which runs from the start and prints what
Slurm would, so both paths print the same. It never leaves after the pool may have taken the
job: once the request may have been sent, a failure is an error that says to check first.
"""

from __future__ import annotations

import _socket  # the C module: socket.py loads selectors and more, 3 ms of a 35 ms process
import json
import os

from gpuyard.slurm import sbatch as build
from gpuyard.slurm.options import OptionError
from gpuyard.spec_limits import DEFAULT_POOL

TYPE_CHECKING = False  # typing is not imported at run time: it costs as much as json
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TextIO

__all__ = ["Unanswered", "request", "sbatch", "split_url"]

TIMEOUT = 30.0
_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Elsewhere(Exception):
    """Not for the quick path: the full command takes over."""


class Unanswered(Exception):
    """The request may have reached the pool, but no well-formed answer came back."""


def sbatch(args: Sequence[str], out: TextIO) -> int | None:
    """Submit like ``sbatch ARGS``; its exit status, or None when the full command must run."""
    url, token = os.environ.get("GPUYARD_URL", ""), os.environ.get("GPUYARD_TOKEN", "")
    where = split_url(url)
    if not token or where is None:
        return None
    try:
        options, script, name = build.parse(args, _no_stdin)
        if "array" in options.values:
            raise _Elsewhere  # several submissions, withdrawn together if one fails
        pools: list[str] = []
        partition = options.values.get("partition", "").split(",")[0]
        if partition and partition != DEFAULT_POOL:
            pools = [str(p["name"]) for p in _read(where, token, "/pools")]
        [spec] = build.specs_from_here(options, script, script_name=name, pools=pools)
    except (_Elsewhere, OptionError, OSError, ValueError, Unanswered):
        return None
    job = _submit(url, where, token, spec)
    if job is None:
        return None
    out.write(f"{job}\n" if "parsable" in options.values else f"Submitted batch job {job}\n")
    return 0


def _no_stdin() -> bytes | None:
    raise _Elsewhere  # read once only, by whichever path keeps it


def split_url(url: str) -> tuple[str, str, int, str] | None:
    """``(scheme, host, port, base path)`` of ``http[s]://host[:port][/base]``; None for
    anything else (user info, a query, an odd port...), which the full command then reads."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        return None
    netloc, slash, path = rest.partition("/")
    if "@" in netloc or "?" in rest or "#" in rest or not netloc:
        return None
    if netloc.startswith("["):  # [v6]:port
        host, bracket, port = netloc[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return None
        port = port[1:]
    else:
        host, _, port = netloc.partition(":")
    if not host or any(c in host for c in " \t\r\n/\\"):
        return None
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return None
    number = int(port) if port else (443 if scheme == "https" else 80)
    return scheme, host.lower(), number, ("/" + path if slash else "").rstrip("/")


def request(
    where: tuple[str, str, int, str],
    token: str,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    timeout: float = TIMEOUT,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a connection of its own: ``(status, body)``.

    Raises :class:`OSError` when it could not connect (nothing was sent: trying again is
    safe) and :class:`Unanswered` once the request may have been sent: a failure to send the
    rest, a dropped connection, or an answer it cannot read (bodies by ``Content-Length``,
    chunks, or up to the end of the connection)."""
    scheme, host, port, base = where
    connection = _connect(host, port, timeout)
    try:
        if scheme == "https":
            import socket  # only then, with ssl: they take a while to load
            import ssl

            plain = socket.socket(fileno=connection.detach())
            plain.settimeout(timeout)
            connection = ssl.create_default_context().wrap_socket(plain, server_hostname=host)
        named = f"[{host}]" if ":" in host else host
        default = 443 if scheme == "https" else 80
        head = [
            f"{method} {base}/api/v1{path} HTTP/1.1",
            f"Host: {named}" + ("" if port == default else f":{port}"),
            f"Authorization: Bearer {token}",
            "Accept: application/json",
            "Accept-Encoding: identity",
            "Connection: close",
        ]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        try:
            connection.sendall(message)
            return _answer(_Reader(connection), method)
        except (OSError, ValueError) as exc:
            raise Unanswered(str(exc) or type(exc).__name__) from None
    finally:
        connection.close()


def _connect(host: str, port: int, timeout: float) -> _socket.socket:
    """``socket.create_connection`` on the C module: each address in turn, the last error."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        connection = _socket.socket(family, kind, proto)
        try:
            connection.settimeout(timeout)
            connection.connect(address)
        except OSError as exc:
            connection.close()
            error = exc
        else:
            return connection
    raise error or OSError(f"no address for {host}")


class _Reader:
    """Lines and counted bytes from a connection (``makefile`` needs socket.py)."""

    def __init__(self, connection: _socket.socket) -> None:
        self.connection = connection
        self.buffer = bytearray()
        self.ended = False

    def _more(self) -> bool:
        if not self.ended:
            data = self.connection.recv(65536)
            self.buffer += data
            self.ended = not data
        return not self.ended

    def readline(self, limit: int) -> bytes:
        """Up to and with the next newline, at most ``limit`` bytes; less at the end."""
        while True:
            end = self.buffer.find(b"\n", 0, limit)
            if end >= 0 or len(self.buffer) >= limit or not self._more():
                size = end + 1 if end >= 0 else min(limit, len(self.buffer))
                line = bytes(self.buffer[:size])
                del self.buffer[:size]
                return line

    def read(self, size: int = -1) -> bytes:
        """``size`` bytes (fewer at the end); -1: up to the end."""
        while (size < 0 or len(self.buffer) < size) and self._more():
            pass
        size = len(self.buffer) if size < 0 else min(size, len(self.buffer))
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


def _line(stream: _Reader) -> bytes:
    line = stream.readline(_MAX_LINE + 1)
    if len(line) > _MAX_LINE or not line.endswith(b"\n"):
        raise ValueError("a line of the answer is cut short or too long")
    return line.rstrip(b"\r\n")


def _answer(stream: _Reader, method: str) -> tuple[int, bytes]:
    status, headers = _head(stream)
    while 100 <= status < 200 and status != 101:  # 100 Continue and the like come first
        status, headers = _head(stream)
    if status == 101:
        raise ValueError("the server switched protocols")
    if method == "HEAD" or status in (204, 304):
        return status, b""
    coding = headers.get(b"transfer-encoding", b"identity").lower()
    if coding == b"chunked":
        return status, _chunks(stream)
    if coding != b"identity":
        raise ValueError(f"unknown transfer encoding {coding!r}")
    if b"content-length" in headers:
        length = headers[b"content-length"]
        if not (length.isdigit() and len(length) < 16):
            raise ValueError(f"bad Content-Length {length!r}")
        data = stream.read(int(length))
        if len(data) != int(length):
            raise ValueError("the answer was cut short")
        return status, data
    return status, stream.read()  # up to the end of the connection (we asked to close it)


def _head(stream: _Reader) -> tuple[int, dict[bytes, bytes]]:
    """The status line and the headers (names in lower case)."""
    first = stream.readline(_MAX_LINE + 1)
    if not first:
        raise ValueError("the connection closed without an answer")
    version, _, rest = first.rstrip(b"\r\n").partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not (code.isdigit() and len(code) == 3):
        raise ValueError(f"not an HTTP answer: {first[:80]!r}")
    headers: dict[bytes, bytes] = {}
    for _ in range(_MAX_HEADERS):
        line = _line(stream)
        if not line:
            return int(code), headers
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError(f"not a header: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    raise ValueError("too many headers")


def _chunks(stream: _Reader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = _line(stream).split(b";")[0].strip()
        try:
            length = int(size, 16)
        except ValueError:
            raise ValueError(f"bad chunk size {size[:20]!r}") from None
        if length == 0:
            while _line(stream):  # trailers
                pass
            return b"".join(parts)
        data = stream.read(length)
        if len(data) != length or _line(stream):
            raise ValueError("a chunk was cut short")
        parts.append(data)


def _read(where: tuple[str, str, int, str], token: str, path: str) -> Any:
    """A read: any failure sends the submission down the full path."""
    status, body = request(where, token, "GET", path)
    if status != 200:
        raise _Elsewhere
    return json.loads(body)


def _submit(
    url: str, where: tuple[str, str, int, str], token: str, spec: dict[str, Any]
) -> int | None:
    """The new job's id; None when the pool did not take it (nothing was created, so the full
    command may try again and word the refusal). Once the request may have reached the pool,
    a failure is reported instead: trying again could submit the job twice."""
    body = json.dumps(spec).encode()
    try:
        status, answer = request(where, token, "POST", "/jobs", body)
    except OSError:
        return None  # no connection: nothing was sent
    except Unanswered as exc:
        raise SystemExit(
            f"sbatch: error: no answer from the pool at {url} ({exc}); the job may have "
            "been submitted: check with squeue before submitting it again"
        ) from None
    if status != 201:
        return None
    try:
        return int(json.loads(answer)["id"])
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"sbatch: error: the pool at {url} answered without a job id") from None
