"""Who may submit what, and priority changes, over real HTTP on SQLite and PostgreSQL.

Tiers by role, the urgent limit per group, node names and pools that must exist, shapes that
must fit somewhere; a refusal says what to fix and stores nothing (not even a new user).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, InvalidSpec, PermissionDenied
from gpuyard.executors.fake import FakeExecutor
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, NodeRow
from gpuyard.testing.auth import AsUser, TokenFor, user_token
from gpuyard.testing.server import serve

Refuse = Callable[..., dict[str, Any]]


def test_tiers_by_role(client: Client, admin: Client, refuse: Refuse) -> None:
    body = refuse(
        "POST",
        "/jobs",
        user="alice",
        status=403,
        says=[
            "priority highest is not open to alice",
            "users may choose low, normal, high",
            "admins may also use highest (ask an admin)",
        ],
        json={"command": "x", "priority": "highest"},
    )
    assert body["code"] == "permission_denied"
    for tier in ("low", "normal", "high"):
        assert client.submit({"command": "x", "priority": tier}).spec.priority.value == tier
    assert admin.submit({"command": "x", "priority": "highest"}).spec.priority.value == "highest"
    # A copy is a new submission by whoever copies it (a read-only member of ada's group).
    top = admin.submit({"command": "x", "priority": "highest", "access": "read-only"})
    with pytest.raises(PermissionDenied, match="priority highest is not open to alice"):
        client.clone(top.id)
    assert client.clone(top.id, priority="normal").owner == "alice"


def test_the_tiers_users_may_use_are_a_setting(
    tmp_path: Path, store: Store, fake_executor: FakeExecutor, clock: ManualClock
) -> None:
    settings = Settings(home=tmp_path / "h", user="root", user_tiers=["normal", "high"])
    app = create_app(settings, store=store, executor=fake_executor, clock=clock)
    with serve(app) as url, Client(url, token=user_token(app, "alice")) as alice:
        with pytest.raises(PermissionDenied, match="users may choose normal, high; admins may"):
            alice.submit({"command": "x", "priority": "low"})
        assert alice.submit({"command": "x", "priority": "high"}).spec.priority.value == "high"
    bad = Settings(home=tmp_path / "h", user_tiers=["normal", "urgent"])
    with pytest.raises(InvalidSpec, match="GPUYARD_USER_TIERS: unknown priority tier 'urgent'"):
        create_app(bad, store=store, executor=fake_executor, clock=clock)


def test_urgent_limit_per_group(
    api_url: str,
    as_user: AsUser,
    client: Client,
    admin: Client,
    refuse: Refuse,
    controller: Controller,
    fake_executor: FakeExecutor,
) -> None:
    admin.create_group("ml", urgent_limit=2)
    admin.create_user("bob", group="ml")
    client.submit({"command": "x"})
    admin.update_user("alice", group="ml")
    bob = as_user("bob")
    first = client.submit({"command": "x", "priority": "high", "resources": {"gpus": 8}})
    bob.submit({"command": "x", "priority": "high"})
    controller.tick()  # the first runs; running jobs count as well as queued ones
    assert client.job(first.id).status.value == "running"
    body = refuse(
        "POST",
        "/jobs",
        user="alice",
        status=409,
        says=[
            "group ml has 2 running or queued high job(s) and its limit is 2",
            "gpuyard groups set ml --urgent-limit N",
        ],
        json={"command": "x", "priority": "high"},
    )
    assert (body["code"], body["count"], body["limit"]) == ("conflict", 2, 2)
    assert admin.group("ml").urgent_jobs == 2
    # Other tiers, and other groups, are not limited.
    client.submit({"command": "x", "priority": "normal"})
    admin.submit({"command": "x", "priority": "high"})
    admin.submit({"command": "x", "priority": "high"})
    # A job that ends frees its place.
    fake_executor.exit(first.id, code=0)
    controller.tick()
    assert client.submit({"command": "x", "priority": "high"}).group == "ml"
    refuse(
        "POST",
        "/jobs",
        user="bob",
        status=409,
        says="group ml has 2 running or queued high job(s)",
        json={"command": "x", "priority": "high"},
    )
    admin.set_urgent_limit("ml", None)
    bob.submit({"command": "x", "priority": "high"})
    bob.close()


def test_node_names_must_exist_and_share_a_pool(
    client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says=["node_names: there is no node n7, n9", "nodes: n0, n1, n2, n3"],
        json={"command": "x", "node_names": ["n0", "n7", "n9"]},
    )
    admin.label("n2", set={"pool": "a100"})
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="a job's nodes must all be in one pool, and these are not (n2 in pool a100; "
        "n0, n1 in pool default)",
        json={"command": "x", "node_names": ["n0", "n1", "n2"]},
    )
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="it needs 3 nodes but only 2 node(s) in nodes n0, n1 can hold its share",
        json={"command": "x", "nodes": 3, "node_names": ["n0", "n1"]},
    )
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="a job names a dedicated pool, node names or a driver version, not several",
        json={"command": "x", "pool": "a100", "node_names": ["n2"]},
    )
    job = client.submit({"command": "x", "nodes": 2, "node_names": ["n0", "n1"]})
    assert job.spec.node_names == ["n0", "n1"]
    assert client.submit({"command": "x", "node_names": ["n2"]}).spec.node_names == ["n2"]


def test_pools_must_exist_and_hold_the_job(
    client: Client, admin: Client, refuse: Refuse, controller: Controller, store: Store
) -> None:
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says=["pool: there is no pool a100 (pools: default; see `gpuyard pools`)"],
        json={"command": "x", "pool": "a100"},
    )
    admin.create_pool("a100")
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="pool a100 has no nodes yet; an admin adds some with `gpuyard label NODE pool=a100`",
        json={"command": "x", "pool": "a100"},
    )
    admin.label("n2", set={"pool": "a100"})
    admin.label("n3", set={"pool": "h800"})  # a pool made by a label alone
    assert client.submit({"command": "x", "pool": "a100"}).spec.pool == "a100"
    assert client.submit({"command": "x", "pool": "h800"}).spec.pool == "h800"
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="it needs 2 nodes but only 1 node(s) in pool 'a100' can hold its share",
        json={"command": "x", "pool": "a100", "nodes": 2},
    )
    # A pool that keeps gangs in one zone: n0 (z1) and n1 (z1) can, n0 and n2 could not.
    admin.label("n1", set={"pool": "h800", "zone": "z1"})
    admin.create_pool("h800", same_zone=True)
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="its 2 nodes must be in one network zone",
        json={"command": "x", "pool": "h800", "nodes": 2},
    )
    admin.label("n3", set={"zone": "z1"})
    assert client.submit({"command": "x", "pool": "h800", "nodes": 2}).spec.nodes == 2
    # Nodes of a pool that are all cordoned for now: the job is accepted and waits.
    with store.write() as session:
        session.execute(update(NodeRow).where(NodeRow.name == "n2").values(state="cordoned"))
    assert client.submit({"command": "x", "pool": "a100", "nodes": 1}).status.value == "queued"


def test_driver_versions_alternatives_and_elastic_sizes(
    client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says=[
            "no node of the default pool has driver 535 (drivers: none labelled)",
            "gpuyard label NODE driver=VERSION",
        ],
        json={"command": "x", "driver_version": "535"},
    )
    admin.label("n1", set={"driver": "535"})
    admin.label("n2", set={"driver": "550"})
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="(drivers: 535, 550)",
        json={"command": "x", "driver_version": "470"},
    )
    assert client.submit({"command": "x", "driver_version": "535"}).spec.driver_version == "535"

    # Alternative specs: the job is accepted when one of them could ever fit.
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says=["no node has 16 GPUs", "no node has 12 GPUs"],
        json={
            "command": "x",
            "resources": {"gpus": 16},
            "alternatives": [{"gpus": 12}],
        },
    )
    job = client.submit(
        {"command": "x", "resources": {"gpus": 16}, "alternatives": [{"gpus": 12}, {"gpus": 8}]}
    )
    assert [a.gpus for a in job.spec.alternatives] == [12, 8]

    # Elastic: the smallest size must fit; the largest may exceed the pool.
    elastic = client.submit({"command": "x", "nodes": 8, "min_nodes": 2})
    assert (elastic.spec.min_nodes, elastic.spec.nodes, elastic.spec.elastic) == (2, 8, True)
    refuse(
        "POST",
        "/jobs",
        user="alice",
        status=422,
        says="it needs 5 nodes but only 4 node(s)",
        json={"command": "x", "nodes": 8, "min_nodes": 5},
    )


def test_priority_change(
    api_url: str,
    client: Client,
    admin: Client,
    refuse: Refuse,
    controller: Controller,
    store: Store,
) -> None:
    job = client.submit({"command": "x", "priority": "normal", "resources": {"gpus": 8}})
    with store.read() as session:
        version = session.get(JobRow, job.id).version  # type: ignore[union-attr]

    changed = client.change_priority(job.id, "high")
    assert (changed.spec.priority.value, changed.status.value, changed.state.value) == (
        "high",
        "queued",
        "queued",
    )
    with store.read() as session:
        row = session.get(JobRow, job.id)
        assert row is not None
        assert (row.priority, row.spec["priority"], row.version, row.state) == (
            "high",
            "high",
            version + 1,
            "queued",
        )
    events = client.events(job.id)
    assert [(e.kind, e.actor, e.reason, e.to_state) for e in events[1:]] == [
        ("priority", "user:alice", "priority normal -> high", None)
    ]
    # The same tier again changes nothing.
    assert client.change_priority(job.id, "high").spec.priority.value == "high"
    assert len(client.events(job.id)) == 2

    path = f"/jobs/{job.id}"
    refuse(
        "PATCH",
        path,
        user="bob",
        status=404,  # not bob's, and its access for others is none: as if it did not exist
        says=f"job {job.id} does not exist",
        json={"priority": "low"},
    )
    refuse(
        "PATCH",
        path,
        user="alice",
        status=403,
        says=["priority highest is not open to alice", "users may choose low, normal, high"],
        json={"priority": "highest"},
    )
    refuse(
        "PATCH",
        path,
        user="alice",
        status=422,
        says="priority: Input should be 'low', 'normal', 'high' or 'highest'",
        json={"priority": "urgent"},
    )
    refuse(
        "PATCH",
        path,
        user="alice",
        status=422,
        says="name: Extra inputs are not permitted",
        json={"priority": "low", "name": "x"},
    )
    refuse("PATCH", "/jobs/999", user="alice", status=404, says="job 999 does not exist",
           json={"priority": "low"})  # fmt: skip
    assert admin.change_priority(job.id, "highest").spec.priority.value == "highest"

    # Only while it waits.
    controller.tick()
    assert client.job(job.id).status.value == "running"
    refuse(
        "PATCH",
        path,
        user="ada",
        status=409,
        says=f"job {job.id} is running; only a queued or suspended job's priority can change",
        json={"priority": "low"},
    )
    # A suspended job waits in the queue: its priority can change.
    with store.write() as session:
        session.execute(update(JobRow).where(JobRow.id == job.id).values(state="suspended"))
    assert client.change_priority(job.id, "low").spec.priority.value == "low"


def test_priority_change_obeys_the_urgent_limit(
    client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    client.submit({"command": "x"})
    admin.set_urgent_limit("default", 1)
    client.submit({"command": "x", "priority": "high"})
    waiting = client.submit({"command": "x", "priority": "normal"})
    refuse(
        "PATCH",
        f"/jobs/{waiting.id}",
        user="alice",
        status=409,
        says="group default has 1 running or queued high job(s) and its limit is 1",
        json={"priority": "high"},
    )
    with pytest.raises(Conflict, match="its limit is 1"):
        admin.change_priority(waiting.id, "high")  # admins too: the limit is the group's
    assert client.change_priority(waiting.id, "low").spec.priority.value == "low"


def test_stale_decisions_are_dropped_after_a_priority_change(client: Client, store: Store) -> None:
    """The controller's start is guarded by the version it read; a change bumps it."""
    from gpuyard.errors import StaleWrite
    from gpuyard.models import JobState
    from gpuyard.services.transitions import transition

    job = client.submit({"command": "x"})
    with store.read() as session:
        stale = session.get(JobRow, job.id)
    assert stale is not None
    client.change_priority(job.id, "high")
    with pytest.raises(StaleWrite), store.write() as session:
        transition(session, stale, JobState.STARTING, actor="scheduler", why="placed", time=1.0)
    with store.read() as session:
        assert session.scalars(select(JobRow.state)).all() == ["queued"]


def test_concurrent_urgent_submissions_never_pass_the_limit(
    api_url: str, admin: Client, controller: Controller, token_for: TokenFor
) -> None:
    """The group's row is locked while its urgent jobs are counted: twelve submissions at once
    into three places give exactly three jobs."""
    from concurrent.futures import ThreadPoolExecutor

    admin.create_group("ml", urgent_limit=3)
    for name in ("u0", "u1", "u2", "u3"):
        admin.create_user(name, group="ml")

    tokens = [token_for(f"u{i}") for i in range(4)]

    def submit(i: int) -> str:
        with Client(api_url, token=tokens[i % 4]) as c:
            try:
                c.submit({"command": "x", "priority": "high"})
            except Conflict as exc:
                return exc.detail
            return "ok"

    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(submit, range(12)))
    assert outcomes.count("ok") == 3
    assert all("its limit is 3" in o for o in outcomes if o != "ok")
    assert admin.group("ml").urgent_jobs == 3
