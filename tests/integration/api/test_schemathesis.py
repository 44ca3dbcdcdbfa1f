"""The API does what its OpenAPI document says, on both databases: schemathesis sends a few
hundred generated requests (seeded, so the same ones each run) to the real server over HTTP,
as an admin, and checks every answer: no 5xx, and status, media type, body and headers as
documented. A failure prints schemathesis's report, with a ``curl`` line for each case.

The long run is ``bench/fuzz_api.py``; both go through :mod:`gpuyard.testing.fuzz`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import TokenFor
from gpuyard.testing.fuzz import FUZZ_NODES, fuzz_api, populate

SEED = 20250610
MAX_EXAMPLES = 8
"""Random cases per operation; the stateful phase adds its sequences."""
PHASES = ("examples", "fuzzing", "stateful")
"""The coverage phase (every bound and type of every field, thousands of cases) is the long
run's: bench/fuzz_api.py."""


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(FUZZ_NODES)


@pytest.fixture
def auth_headers(settings: Settings, token_for: TokenFor) -> dict[str, str]:
    """How every fuzzed request signs in: as the pool's own user, an admin."""
    return {"Authorization": f"Bearer {token_for(settings.user, admin=True)}"}


def test_every_answer_is_what_the_document_says(
    api_url: str,
    auth_headers: dict[str, str],
    store: Store,
    fake_executor: FakeExecutor,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    populate(api_url, auth_headers, Controller(store, fake_executor, clock=clock))
    report = fuzz_api(
        api_url,
        workdir=tmp_path / "schemathesis",
        headers=auth_headers,
        seed=SEED,
        max_examples=MAX_EXAMPLES,
        phases=PHASES,
    )
    assert report.ok, report.summary() + "\n\n" + "\n".join(report.output)
    assert report.cases >= 200, report.summary()
