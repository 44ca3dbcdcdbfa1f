"""/metrics over real HTTP: Prometheus' text format, parsed by Prometheus' own parser; open
without a token, with aggregates only; per-job series with a token, of the jobs its holder
may see."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.testing.auth import TokenFor

JOB_USAGE = {
    "gpuyard_job_cpu_cores",
    "gpuyard_job_memory_bytes",
    "gpuyard_job_gpu_utilization_percent",
    "gpuyard_job_gpu_memory_bytes",
}


def samples(
    api_url: str, token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    base = api_url.removesuffix("/api/v1")
    # No token by default: a scraper of the open endpoint has none.
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{base}/metrics", headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def test_jobs_queue_gpus_and_nodes(
    api_url: str, client: Client, admin: Client, controller: Controller
) -> None:
    before = samples(api_url)
    assert before[("gpuyard_jobs", (("state", "queued"),))] == 0
    assert before[("gpuyard_nodes", (("state", "ready"),))] == 4
    running = client.submit({"command": "python train.py", "resources": {"gpus": 8}})
    controller.tick()
    client.submit({"command": "python train.py", "nodes": 4, "resources": {"gpus": 8}})
    client.submit({"command": "python train.py", "priority": "high", "nodes": 4})
    controller.tick()
    admin.cordon("n3", "bad fan")
    after = samples(api_url)
    assert client.job(running.id).state.value in {"starting", "running"}
    assert after[("gpuyard_queue_depth", (("pool", "default"), ("priority", "normal")))] == 1
    assert after[("gpuyard_queue_depth", (("pool", "default"), ("priority", "high")))] == 1
    assert after[("gpuyard_gpus", (("pool", "default"),))] == 32
    assert after[("gpuyard_gpus_allocated", (("pool", "default"),))] == 8
    assert after[("gpuyard_allocation_ratio", (("pool", "default"),))] == 0.25
    assert after[("gpuyard_nodes", (("state", "cordoned"),))] == 1
    assert after[("gpuyard_job_restarts_total", ())] == 0
    assert not any("alice" in str(key) for key in after)  # aggregates only
    assert not any(name in JOB_USAGE for name, _ in after)  # nothing sampled yet


def test_the_controllers_pass_times_when_it_runs_in_the_same_process(store: object) -> None:
    from prometheus_client import generate_latest

    from gpuyard.services.metrics import registry

    state = {
        "passes": 12,
        "pass_seconds": 0.6,
        "schedules": 5,
        "schedule_seconds": 0.25,
        "last_schedule_seconds": 0.04,
        "progressing": True,
    }
    text = generate_latest(registry(store, lambda: state)).decode()  # type: ignore[arg-type]
    found = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert found["gpuyard_controller_passes_total"] == 12
    assert found["gpuyard_scheduling_pass_seconds_total"] == 0.25
    assert found["gpuyard_scheduling_last_pass_seconds"] == 0.04
    assert found["gpuyard_controller_progressing"] == 1


def test_the_grafana_dashboard_queries_only_series_the_pool_serves(
    store: object, controller: Controller
) -> None:
    import json
    import re
    from pathlib import Path

    from prometheus_client import generate_latest

    from gpuyard.services.metrics import registry
    from gpuyard.services.usage import Latest

    state = {"passes": 1, "pass_seconds": 0.1, "schedules": 1, "schedule_seconds": 0.1}
    state |= {"last_schedule_seconds": 0.1, "progressing": True}
    # As scraped with an admin's token (the dashboard's per-job panels need one).
    every_job = registry(store, lambda: state, Latest, jobs=lambda points: points)  # type: ignore[arg-type]
    text = generate_latest(every_job).decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    served = {name + ("_total" if kind == "counter" else "") for name, kind in families.items()}
    path = Path(__file__).resolve().parents[4] / "docs" / "grafana-dashboard.json"
    dashboard = json.loads(path.read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bgpuyard_[a-z_]+", target["expr"])
    }
    assert used and used <= served, used - served


def test_usage_per_running_job_by_id_and_per_node(
    api_url: str,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    clock: ManualClock,
    token_for: TokenFor,
) -> None:
    """The latest sample of each running job (labelled by its id alone, for a token that may
    see it) and of each node; a figure never measured (GPUs without a driver) has no series
    rather than a 0; once the sampler stops, the figures go with it."""
    job = client.submit({"command": "python train.py", "resources": {"gpus": 8}}).id
    controller.tick()
    controller.tick()
    for seconds in (0.0, 25.0):  # 2.5 cores over 10 s
        fake_executor.use(job, cpu_seconds=seconds, memory=3 << 30)
        controller.sampler.sample_once()
        clock.advance(10)
    found = samples(api_url, token_for("alice"))
    label = (("job", str(job)),)
    assert found[("gpuyard_job_cpu_cores", label)] == 2.5
    assert found[("gpuyard_job_memory_bytes", label)] == 3 << 30
    assert ("gpuyard_job_gpu_utilization_percent", label) not in found
    placed = client.job(job).placement[0].node
    assert found[("gpuyard_node_cpu_cores", (("node", placed),))] == 2.5
    assert found[("gpuyard_node_memory_bytes", (("node", "n3"),))] == 0  # no workers on it
    assert not any("alice" in str(key) or "train" in str(key) for key in found)
    clock.advance(30)  # three intervals without a sample: nothing is known of now
    assert not any(name in JOB_USAGE for name, _ in samples(api_url, token_for("alice")))


def test_per_job_series_only_behind_a_token_and_only_of_jobs_one_may_see(
    api_url: str,
    client: Client,
    controller: Controller,
    fake_executor: FakeExecutor,
    token_for: TokenFor,
) -> None:
    """An anonymous scrape gets the pool as a whole, never one job's CPU and memory by id;
    a user's token adds the jobs that user may see; an admin's, every job; a bad token is
    refused, not taken for none (issue 24, point 10)."""
    mine = client.submit({"command": "python train.py", "resources": {"gpus": 8}}).id
    controller.tick()
    controller.tick()
    fake_executor.use(mine, cpu_seconds=1.0, memory=1 << 30)
    controller.sampler.sample_once()
    label = ("gpuyard_job_memory_bytes", (("job", str(mine)),))
    anonymous = samples(api_url)
    assert not any(name in JOB_USAGE for name, _ in anonymous)
    assert ("gpuyard_node_memory_bytes", (("node", "n3"),)) in anonymous  # aggregates stay
    assert label in samples(api_url, token_for("alice"))
    assert not any(name in JOB_USAGE for name, _ in samples(api_url, token_for("bob")))
    assert label in samples(api_url, token_for("ada"))  # an admin (GPUYARD_ADMINS)
    base = api_url.removesuffix("/api/v1")
    bad = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer not-a-token"})
    assert bad.status_code == 401
