"""The client side of ``gpuyard exec JOB shell``: a WebSocket to the server's shell relay.

See :mod:`gpuyard.services.shell` for the protocol: bytes both ways are the terminal's, a text
message from the client resizes it, a text message from the server ends the session with the
shell's exit code (or an error). Sending is safe from any thread (the CLI sends keystrokes from
one and resizes from a signal handler while the main thread receives).
"""

from __future__ import annotations

import json
import ssl
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import ClientConnection, connect

from gpuyard.errors import GpuyardError, ServerUnavailable, error_for_code

__all__ = ["ShellConnection", "ShellEnded"]

MAX_MESSAGE = 1 << 20


class ShellEnded(Exception):
    """The session is over; ``code`` is the shell's exit code (None when it was lost)."""

    def __init__(self, code: int | None, detail: str) -> None:
        super().__init__(detail or f"exit {code}")
        self.code = code
        self.detail = detail


class ShellConnection:
    """An open shell: :meth:`recv` its output until it raises :class:`ShellEnded`."""

    def __init__(self, socket: ClientConnection, *, rank: int, node: str) -> None:
        self._socket = socket
        self.rank = rank
        """The shell's worker rank (``gpuyard exec JOB status`` lists it)."""
        self.node = node

    @classmethod
    def open(
        cls,
        url: str,
        *,
        token: str | None,
        verify: bool | str = True,
        timeout: float = 30.0,
    ) -> ShellConnection:
        """Connect to the relay at ``url`` (http(s)://…/exec/shell?…) and wait for the shell to
        start; the server's refusal raises as the same error class it was."""
        ws_url = "ws" + url[len("http") :] if url.startswith("http") else url
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            socket: ClientConnection = connect(
                ws_url,
                additional_headers=headers,
                ssl=_ssl_context(verify) if ws_url.startswith("wss:") else None,
                open_timeout=timeout,
                max_size=MAX_MESSAGE,
                compression=None,
            ).__enter__()  # a context manager from websockets 17: entering it connects
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            raise ServerUnavailable(f"cannot open a shell at {url}: {exc}") from None
        try:
            first = socket.recv(timeout=timeout)
        except (ConnectionClosed, TimeoutError) as exc:
            socket.close()
            raise ServerUnavailable(
                f"the server closed the shell before it started: {exc}"
            ) from None
        message = _parse(first)
        if "error" in message:
            socket.close()
            raise error_for_code(str(message.get("code", "")))(str(message["error"]))
        ready = message.get("ready") or {}
        return cls(socket, rank=int(ready.get("rank", -1)), node=str(ready.get("node", "")))

    def send(self, data: bytes) -> None:
        """Keystrokes (or any input) for the shell."""
        self._socket.send(data)

    def resize(self, rows: int, cols: int) -> None:
        self._socket.send(json.dumps({"resize": {"rows": rows, "cols": cols}}))

    def recv(self, timeout: float | None = None) -> bytes:
        """The shell's next output; :class:`ShellEnded` once it has exited, TimeoutError after
        ``timeout`` seconds without output."""
        try:
            message = self._socket.recv(timeout=timeout)
        except ConnectionClosed as exc:
            raise ShellEnded(None, f"the connection closed: {exc}") from None
        if isinstance(message, bytes):
            return message
        parsed = _parse(message)
        if "error" in parsed:
            raise error_for_code(str(parsed.get("code", "")))(str(parsed["error"]))
        code = parsed.get("exit")
        raise ShellEnded(code if isinstance(code, int) else None, str(parsed.get("detail") or ""))

    def close(self) -> None:
        """Leave: the server kills the shell (and everything it started)."""
        self._socket.close()

    def __enter__(self) -> ShellConnection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _parse(message: str | bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(message)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise GpuyardError(
            f"the server sent something that is not the shell protocol: {message!r:.200}"
        )
    return parsed


def _ssl_context(verify: bool | str) -> ssl.SSLContext:
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return ssl.create_default_context()
