"""The periodic node inspection end to end, on both databases: the local executor's probes over a
fake NVML (its designed seam), the controller's inspector, the store, the scheduler, the API and
``gpuyard nodes`` (docs/node-health.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.client import Client
from gpuyard.clock import ManualClock, SystemClock
from gpuyard.controller.inspection import Inspector
from gpuyard.controller.loop import Controller
from gpuyard.errors import NotFound
from gpuyard.executors.fake import FakeExecutor
from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.machine import GpuDevice, Machine
from gpuyard.executors.probes.host import DiskThresholds
from gpuyard.models import JobSpec, JobState, NodeState
from gpuyard.models.health import Finding, Probe, ProbeStatus
from gpuyard.models.worker import NodeInfo
from gpuyard.server.app import create_app
from gpuyard.services.jobs import JobService
from gpuyard.services.nodes import NodeService, cordon_node, uncordon_node
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow
from gpuyard.testing.auth import OPS, ensure_ops, user_token
from gpuyard.testing.nvml import FakeGpu, FakeNvml
from gpuyard.testing.server import serve

MACHINE = Machine(
    hostname="gpubox",
    cpus=8,
    memory=32 << 30,
    gpus=(GpuDevice(0, "NVIDIA H100", "GPU-0"), GpuDevice(1, "NVIDIA H100", "GPU-1")),
    driver_version="550.54",
)
"""Two GPUs: virtual nodes node0 (GPU 0) and node1 (GPU 1)."""
ROOMY = DiskThresholds(warning=0.0, critical=0.0)
"""The real disk probe, told that any free space is plenty: the findings do not hang on how full
the disk of the machine that runs the tests is (a CI runner's can be over 90%)."""
XID_79 = "gpu.xid (GPU 1) = 79: Xid 79 (GPU has fallen off the bus): node-critical"


class Pool:
    """A store, the local executor on a fake NVML, a controller and the job service."""

    def __init__(self, store: Store, clock: ManualClock, home: Path) -> None:
        self.store, self.clock = store, clock
        self.nvml = FakeNvml([FakeGpu(), FakeGpu()])
        self.executor = LocalExecutor(
            home,
            virtual_nodes=2,
            machine=MACHINE,
            isolation=cgroups.Isolation(cgroups.NONE),
            nvml=self.nvml,
            disk_thresholds=ROOMY,
        )
        self.controller = Controller(store, self.executor, clock=clock)
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        self.nodes = NodeService(store)
        ensure_ops(store)

    def inspect(self) -> dict[str, list[Finding]]:
        self.clock.advance(60)
        return self.controller.inspector.run_once()

    def submit(self, gpus: int = 1) -> int:
        spec = JobSpec.model_validate({"command": "python train.py", "resources": {"gpus": gpus}})
        return self.jobs.submit(spec, owner="alice").id

    def placed_on(self, job_id: int) -> list[str]:
        with self.store.read() as session:
            placement = session.scalar(select(JobRow.placement).where(JobRow.id == job_id))
        return [slot["node"] for slot in placement or []]

    def health(self, node: str) -> dict[tuple[Probe, str | None], ProbeStatus]:
        return {(f.probe, f.gpu): f.status for f in self.nodes.get_node(node, actor=None).health}


@pytest.fixture
def pool(store: Store, clock: ManualClock, tmp_path: Path) -> Iterator[Pool]:
    pool = Pool(store, clock, tmp_path / "home")
    yield pool
    pool.executor.close()


def test_a_critical_finding_cordons_the_node_and_the_scheduler_goes_elsewhere(pool: Pool) -> None:
    assert pool.inspect() == {}
    for name in ("node0", "node1"):
        view = pool.nodes.get_node(name, actor=None)
        assert view.state is NodeState.READY and view.inspected_at is not None
        assert [f.probe for f in view.health] == [
            Probe.HEARTBEAT,
            Probe.DISK,
            Probe.NIC,
            Probe.GPU_TEMPERATURE,
            Probe.GPU_ECC,
            Probe.GPU_RETIRED_PAGES,
            Probe.GPU_XID,
        ]
    pool.nvml.xid(1, 79)  # GPU 1, node1's, falls off the bus
    cordoned = pool.inspect()
    assert [(f.probe, f.value) for f in cordoned["node1"]] == [(Probe.GPU_XID, 79)]
    node1 = pool.nodes.get_node("node1", actor=None)
    assert (node1.state, node1.cordoned_by) == (NodeState.CORDONED, "inspection")
    assert node1.cordon_reason is not None and node1.cordon_reason.startswith(f"critical {XID_79}")
    assert pool.nodes.get_node("node0", actor=None).state is NodeState.READY
    # Two one-GPU jobs: one on node0, the other waits rather than go to node1.
    first, second = pool.submit(), pool.submit()
    pool.controller.applier.run()  # the scheduling part of a pass (no worker is launched)
    assert pool.placed_on(first) == ["node0"]
    assert pool.jobs.get(second, actor=OPS).state is JobState.QUEUED
    # Still cordoned after the next inspection finds the GPU quiet: an admin decides.
    assert pool.inspect() == {}
    assert pool.nodes.get_node("node1", actor=None).state is NodeState.CORDONED
    assert pool.health("node1")[(Probe.GPU_XID, "1")] is ProbeStatus.OK


def test_only_a_new_critical_finding_cordons_again_after_an_uncordon(pool: Pool) -> None:
    pool.inspect()
    pool.nvml.gpus[0].retirement_pending = True
    assert list(pool.inspect()) == ["node0"]
    reason = pool.nodes.get_node("node0", actor=None).cordon_reason
    assert reason == (
        "critical gpu.retired_pages (GPU 0) = pending: 0 page(s) retired; a retirement is "
        "pending: reset the GPU"
    )
    with pool.store.write() as session:
        uncordon_node(session, "node0")  # an admin looked and lets it run until a reset
    assert pool.inspect() == {}  # the same finding: not cordoned again
    view = pool.nodes.get_node("node0", actor=None)
    assert view.state is NodeState.READY
    assert pool.health("node0")[(Probe.GPU_RETIRED_PAGES, "0")] is ProbeStatus.CRITICAL
    pool.nvml.gpus[0].retirement_pending = False  # reset
    assert pool.inspect() == {}
    pool.nvml.gpus[0].retirement_pending = True  # and again: new
    assert list(pool.inspect()) == ["node0"]
    with pool.store.write() as session:
        uncordon_node(session, "node0")
    pool.nvml.xid(0, 48)  # an event is always new
    assert [f.value for f in pool.inspect()["node0"]] == [48]


def test_a_node_cordoned_already_keeps_its_reason(pool: Pool) -> None:
    pool.inspect()
    with pool.store.write() as session:
        cordon_node(session, "node1", reason="maintenance", by="user:ada", now=1.0)
    pool.nvml.xid(1, 79)
    assert pool.inspect() == {}
    view = pool.nodes.get_node("node1", actor=None)
    assert (view.cordon_reason, view.cordoned_by) == ("maintenance", "user:ada")
    assert pool.health("node1")[(Probe.GPU_XID, "1")] is ProbeStatus.CRITICAL


def test_an_application_xid_is_a_warning_attributed_to_the_jobs_on_that_gpu(pool: Pool) -> None:
    pool.inspect()
    job = pool.submit()
    pool.controller.applier.run()
    [node] = pool.placed_on(job)
    gpu = {"node0": 0, "node1": 1}[node]
    pool.nvml.xid(gpu, 13)
    pool.nvml.xid(1 - gpu, 31)  # the other GPU has no job
    assert pool.inspect() == {}
    [xid] = [f for f in pool.nodes.get_node(node, actor=None).health if f.probe is Probe.GPU_XID]
    assert (xid.status, xid.value, xid.jobs) == (ProbeStatus.WARNING, 13, [job])
    other = "node1" if node == "node0" else "node0"
    assert [
        f.jobs for f in pool.nodes.get_node(other, actor=None).health if f.probe is Probe.GPU_XID
    ] == [[]]
    events = [e for e in pool.jobs.events(job, actor=OPS) if e.kind == "gpu_xid"]
    assert [(e.actor, e.node, e.reason) for e in events] == [
        (
            "inspection",
            node,
            f"GPU {gpu} of {node}: Xid 13 (graphics engine exception): an application error, "
            "the GPU is healthy",
        )
    ]
    assert {
        n.state
        for n in (
            pool.nodes.get_node("node0", actor=None),
            pool.nodes.get_node("node1", actor=None),
        )
    } == {NodeState.READY}


TWO_NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 35),
    NodeInfo("n1", "10.0.0.2", gpus=4, cpus=8, memory=1 << 35),
]


def test_an_executor_that_does_not_answer_misses_its_heartbeat(
    store: Store, clock: ManualClock
) -> None:
    executor = FakeExecutor(TWO_NODES)
    controller = Controller(store, executor, clock=clock)
    controller.register_nodes()
    disk = Finding(probe=Probe.DISK, status=ProbeStatus.OK, value=0.5)
    xid = Finding(probe=Probe.GPU_XID, status=ProbeStatus.WARNING, gpu="0", value=13, event=True)
    executor.findings = {"n0": [disk, xid], "n1": [disk]}
    inspector = Inspector(store, executor, clock, deadline=0.2)
    assert inspector.run_once() == {}
    executor.inspect_delay = 1.0  # the agent hangs
    cordoned = inspector.run_once()
    assert set(cordoned) == {"n0", "n1"}
    nodes = NodeService(store)
    n0 = nodes.get_node("n0", actor=None)
    assert n0.cordon_reason == (
        "critical heartbeat = no answer: the executor did not answer the inspection within 0.2 s"
    )
    # The rest is as last known, but for the event, which was reported once.
    assert [(f.probe, f.status) for f in n0.health] == [
        (Probe.HEARTBEAT, ProbeStatus.CRITICAL),
        (Probe.DISK, ProbeStatus.OK),
    ]
    with store.write() as session:
        uncordon_node(session, "n1")
    assert inspector.run_once() == {}  # still hung: the same finding, no second call
    executor.inspect_delay = 0.0
    time.sleep(1.0)  # the hung call ends
    assert inspector.run_once() == {}
    assert [f.status for f in nodes.get_node("n0", actor=None).health] == [
        ProbeStatus.OK,
        ProbeStatus.WARNING,
    ]
    assert (
        nodes.get_node("n0", actor=None).state is NodeState.CORDONED
    )  # never uncordoned by itself


def test_the_inspection_runs_beside_the_loop_and_a_slow_one_does_not_stall_it(
    store: Store,
) -> None:
    executor = FakeExecutor(TWO_NODES)
    gate = threading.Event()  # the first inspection hangs until the test opens it
    answer = executor.inspect

    def slow_inspect() -> dict[str, list[Finding]]:
        gate.wait(60)
        return answer()

    executor.inspect = slow_inspect  # type: ignore[method-assign]
    controller = Controller(store, executor, clock=SystemClock(), interval=0.02, inspect_every=0.1)
    controller.start()
    try:
        deadline = time.monotonic() + 30
        while controller.health()["passes"] < 5:  # the loop goes on beside the hung inspection
            assert time.monotonic() < deadline, "the loop stalled behind the inspection"
            time.sleep(0.02)
        assert controller.health()["progressing"]
        assert NodeService(store).get_node("n0", actor=None).inspected_at is None
        gate.set()
        deadline = time.monotonic() + 30
        while NodeService(store).get_node("n0", actor=None).inspected_at is None:
            assert time.monotonic() < deadline, "no inspection was recorded"
            time.sleep(0.05)
        assert [f.probe for f in NodeService(store).get_node("n0", actor=None).health] == [
            Probe.HEARTBEAT
        ]
    finally:
        gate.set()
        controller.stop()


def test_gpuyard_nodes_shows_the_health_and_why_a_node_is_cordoned(
    pool: Pool, tmp_path: Path
) -> None:
    app = create_app(
        Settings(home=tmp_path / "server"),
        store=pool.store,
        executor=pool.executor,
        clock=pool.clock,
    )
    pool.inspect()
    pool.nvml.xid(1, 79)
    pool.inspect()
    with serve(app) as url:
        env = {"GPUYARD_URL": url, "GPUYARD_TOKEN": user_token(app, "ada", admin=True)}

        def cli(*args: str) -> str:
            result = CliRunner().invoke(cli_app, list(args), env={**env, "COLUMNS": "250"})
            assert result.exit_code == 0, (result.output, result.exception)
            return str(result.stdout)

        listing = cli("nodes")
        header, node0, node1 = listing.splitlines()[:3]
        assert header.split()[-1] == "HEALTH"
        assert node0.split()[:3] == ["node0", "127.0.0.2", "ready"]
        assert node0.rstrip().endswith("ok")
        assert node1.split()[:3] == ["node1", "127.0.0.3", "cordoned"]
        assert node1.rstrip().endswith("critical: gpu.xid (GPU 1)")
        assert f"node1 cordoned by inspection: critical {XID_79}" in listing
        assert f"node1 critical: {XID_79}, the GPU needs attention" in listing
        [as_json] = [n for n in json.loads(cli("nodes", "--json")) if n["name"] == "node1"]
        assert as_json["inspected_at"] is not None
        xid = {k: v for k, v in as_json["health"][-1].items() if k != "message"}
        assert xid == {
            "probe": "gpu.xid",
            "gpu": "1",
            "status": "critical",
            "value": 79,
            "event": True,
            "jobs": [],
        }
        shown = cli("nodes", "show", "node1")
        assert "cordoned by inspection" in shown
        assert "health: critical: gpu.xid (GPU 1)" in shown
        for probe in ("heartbeat", "disk", "nic", "gpu.temperature", "gpu.ecc", "gpu.xid"):
            assert probe in shown
        assert "lo holds 127.0.0.3 and is up" in shown
        cli("nodes", "uncordon", "node1")
        assert "critical: gpu.xid (GPU 1)" in cli("nodes")  # still what was found
        with Client(url, token=env["GPUYARD_TOKEN"]) as client:
            assert client.node("node1").state is NodeState.READY
            with pytest.raises(NotFound, match="node nope does not exist"):
                client.node("nope")


def test_a_nearly_full_job_area_cordons_the_node_until_space_returns(pool: Pool) -> None:
    pool.inspect()
    # The real disk probe, told that all free space is "nearly full": critical on every node.
    pool.executor.disk_thresholds = DiskThresholds(warning=1.0, critical=1.0)
    assert sorted(pool.inspect()) == ["node0", "node1"]
    for name in ("node0", "node1"):
        view = pool.nodes.get_node(name, actor=None)
        assert (view.state, view.cordoned_by) == (NodeState.CORDONED, "inspection (disk)")
        assert view.cordon_reason is not None and view.cordon_reason.startswith("critical disk")
        assert "nearly full" in view.cordon_reason
    with pool.store.write() as session:  # an admin's cordon is the admin's to lift
        cordon_node(session, "node1", reason="maintenance", by="user:ada", now=1.0)
    assert pool.inspect() == {}  # still full: both stay cordoned
    assert pool.nodes.get_node("node0", actor=None).state is NodeState.CORDONED
    pool.executor.disk_thresholds = ROOMY  # space is freed
    assert pool.inspect() == {}
    node0, node1 = (
        pool.nodes.get_node("node0", actor=None),
        pool.nodes.get_node("node1", actor=None),
    )
    assert (node0.state, node0.cordoned_by, node0.cordon_reason) == (NodeState.READY, None, None)
    assert (node1.state, node1.cordoned_by) == (NodeState.CORDONED, "user:ada")
