"""Long run: the API fuzzed against its OpenAPI document with schemathesis, thousands of cases.

The real app (on a fake executor, a fresh SQLite or, with ``--postgres``, PostgreSQL database,
populated by :func:`gpuyard.testing.fuzz.populate`) served over HTTP; schemathesis's command
line sends every phase (the document's examples, every bound and type of every field, random
cases, stateful sequences) as the pool's own user, an admin, with a fixed seed, and checks
each answer (``--checks``; default: no 5xx, and status, media type, body and headers as
documented). Random cases per operation are sized so that one round reaches ``--cases``; when
it does not (an operation without parameters has one case), further rounds of random and
stateful cases follow, each with the next seed, on a fresh pool.

Prints the cases sent and the failures by kind; the full report of any failing run goes to
``--out``. Exits 1 if anything failed. The same runner, smaller, is in the test suite
(tests/integration/api/test_schemathesis.py). Run: ``.venv/bin/python bench/fuzz_api.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import user_token
from gpuyard.testing.fuzz import CHECKS, FUZZ_NODES, PHASES, FuzzReport, fuzz_api, populate
from gpuyard.testing.postgres import postgres_server
from gpuyard.testing.server import serve

ALL_CHECKS = (
    *CHECKS,
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
    "positive_data_acceptance",
    "negative_data_rejection",
)
"""``--checks all``: also what schemathesis infers about methods, auth and resources, and
whether the document's constraints are exactly the server's."""


@contextlib.contextmanager
def database(home: Path, *, postgres: bool) -> Iterator[str]:
    if not postgres:
        yield f"sqlite:///{home / 'gpuyard.db'}"
        return
    with postgres_server() as server:
        url = server.create_database()
        yield url
        server.drop_database(url)


def fuzz_round(
    workdir: Path,
    *,
    seed: int,
    max_examples: int,
    phases: tuple[str, ...],
    args: argparse.Namespace,
) -> FuzzReport:
    """One round on a fresh, populated pool."""
    workdir.mkdir(parents=True)
    with database(workdir, postgres=args.postgres) as url:
        store = Store(url)
        store.migrate()
        settings = Settings(home=workdir / "home")
        executor = FakeExecutor(FUZZ_NODES)
        clock = ManualClock()
        app = create_app(settings, store=store, executor=executor, clock=clock)
        headers = {"Authorization": f"Bearer {user_token(app, settings.user, admin=True)}"}
        try:
            with serve(app) as base_url:
                populate(base_url, headers, Controller(store, executor, clock=clock))
                return fuzz_api(
                    base_url,
                    workdir=workdir / "schemathesis",
                    headers=headers,
                    seed=seed,
                    max_examples=max_examples,
                    checks=args.checks,
                    phases=phases,
                )
        finally:
            store.close()


def operations(args: argparse.Namespace) -> int:
    """How many operations the document has (to size the random cases per operation)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store = Store(f"sqlite:///{home / 'count.db'}")
        store.migrate()
        app = create_app(Settings(home=home / "home"), store=store, executor=FakeExecutor())
        with serve(app) as base_url:
            doc = httpx.get(f"{base_url}/api/v1/openapi.json").json()
        store.close()
    return sum(len(methods) for methods in doc["paths"].values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000, help="at least this many cases")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL instead of SQLite")
    parser.add_argument(
        "--checks",
        default=",".join(CHECKS),
        help="comma-separated schemathesis checks, or `all` (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, help="where to keep reports (default: a temp dir)")
    args = parser.parse_args()
    args.checks = ALL_CHECKS if args.checks == "all" else tuple(args.checks.split(","))
    out = args.out or Path(tempfile.mkdtemp(prefix="gpuyard-fuzz-"))

    ops = operations(args)
    total = FuzzReport()
    began = time.monotonic()
    seed, phases = args.seed, PHASES
    while total.cases < args.cases:
        max_examples = max(1, math.ceil((args.cases - total.cases) / ops))
        t0 = time.monotonic()
        report = fuzz_round(
            out / f"round-{seed}", seed=seed, max_examples=max_examples, phases=phases, args=args
        )
        print(
            f"seed {seed}: {report.cases:,} cases ({max_examples} random per operation, "
            f"phases {','.join(phases)}) in {time.monotonic() - t0:.0f} s, "
            f"{sum(report.failures.values())} failures, {sum(report.errors.values())} errors",
            flush=True,
        )
        total.add(report)
        if report.cases == 0:
            break
        seed, phases = seed + 1, ("fuzzing", "stateful")

    database_name = "PostgreSQL" if args.postgres else "SQLite"
    print(
        f"\n{total.cases:,} cases against {ops} operations on {database_name} in "
        f"{time.monotonic() - began:.0f} s; checks: {', '.join(args.checks)}"
    )
    print(f"failures by kind: {dict(total.failures) or 'none'}")
    print(f"errors by kind: {dict(total.errors) or 'none'}")
    if total.output:
        log = out / "failures.txt"
        log.write_text("\n\n".join(total.output))
        print(f"schemathesis's reports of the failing runs: {log}")
    return 0 if total.ok else 1


if __name__ == "__main__":
    sys.exit(main())
