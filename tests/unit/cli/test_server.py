"""The log of a foreground ``gpuyard up``: what Alembic says at every start is left out, a
migration that runs is not."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.cli.server import configure_logging
from gpuyard.store.engine import Store


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    root, migration = logging.getLogger(), logging.getLogger("alembic.runtime.migration")
    saved = (list(root.handlers), root.level, list(migration.filters))
    stream = io.StringIO()
    try:
        configure_logging(stream)
        yield stream
    finally:
        root.handlers[:], migration.filters[:] = saved[0], saved[2]
        root.setLevel(saved[1])


def test_starting_logs_no_alembic_chatter_but_the_migrations_it_runs(
    log: io.StringIO, tmp_path: Path
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'pool.db'}")
    store.migrate()  # a new database: every migration runs
    first = log.getvalue()
    assert "Running upgrade" in first
    store.migrate()  # nothing to do: nothing said
    assert log.getvalue() == first
    assert "Context impl" not in first and "Will assume" not in first


def test_nodes_explains_n_a_only_when_a_node_shows_it() -> None:
    from gpuyard.cli.server import health_note
    from gpuyard.models.health import Finding, Probe, ProbeStatus, health_summary

    ok = Finding(probe=Probe.DISK, status=ProbeStatus.OK)
    unknown = Finding(probe=Probe.GPU_ECC, status=ProbeStatus.NOT_AVAILABLE)
    assert health_note([[ok], []]) is None
    assert health_summary([ok, unknown]) == "ok, 1 n/a"
    note = health_note([[ok], [ok, unknown]])
    assert note is not None and note.startswith("HEALTH n/a: ") and "unknown, not ok" in note
