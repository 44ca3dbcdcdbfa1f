"""End-to-end: a real `gpuyard up` process driven through the real CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess


@pytest.fixture
def pool_factory(tmp_path: Path) -> Iterator[type[ServerProcess]]:
    started: list[ServerProcess] = []

    class Tracked(ServerProcess):
        def start(self, timeout: float = 30) -> ServerProcess:
            started.append(self)
            return super().start(timeout)

    yield Tracked
    for pool in started:
        pool.stop()
