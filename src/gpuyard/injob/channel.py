"""The remote-exec channel: the frames, the opening and the connection of rexec's protocol.

One copy of the wire format, used by both of its clients: ``rexec.py agent`` (and the
server side of ``rexec.py serve``, :mod:`gpuyard.injob.rexec`, whose docstring describes the
protocol) and the Slurm step's ``srun`` (:mod:`gpuyard.slurm.step.main`). Standard library
only, imported lazily: it is on the path of every daemon launch.
"""

from __future__ import annotations

TYPE_CHECKING = False  # importing typing costs time on every daemon launch
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping
    from typing import BinaryIO

STDIN, STDOUT, STDERR, EXIT, ERROR, SIGNAL = 0, 1, 2, 3, 4, 5
FRAME_HEADER = 5  # channel byte + 4-byte length
MAX_FRAME = 1 << 20
MAX_TOKEN_LINE = 256  # the token and its newline: all that is read before authentication
CONNECT_TIMEOUT = 30.0  # how long a target may take to start serving
ENV_TOKEN = "GPUYARD_JOB_TOKEN"  # noqa: S105 - the variable's name, not a secret


class AgentError(Exception):
    """A failure of the agent itself (not of the remote command); exits 255 like ssh."""


def exit_status(returncode: int) -> int:
    """A shell's view of a child's end: ``-n`` (killed by signal n) becomes 128+n."""
    return 128 - returncode if returncode < 0 else returncode


def pack(channel: int, payload: bytes = b"") -> bytes:
    """One frame: the channel byte, the payload's length (4 bytes, big-endian), the payload."""
    return bytes((channel,)) + len(payload).to_bytes(4, "big") + payload


def read_frame(stream: BinaryIO) -> tuple[int, bytes] | None:
    """The next frame, or None at a clean end of stream; ValueError if the stream is corrupt."""
    head = stream.read(FRAME_HEADER)
    if not head:
        return None
    if len(head) < FRAME_HEADER:
        raise ValueError("connection closed inside a frame header")
    channel = head[0]
    length = int.from_bytes(head[1:], "big")
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes is over the {MAX_FRAME}-byte limit")
    payload = stream.read(length) if length else b""
    if len(payload) < length:
        raise ValueError("connection closed inside a frame")
    return channel, payload


def hello(token: str, header: Mapping[str, object]) -> bytes:
    """What a client sends first: the token line, then the header line (rexec.py's Protocol)."""
    import json

    line = token.encode() + b"\n"
    if not token or b"\n" in line[:-1] or b"\r" in line or len(line) > MAX_TOKEN_LINE:
        raise AgentError(f"{ENV_TOKEN} must be one line of at most {MAX_TOKEN_LINE - 1} bytes")
    return line + json.dumps(header).encode() + b"\n"


def connect(address: str, port: int, where: str) -> socket.socket:
    """Connect, waiting while the target is not listening yet.

    The executor starts a job's workers side by side, so the launcher's mpirun may ask for a
    target before that target's ``serve`` has bound its port: a refusal is retried until
    CONNECT_TIMEOUT, like ssh's ConnectionAttempts; any other error is final.
    """
    import socket
    import time

    deadline = time.monotonic() + CONNECT_TIMEOUT
    delay = 0.05
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=CONNECT_TIMEOUT)
        except ConnectionRefusedError:
            if time.monotonic() + delay > deadline:
                raise AgentError(
                    f"cannot reach {where}: connection refused for {CONNECT_TIMEOUT:.0f}s "
                    "(is the worker serving?)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except OSError as exc:
            raise AgentError(f"cannot reach {where}: {exc.strerror or exc}") from None
        else:
            conn.settimeout(None)
            return conn
