"""gpuyard.terminal: others' text printed without what would act on the viewer's terminal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyard.models import JobSpec, JobState, JobStatus, JobView
from gpuyard.terminal import StreamFilter, printable, scrubbed

HOSTILE = [
    ("\x1b[2J\x1b[Hclean", "clean"),  # clear the screen, cursor home
    ("\x1b]0;pwned\x07title", "title"),  # OSC window title, BEL-terminated
    ("\x1b]52;c;ZXZpbA==\x1b\\copy", "copy"),  # OSC 52 writes the clipboard, ST-terminated
    ("\x9b31mred", "red"),  # 8-bit CSI
    ("\x9d0;t\x9cok", "ok"),  # 8-bit OSC and ST
    ("\x1bPq#0;2;0;0;0\x1b\\sixel", "sixel"),  # DCS
    ("a\rb\x08c\x7fd\x00e", "abcde"),  # carriage return, backspace, DEL, NUL
    ("\x1b7saved\x1b8", "saved"),  # two-character escapes
    ("\x1b(0line", "line"),  # nF: character set
    ("lone\x1b", "lone"),
    ("tab\tand\nnewline", "tab\tand\nnewline"),
    ("naïve 名前 🚀", "naïve 名前 🚀"),
]


@pytest.mark.parametrize(("text", "shown"), HOSTILE)
def test_escape_sequences_and_controls_are_removed(text: str, shown: str) -> None:
    assert printable(text) == shown


@given(st.text())
def test_nothing_that_acts_on_a_terminal_is_ever_left(text: str) -> None:
    left = printable(text)
    assert not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F for c in left)


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=7))
def test_a_stream_in_any_chunks_is_left_with_nothing_that_acts(data: bytes, size: int) -> None:
    stream = StreamFilter()
    parts = [stream.feed(data[i : i + size]) for i in range(0, len(data), size)]
    joined = "".join(parts) + stream.feed(b"", final=True)
    assert printable(joined) == joined
    plain = data.replace(b"\x1b", b"").replace(b"\r", b"")
    if all(0x20 <= b < 0x7F or b in b"\n\t" for b in plain) and b"\x1b" not in data:
        assert joined == plain.decode()  # plain text passes as it is


def test_a_sequence_split_between_chunks_is_removed_whole() -> None:
    stream = StreamFilter()
    out = (
        stream.feed(b"step 1\n\x1b]0;ti")
        + stream.feed(b"tle\x07step 2\x1b[3")
        + stream.feed(b"1m!")
    )
    assert out + stream.feed(b"", final=True) == "step 1\nstep 2!"


def test_every_string_of_a_view_is_scrubbed_and_the_rest_kept() -> None:
    job = JobView(
        id=3,
        name="\x1b]0;x\x07train",
        owner="alice",
        status=JobStatus.QUEUED,
        state=JobState.QUEUED,
        spec=JobSpec(command="python t.py", env={"A": "\x1b[31mred"}),
        attempt=0,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        reason="\x9b2Jwaits",
    )
    clean = scrubbed(job)
    assert (clean.name, clean.reason, clean.spec.env) == ("train", "waits", {"A": "red"})
    assert clean.state is JobState.QUEUED and clean.created_at == job.created_at
    assert job.name == "\x1b]0;x\x07train"  # a copy: the original is untouched
