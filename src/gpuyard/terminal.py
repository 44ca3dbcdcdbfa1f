"""Text safe to print on a terminal: what the CLI and the Slurm commands print of others' text.

A job's name, command, env, reason and log are written by its owner (or by what the job
prints), and shown to whoever may view the job. Printed as they are, escape sequences in them
act on the viewer's terminal: they rewrite what is on screen, set the window title, and on some
terminals answer back as if typed (OSC 52 writes the clipboard). :func:`printable` removes
them: every CSI (``ESC [`` or the 8-bit ``0x9b``), OSC, DCS, SOS, PM and APC sequence with its
payload, every other ``ESC`` sequence, and every other control character but ``\\n`` and
``\\t`` (the rest of C0, DEL, C1). What is left is plain text; whatever is cut short or
malformed loses its control characters all the same, so nothing that acts on a terminal is
ever left. :class:`StreamFilter` does the same for a byte stream that arrives in chunks
(``gpuyard logs``), and :func:`scrubbed` for every string of a response model.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["PrintableWriter", "StreamFilter", "printable", "scrubbed"]

_STRING_INTRO = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"
"""OSC, DCS, SOS, PM, APC: a payload up to a terminator (BEL or ST)."""
_CSI = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
_TERMINATED = _STRING_INTRO + r".*?(?:\x07|\x1b\\|\x9c)"
_OTHER_ESC = r"\x1b[\x20-\x2f]*[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]"
"""Two-character (and nF) escapes, not the introducers of CSI or of string sequences."""
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"
"""Every control character but tab and newline (ESC included, when nothing above matched)."""

_SEQUENCE = re.compile(f"{_CSI}|{_TERMINATED}|{_OTHER_ESC}|{_CONTROL}", re.DOTALL)
_COMPLETE = re.compile(f"{_CSI}|{_TERMINATED}|{_OTHER_ESC}", re.DOTALL)
_INTRODUCER = re.compile(r"[\x1b\x90\x98\x9b\x9d\x9e\x9f]")
MAX_PENDING = 4096
"""Characters a stream holds back while a sequence may still be completing."""


def printable(text: str) -> str:
    """``text`` without terminal escape sequences or control characters but ``\\n``, ``\\t``."""
    return _SEQUENCE.sub("", text)


def scrubbed(value: Any) -> Any:
    """``value`` with :func:`printable` applied to every plain string in it: inside pydantic
    models (a copy), lists, tuples and dicts (keys too). Enums and other types are kept."""
    if type(value) is str:
        return printable(value)
    if isinstance(value, list | tuple):
        return type(value)(scrubbed(v) for v in value)
    if isinstance(value, Mapping):
        return {scrubbed(k): scrubbed(v) for k, v in value.items()}
    fields = getattr(type(value), "model_fields", None)
    if fields is not None and hasattr(value, "model_copy"):
        return value.model_copy(update={n: scrubbed(getattr(value, n)) for n in fields})
    return value


class StreamFilter:
    """:func:`printable` over a byte stream that arrives in chunks: UTF-8 decoded as it comes
    (an invalid byte becomes U+FFFD), and a sequence split between chunks held back until it
    completes (at most :data:`MAX_PENDING` characters; then it is dropped like any other)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes, *, final: bool = False) -> str:
        text = self._pending + self._decoder.decode(data, final)
        cut = len(text) if final else _incomplete_from(text)
        self._pending = text[cut:]
        return printable(text[:cut])


def _incomplete_from(text: str) -> int:
    """Where a sequence that may still be completing begins (``len(text)``: none)."""
    start = -1
    for found in _INTRODUCER.finditer(text, max(0, len(text) - MAX_PENDING)):
        start = found.start()
    # A complete sequence, or a line break after the introducer (no sequence still to come
    # spans lines): nothing to wait for.
    if start < 0 or "\n" in text[start:] or _COMPLETE.match(text, start) is not None:
        return len(text)
    return start


class PrintableWriter:
    """A text stream that writes :func:`printable` text to ``target`` (a command's stdout)."""

    def __init__(self, target: TextIO) -> None:
        self.target = target

    def write(self, text: str) -> int:
        self.target.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)
