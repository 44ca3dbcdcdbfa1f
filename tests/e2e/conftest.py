"""End-to-end: a real `gpuyard up` process driven through the real CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.pool import PoolProcess


@pytest.fixture
def pool_factory(tmp_path: Path) -> Iterator[type[PoolProcess]]:
    started: list[PoolProcess] = []

    class Tracked(PoolProcess):
        def start(self, timeout: float = 30) -> PoolProcess:
            started.append(self)
            return super().start(timeout)

    yield Tracked
    for pool in started:
        pool.stop()
