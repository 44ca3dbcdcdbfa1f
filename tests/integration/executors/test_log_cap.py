"""A worker's log is capped: its oldest part is dropped behind a marker line, offsets stay
those of the whole output (docs/security.md#logs-and-disk-space). Real supervisors."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
MakeExecutor = Callable[..., LocalExecutor]

CAP = 1 << 20
LINE = 9  # "%08d\n"
LINES = 600_000  # 5.4 MB: five times the cap
FLOOD = (
    "import sys\n"
    "out = sys.stdout.buffer\n"
    f"for i in range({LINES}):\n"
    "    out.write(b'%08d\\n' % i)\n"
)


def expected(offset: int, size: int) -> bytes:
    """The whole output's bytes ``offset`` .. ``offset + size``."""
    first = offset // LINE
    text = b"".join(b"%08d\n" % i for i in range(first, min(LINES, first + size // LINE + 2)))
    skip = offset - first * LINE
    return text[skip : skip + size]


def launch(ex: LocalExecutor, argv: list[str], job: int = 1) -> Handle:
    return ex.launch(WorkerLaunch(WorkerKey(job, 0, 0), "local", argv, dict(ENV), "/", 5.0))


def wait_exited(ex: LocalExecutor, handle: Handle, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while ex.status([handle])[0].state is not WorkerState.EXITED:
        assert time.monotonic() < deadline, "the worker did not exit"
        time.sleep(0.05)


def test_a_flood_of_output_keeps_the_log_under_its_cap_with_a_marker(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(log_max=CAP)
    handle = launch(ex, [sys.executable, "-c", FLOOD])
    wait_exited(ex, handle)
    assert ex.status([handle])[0].exit_code == 0
    on_disk = os.stat(handle["log"]).st_size
    assert on_disk <= CAP
    start = ex.log_start(handle)
    data, size = ex.read_log(handle, start, 2 * CAP)
    assert size == LINES * LINE  # offsets count every byte the job printed
    assert len(data) == on_disk == size - start
    marker, _, kept = data.partition(b"\n")
    assert marker.startswith(b"gpuyard: ") and b"bytes of the oldest output were dropped" in marker
    dropped = int(marker.split()[1])
    assert dropped == size - len(kept)  # the marker says exactly how much is gone
    assert kept == expected(size - len(kept), len(kept))  # whole lines, the newest ones
    assert kept.endswith(b"%08d\n" % (LINES - 1))
    # A dropped offset reads nothing; the caller goes on from log_start.
    assert ex.read_log(handle, 0, 100) == (b"", size)


def test_a_reader_following_the_log_by_offset_never_sees_a_wrong_byte(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(log_max=CAP)
    handle = launch(ex, [sys.executable, "-c", FLOOD])
    offset, chunks, deadline = 0, 0, time.monotonic() + 60
    while True:
        exited = ex.status([handle])[0].state is WorkerState.EXITED
        offset = max(offset, ex.log_start(handle))
        data, size = ex.read_log(handle, offset, 64 * 1024)
        head = data[: data.find(b"\n") + 1]
        if head != expected(offset, len(head)):
            # The marker (or its end, for a reader that was inside the part dropped): it
            # stands where dropped bytes were, and whole lines follow it.
            tail = b"GPUYARD_LOG_MAX)\n"
            assert head.endswith(tail) or tail.endswith(head), head
            offset, data = offset + len(head), data[len(head) :]
        assert data == expected(offset, len(data)), f"wrong bytes at offset {offset}"
        offset += len(data)
        chunks += 1
        if exited and offset >= size:
            break
        assert time.monotonic() < deadline, "the reader did not reach the end"
    assert offset == LINES * LINE
    assert chunks > 1


def test_without_a_cap_the_log_is_kept_whole(make_executor: MakeExecutor, tmp_path: Path) -> None:
    ex = make_executor(log_max=0)
    handle = launch(ex, [sys.executable, "-c", FLOOD.replace(str(LINES), "200000")])
    wait_exited(ex, handle)
    data, size = ex.read_log(handle, 0, 4 * CAP)
    assert size == len(data) == 200_000 * LINE
    assert ex.log_start(handle) == 0
