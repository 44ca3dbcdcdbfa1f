"""Fuzz the API against its own OpenAPI document with schemathesis, over real HTTP.

One way to do it, used by the test suite (``tests/integration/api/test_schemathesis.py``, a few
hundred cases) and by the long run (``bench/fuzz_api.py``, thousands): schemathesis's command
line, in a child process, against a served app, with a fixed seed and every phase (the
document's examples, the coverage of its bounds and types, random cases, and stateful
sequences that feed one answer's ids into the next request). Its JSON report gives the counts;
its output, kept for a failure, has a ``curl`` line that reproduces each one.

The fuzzer is an admin, so it can also take its own access away: revoke its token, make itself
a plain user. The operations that can (:data:`LAST`) run after all the others, each in a run of
its own. A log is fuzzed without ``follow``: a followed log streams until its worker ends,
which a queued job's never does here (nothing runs them).

:func:`populate` gives the pool something to answer about first (nodes, a group, a user, a
pool, a quota, jobs in several states with workers and a log), so that answers with bodies are
checked, not only 404s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo

__all__ = [
    "CHECKS",
    "FUZZ_NODES",
    "LAST",
    "PHASES",
    "FuzzReport",
    "fuzz_api",
    "populate",
    "run_schemathesis",
]

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
)
"""What every answer is checked for: no 5xx, and status, media type, body and headers as the
document says."""

PHASES = ("examples", "coverage", "fuzzing", "stateful")
"""Schemathesis's phases: the document's examples; every bound, type and missing field the
schema has (deterministic, thousands of cases here); random cases (``max_examples`` per
operation); sequences that feed one answer's ids to the next request."""

LAST = ("PATCH /api/v1/users/{name}", "DELETE /api/v1/tokens/{token_id}")
"""Operations that can take the fuzzer's own access away, in the order they run, last."""

CONFIG = """\
[[operations]]
include-name = "GET /api/v1/jobs/{job_id}/logs"
parameters = { "query.follow" = false }
"""

FUZZ_NODES = (
    NodeInfo("n0", "127.0.0.10", gpus=8, cpus=32, memory=256 << 30, labels={"zone": "z1"}),
    NodeInfo("n1", "127.0.0.11", gpus=8, cpus=32, memory=256 << 30, labels={"zone": "z1"}),
    NodeInfo("n2", "127.0.0.12", gpus=4, cpus=16, memory=128 << 30, labels={"zone": "z2"}),
)
"""The fake nodes :func:`populate` expects (``FakeExecutor(FUZZ_NODES)``)."""


@dataclass
class FuzzReport:
    """What one or more runs found: cases sent, failures by kind (``ST108 Response violates
    schema``), errors by kind (a request that got no answer), and the runs' output."""

    cases: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    output: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.errors

    def add(self, other: FuzzReport) -> None:
        self.cases += other.cases
        self.failures += other.failures
        self.errors += other.errors
        self.output += other.output

    def summary(self) -> str:
        lines = [f"{self.cases} cases"]
        lines += [f"  failure {kind}: {n}" for kind, n in sorted(self.failures.items())]
        lines += [f"  error {kind}: {n}" for kind, n in sorted(self.errors.items())]
        return "\n".join(lines)


def run_schemathesis(
    schema_url: str,
    *,
    workdir: Path,
    headers: Mapping[str, str],
    seed: int,
    max_examples: int,
    checks: Sequence[str] = CHECKS,
    phases: Sequence[str] = PHASES,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    timeout: float = 600,
) -> FuzzReport:
    """One run of ``schemathesis run`` (operations named ``METHOD /path`` in ``include`` or,
    if none, all but ``exclude``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    report = workdir / f"report-{seed}-{len(list(workdir.glob('report-*')))}.json"
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
        schema_url,
        "--seed", str(seed),
        "--max-examples", str(max_examples),
        "--workers", "1",
        "--checks", ",".join(checks),
        "--phases", ",".join(phases),
        "--suppress-health-check", "all",
        "--request-timeout", "30",
        "--report", "json",
        "--report-json-path", str(report),
    ]  # fmt: skip
    for name, value in headers.items():
        command += ["--header", f"{name}: {value}"]
    for name in include:
        command += ["--include-name", name]
    for name in exclude:
        command += ["--exclude-name", name]
    done = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    if not report.exists():
        return FuzzReport(
            errors=Counter({f"schemathesis exited {done.returncode}": 1}), output=[output]
        )
    found: dict[str, Any] = json.loads(report.read_text())
    return FuzzReport(
        cases=int(found["test_cases"]["generated"]),
        failures=Counter({f"{f['code']} {f['title']}": int(f["count"]) for f in found["failures"]}),
        errors=Counter({str(e["title"]): int(e["count"]) for e in found["errors"]}),
        output=[output] if done.returncode else [],
    )


def fuzz_api(
    base_url: str,
    *,
    workdir: Path,
    headers: Mapping[str, str],
    seed: int,
    max_examples: int,
    checks: Sequence[str] = CHECKS,
    phases: Sequence[str] = PHASES,
) -> FuzzReport:
    """Every operation of the API served at ``base_url``: all but :data:`LAST` in one run,
    then each of :data:`LAST` in a run of its own."""
    schema_url = f"{base_url}/api/v1/openapi.json"
    common: dict[str, Any] = {
        "workdir": workdir,
        "headers": headers,
        "seed": seed,
        "max_examples": max_examples,
        "checks": checks,
        "phases": phases,
    }
    report = run_schemathesis(schema_url, exclude=LAST, **common)
    for name in LAST:
        report.add(run_schemathesis(schema_url, include=[name], **common))
    return report


def populate(base_url: str, headers: Mapping[str, str], controller: Controller) -> None:
    """Give the pool (whose executor is ``FakeExecutor(FUZZ_NODES)``) something to show:
    a group, a user in it, a pool with a node, a quota, and jobs 1-6: running (with a log),
    succeeded, failed, waiting, stopped, and a running two-node gang."""
    executor = controller.executor
    if not isinstance(executor, FakeExecutor):
        raise TypeError("populate needs the controller on a FakeExecutor(FUZZ_NODES)")
    controller.register_nodes()
    with httpx.Client(base_url=f"{base_url}/api/v1", headers=dict(headers)) as http:

        def send(method: str, path: str, body: Any) -> dict[str, Any]:
            response = http.request(method, path, json=body)
            if response.is_error:
                raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
            answer: dict[str, Any] = response.json()
            return answer

        send("POST", "/groups", {"name": "research", "urgent_limit": 4})
        send("POST", "/users", {"name": "alice", "group": "research"})
        send("POST", "/pools", {"name": "gold", "preemption": "suspend", "slices": ["1h", "10h"]})
        send("PATCH", "/nodes/n2/labels", {"set": {"pool": "gold", "rack": "r7"}})
        send("POST", "/quotas", {"kind": "user", "subject": "alice", "tier": "normal", "gpus": 8})
        specs: list[dict[str, Any]] = [
            {"command": "python train.py --lr 0.1", "resources": {"gpus": 1}, "env": {"A": "1"}},
            {"type": "batch", "tasks": [{"command": "echo a"}, {"command": "echo b"}]},
            {"command": "false", "name": "failing", "max_runtime": "1h"},
            {"command": "python big.py", "nodes": 2, "resources": {"gpus": 8}},
            {"command": "sleep 1000", "priority": "low"},
            {"command": "python ddp.py", "mode": "pytorch", "nodes": 2, "resources": {"gpus": 2}},
        ]
        ids = [int(send("POST", "/jobs", spec)["id"]) for spec in specs]
        controller.tick()
        executor.write_log(ids[0], "epoch 1 loss 0.5\nepoch 2 loss 0.25 ✓\n".encode())
        for rank in (0, 1):
            executor.exit(ids[1], rank, 0)
        executor.exit(ids[2], 0, 1)
        send("POST", f"/jobs/{ids[4]}/stop", None)
        controller.tick()
        controller.tick()
