"""The incremental snapshot loader sees what a fresh load sees, after every kind of change,
while reading again only the queued jobs that changed."""

from __future__ import annotations

from sqlalchemy import event, update

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, Priority
from gpuyard.models.accounts import LabelsUpdate
from gpuyard.models.worker import NodeInfo
from gpuyard.services.accounts import AccountService
from gpuyard.services.jobs import JobService
from gpuyard.services.nodes import cordon_node, uncordon_node
from gpuyard.store.engine import Store
from gpuyard.store.snapshot import SnapshotLoader, load_snapshot
from gpuyard.store.tables import JobRow, NodeImageRow

NODES = [NodeInfo(f"n{i}", f"10.0.0.{i}", gpus=4, cpus=8, memory=1 << 34) for i in range(3)]


def test_the_loader_agrees_with_a_fresh_load_after_each_change(
    store: Store, clock: ManualClock
) -> None:
    executor = FakeExecutor(NODES)
    controller = Controller(store, executor, clock=clock)
    controller.register_nodes()
    accounts = AccountService(store, clock=clock)
    accounts.ensure_admins(["root"])
    jobs = JobService(store, clock=clock, accounts=accounts)
    loader = SnapshotLoader(lambda: store.generation("nodes", "pools"))
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    def agrees() -> None:
        with store.read() as session:
            statements.clear()
            event.listen(store.engine, "before_cursor_execute", count)
            try:
                incremental = loader.load(session, clock.now(), monotonic=clock.monotonic())
            finally:
                event.remove(store.engine, "before_cursor_execute", count)
            fresh = load_snapshot(session, clock.now())
        assert incremental == fresh

    spec = JobSpec.model_validate({"command": "train", "resources": {"gpus": 4}})
    ids = [j.id for j in jobs.submit_many([spec] * 20, owner="alice")]
    agrees()
    agrees()  # nothing changed: no queued row is read again
    assert not any("jobs.alternatives" in s for s in statements)
    jobs.change_priority(ids[3], Priority.HIGH, actor="root")
    agrees()
    jobs.stop_many(ids[:5], actor="alice")
    ids += [j.id for j in jobs.submit_many([spec] * 3, owner="bob")]
    agrees()
    named = jobs.submit(
        JobSpec.model_validate({"command": "x", "node_names": ["n1"], "resources": {"gpus": 4}}),
        owner="carol",
    )
    agrees()
    accounts.set_labels("n1", LabelsUpdate(set={"pool": "big"}), actor="root")
    agrees()  # the job that names n1 now runs in pool big
    with store.write() as session:  # an attained service as a suspension leaves it
        session.execute(
            update(JobRow)
            .where(JobRow.id == named.id)
            .values(attained=50.0, version=JobRow.version + 1)
        )
    agrees()


def test_the_snapshot_has_each_nodes_images_and_each_jobs_image(
    store: Store, clock: ManualClock
) -> None:
    Controller(store, FakeExecutor(NODES), clock=clock).register_nodes()
    jobs = JobService(store, clock=clock)
    digest = "sha256:" + "c" * 64
    spec = JobSpec.model_validate({"command": "train", "resources": {"gpus": 4}})
    plain, in_image = (j.id for j in jobs.submit_many([spec] * 2, owner="alice"))
    with store.write() as session:  # what submission stores for a job in a pinned image
        session.execute(
            update(JobRow)
            .where(JobRow.id == in_image)
            .values(image_digest=digest, version=JobRow.version + 1)
        )
    loader = SnapshotLoader(lambda: store.generation("nodes", "pools", "node_images"))
    with store.read() as session:
        loaded = loader.load(session, clock.now(), monotonic=clock.monotonic())
    assert {j.id: j.image for j in loaded.pending} == {plain: "", in_image: digest}
    assert all(not n.images for n in loaded.nodes)
    with store.write() as session:  # a pull completed on n1
        session.add(NodeImageRow(node="n1", digest=digest, at=clock.now()))
    with store.read() as session:  # seen at once: the table is one of the generation's
        loaded = loader.load(session, clock.now(), monotonic=clock.monotonic())
    assert {n.name: n.images for n in loaded.nodes} == {
        "n0": frozenset(),
        "n1": frozenset({digest}),
        "n2": frozenset(),
    }


def test_a_node_cordoned_with_a_requeue_is_never_scheduled_from_the_node_cache(
    store: Store, clock: ManualClock
) -> None:
    """The recovery path cordons a node and requeues its job in one transaction; another
    thread's pass can read the requeued job before that commit has moved the store's
    generation (here: never), and must still see the node cordoned."""
    controller = Controller(store, FakeExecutor(NODES), clock=clock)
    controller.register_nodes()
    loader = SnapshotLoader(lambda: (0,))  # the generation has not moved yet
    with store.read() as session:
        assert all(n.schedulable for n in loader.load(session, clock.now()).nodes)
    with store.write() as session:
        cordon_node(session, "n1", reason="failed its node check", by="check", now=clock.now())
    with store.read() as session:
        nodes = {n.name: n.schedulable for n in loader.load(session, clock.now()).nodes}
        assert nodes == {"n0": True, "n1": False, "n2": True}
        assert loader.load(session, clock.now()) == load_snapshot(session, clock.now())
    with store.write() as session:
        uncordon_node(session, "n1")
    with store.read() as session:
        assert all(n.schedulable for n in loader.load(session, clock.now()).nodes)
