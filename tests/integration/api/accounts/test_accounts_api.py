"""Users, groups, quotas, pools and node labels over real HTTP, on SQLite and PostgreSQL.

Reads are open; every write is for admins; every refusal says what to fix and stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import InvalidSpec, NotFound, PermissionDenied
from gpuyard.scheduler import TIME_SHARING_AGE_HALFLIFE, TIME_SHARING_MIN_RUN
from gpuyard.services.accounts import AccountService
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, UserRow

Refuse = Callable[..., dict[str, Any]]


def test_bootstrap_admins_and_plain_users(client: Client, admin: Client, store: Store) -> None:
    users = {u.name: u for u in admin.users()}
    assert {n: (u.role.value, u.group) for n, u in users.items()} == {
        "ada": ("admin", "default"),
        "alice": ("user", "default"),  # the `client` fixture's user, made by the test
        "root": ("admin", "default"),
    }
    assert [t.value for t in users["ada"].tiers] == ["low", "normal", "high", "highest"]
    assert [(g.name, g.members) for g in admin.groups()] == [("default", ["ada", "alice", "root"])]

    job = client.submit({"command": "python train.py"})
    alice = client.user_info()
    assert (alice.name, alice.role.value, alice.group) == ("alice", "user", "default")
    assert [t.value for t in alice.tiers] == ["low", "normal", "high"]
    assert job.group == "default"
    second = client.submit({"command": "python train.py"})
    with store.read() as session:
        rows = session.scalars(select(JobRow).order_by(JobRow.id)).all()
        assert [(r.id, r.seq, r.group_name) for r in rows] == [
            (job.id, job.id, "default"),
            (second.id, second.id, "default"),
        ]
        assert session.scalar(select(UserRow.role).where(UserRow.name == "alice")) == "user"


def test_ensure_admins_promotes_and_is_idempotent(store: Store, clock: ManualClock) -> None:
    accounts = AccountService(store, clock=clock)
    with store.write() as session:
        accounts.register(session, "bob")
    accounts.ensure_admins(["bob", " ", "carol", "bob"])
    accounts.ensure_admins(["bob", "carol"])
    assert [(u.name, u.role.value, u.group) for u in accounts.list_users(actor="bob")] == [
        ("bob", "admin", "default"),
        ("carol", "admin", "default"),
    ]
    with pytest.raises(InvalidSpec, match="longer than 64"):
        accounts.ensure_admins(["x" * 65])


def test_users_are_managed_by_admins_only(
    api_url: str, client: Client, admin: Client, refuse: Refuse
) -> None:
    refuse(
        "POST",
        "/users",
        user="alice",
        status=403,
        says=["only admins may create users", "you (alice) are not an admin"],
        json={"name": "bob"},
    )
    refuse(
        "POST",
        "/users",
        user="ada",
        status=422,
        says=["group ml does not exist", "gpuyard groups add ml"],
        json={"name": "bob", "group": "ml"},
    )
    admin.create_group("ml")
    bob = admin.create_user("bob", group="ml", share=2)
    assert (bob.name, bob.group, bob.role.value, bob.share) == ("bob", "ml", "user", 2.0)
    refuse(
        "POST",
        "/users",
        user="ada",
        status=409,
        says="user bob exists already",
        json={"name": "bob"},
    )
    for body, says in [
        ({"name": "bo b"}, "a user name is 1-64 letters"),
        ({"name": "carl", "share": 0}, "share: Input should be greater than 0"),
        ({"name": "carl", "role": "boss"}, "role: Input should be 'user' or 'admin'"),
        ({"name": "carl", "colour": "red"}, "colour: Extra inputs are not permitted"),
    ]:
        refuse("POST", "/users", user="ada", status=422, says=says, json=body)

    refuse(
        "PATCH",
        "/users/bob",
        user="bob",
        status=403,
        says="only admins may change users",
        json={"role": "admin"},
    )
    refuse("PATCH", "/users/bob", user="ada", status=422, says="nothing to change", json={})
    refuse(
        "PATCH",
        "/users/bob",
        user="ada",
        status=422,
        says="group nope does not exist",
        json={"group": "nope"},
    )
    refuse(
        "PATCH",
        "/users/zed",
        user="ada",
        status=404,
        says="user zed does not exist",
        json={"share": 3},
    )
    changed = admin.update_user("bob", group="default", role="admin", share=0.5)
    assert (changed.group, changed.role.value, changed.share) == ("default", "admin", 0.5)
    assert [t.value for t in changed.tiers] == ["low", "normal", "high", "highest"]
    # Admins read anyone; a user reads itself only, and the refusal names no one.
    assert admin.user_info("bob") == changed
    assert client.user_info().name == "alice"
    with pytest.raises(PermissionDenied, match="only admins may read other users") as refused:
        client.user_info("bob")
    assert "ada" not in str(refused.value)
    with pytest.raises(PermissionDenied, match="only admins may list users"):
        client.users()
    assert [u.name for u in admin.users()] == ["ada", "alice", "bob", "root"]
    with pytest.raises(NotFound, match="gpuyard users add"):
        admin.user_info("zed")

    # There is always an admin left.
    admin.update_user("bob", role="user")
    admin.update_user("root", role="user")
    refuse(
        "PATCH",
        "/users/ada",
        user="ada",
        status=409,
        says="ada is the last admin",
        json={"role": "user"},
    )


def test_groups_urgent_limit_and_removal(
    client: Client, admin: Client, refuse: Refuse, store: Store
) -> None:
    refuse(
        "POST",
        "/groups",
        user="alice",
        status=403,
        says="only admins may create groups",
        json={"name": "ml"},
    )
    ml = admin.create_group("ml", urgent_limit=2)
    assert (ml.name, ml.urgent_limit, ml.urgent_jobs, ml.members) == ("ml", 2, 0, [])
    refuse("POST", "/groups", user="ada", status=409, says="exists already", json={"name": "ml"})
    refuse(
        "POST",
        "/groups",
        user="ada",
        status=422,
        says="urgent_limit: Input should be greater than or equal to 0",
        json={"name": "cv", "urgent_limit": -1},
    )
    refuse(
        "PATCH",
        "/groups/ml",
        user="alice",
        status=403,
        says="only admins may change groups",
        json={"urgent_limit": 1},
    )
    refuse(
        "PATCH",
        "/groups/cv",
        user="ada",
        status=404,
        says="group cv does not exist",
        json={"urgent_limit": 1},
    )
    refuse("PATCH", "/groups/ml", user="ada", status=422, says="urgent_limit", json={})
    assert admin.set_urgent_limit("ml", 5).urgent_limit == 5
    assert admin.set_urgent_limit("ml", None).urgent_limit is None

    client.submit({"command": "x"})  # registers alice in default
    admin.update_user("alice", group="ml")
    admin.set_quota("group", "ml", "normal", nodes=4)
    assert [(g.name, g.members) for g in client.groups()] == [
        ("default", ["ada", "root"]),
        ("ml", ["alice"]),
    ]
    refuse(
        "DELETE",
        "/groups/ml",
        user="ada",
        status=409,
        says=["group ml still has 1 member(s) (alice)", "gpuyard users set NAME --group"],
    )
    refuse(
        "DELETE",
        "/groups/default",
        user="ada",
        status=409,
        says="the default group cannot be deleted",
    )
    refuse("DELETE", "/groups/ml", user="alice", status=403, says="only admins may delete")
    admin.update_user("alice", group="default")
    admin.delete_group("ml")
    assert [g.name for g in admin.groups()] == ["default"]
    assert admin.quotas() == []  # the group's quotas went with it
    refuse("DELETE", "/groups/ml", user="ada", status=404, says="group ml does not exist")


def test_quotas_set_replace_list_and_clear(
    api_url: str, client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    client.submit({"command": "x", "resources": {"gpus": 2}})  # registers alice
    admin.create_group("ml")
    refuse(
        "POST",
        "/quotas",
        user="alice",
        status=403,
        says="only admins may set quotas",
        json={"kind": "user", "subject": "alice", "tier": "normal", "nodes": 10},
    )
    for body, says in [
        (
            {"kind": "user", "subject": "zed", "tier": "normal", "nodes": 1},
            "user zed does not exist",
        ),
        (
            {"kind": "group", "subject": "cv", "tier": "normal", "nodes": 1},
            "group cv does not exist",
        ),
        (
            {"kind": "user", "subject": "alice", "tier": "normal"},
            "a quota limits nodes and/or gpus; give at least one",
        ),
        (
            {"kind": "user", "subject": "alice", "tier": "urgent", "nodes": 1},
            "tier: Input should be 'low', 'normal', 'high' or 'highest'",
        ),
        (
            {"kind": "team", "subject": "alice", "tier": "normal", "nodes": 1},
            "kind: Input should be 'user' or 'group'",
        ),
        (
            {"kind": "user", "subject": "alice", "tier": "normal", "gpus": -1},
            "gpus: Input should be greater than or equal to 0",
        ),
    ]:
        refuse("POST", "/quotas", user="ada", status=422, says=says, json=body)

    first = admin.set_quota("user", "alice", "normal", nodes=10)
    assert (first.nodes, first.gpus) == (10, None)
    replaced = admin.set_quota("user", "alice", "normal", gpus=16)
    assert (replaced.nodes, replaced.gpus) == (None, 16)
    admin.set_quota("user", "alice", "high", nodes=1)
    admin.set_quota("group", "default", "normal", nodes=3, gpus=24)

    controller.tick()  # alice's job starts: 1 node, 2 GPUs at normal, in group default
    listed = [(q.kind.value, q.subject, q.tier.value, q.nodes, q.gpus) for q in client.quotas()]
    assert listed == [
        ("group", "default", "normal", 3, 24),
        ("user", "alice", "normal", None, 16),
        ("user", "alice", "high", 1, None),
    ]
    usage = {(q.kind.value, q.tier.value): (q.used_nodes, q.used_gpus) for q in client.quotas()}
    assert usage == {
        ("group", "normal"): (1, 2),
        ("user", "normal"): (1, 2),
        ("user", "high"): (0, 0),
    }
    assert [q.tier.value for q in client.quotas(kind="user", subject="alice")] == [
        "normal",
        "high",
    ]
    assert [q.subject for q in client.quotas(kind="group")] == ["default"]

    refuse(
        "DELETE",
        "/quotas/user/alice/high",
        user="alice",
        status=403,
        says="only admins may clear quotas",
    )
    admin.clear_quota("user", "alice", "high")
    refuse(
        "DELETE",
        "/quotas/user/alice/high",
        user="ada",
        status=404,
        says="user alice has no quota at high",
    )
    assert len(client.quotas()) == 2


def test_pools_policies_and_labels(
    client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    [default] = client.pools()
    assert (default.name, default.declared, default.nodes, default.preemption.value) == (
        "default",
        False,
        ["n0", "n1", "n2", "n3"],
        "never",
    )
    refuse(
        "POST", "/pools", user="alice", status=403, says="only admins may create pools",
        json={"name": "a100"},
    )  # fmt: skip
    for body, says in [
        ({"name": "a100", "preemption": "sometimes"}, "Input should be 'never' or 'suspend'"),
        ({"name": "a100", "notice": "soon"}, "cannot read 'soon' as a duration"),
        ({"name": "a100", "notice": 0}, "notice: Input should be greater than 0"),
        ({"name": ".."}, "a pool name is 1-64 letters"),
        ({"name": "a100", "slices": ["10h", "1h"]}, "each larger than the one before"),
        ({"name": "a100", "slices": ["0s"]}, "above zero"),
    ]:
        refuse("POST", "/pools", user="ada", status=422, says=says, json=body)
    a100 = admin.create_pool(
        "a100", preemption="suspend", same_zone=True, notice="2m", description="big jobs"
    )
    assert (a100.preemption.value, a100.same_zone, a100.notice, a100.declared, a100.nodes) == (
        "suspend",
        True,
        120.0,
        True,
        [],
    )
    refuse("POST", "/pools", user="ada", status=409, says="exists already", json={"name": "a100"})
    # Time-slicing in GPU-time: 1h is one GPU-hour; [] removes it.
    sliced = admin.update_pool("a100", slices=["1h", "10h", "100h"])
    assert (sliced.slices, sliced.notice) == ([3600.0, 36000.0, 360000.0], 120.0)
    assert admin.update_pool("a100", slices=[]).slices == []

    # Nodes join a pool by an admin's label.
    refuse(
        "PATCH",
        "/nodes/n2/labels",
        user="alice",
        status=403,
        says="only admins may label nodes",
        json={"set": {"pool": "a100"}},
    )
    labels = admin.label("n2", set={"pool": "a100", "driver": "535.104"})
    assert (labels.labels, labels.extra_labels, labels.effective) == (
        {"zone": "z2"},
        {"pool": "a100", "driver": "535.104"},
        {"zone": "z2", "pool": "a100", "driver": "535.104"},
    )
    admin.label("n3", set={"pool": "a100", "zone": "z9"})  # an admin label wins
    assert client.node_labels("n3").effective == {"zone": "z9", "pool": "a100"}
    admin.label("n1", set={"pool": "h800"})  # a pool that exists only as a label
    pools = {p.name: p for p in client.pools()}
    assert {n: (p.declared, p.nodes) for n, p in pools.items()} == {
        "a100": (True, ["n2", "n3"]),
        "default": (False, ["n0"]),
        "h800": (False, ["n1"]),
    }
    assert client.pool("h800").preemption.value == "never"

    for body, says in [
        ({"set": {"pool": "a b"}}, "a value is 1-128 letters"),
        ({"set": {"9lives": "x"}}, "a label name is a letter"),
        ({"set": {}}, "nothing to change"),
        ({"set": {"zone": "z1"}, "remove": ["zone"]}, "set or remove a label, not both"),
        ({"remove": ["gpu_model"]}, "node n3 has no admin label gpu_model to remove"),
    ]:
        refuse("PATCH", "/nodes/n3/labels", user="ada", status=422, says=says, json=body)
    refuse(
        "PATCH",
        "/nodes/n9/labels",
        user="ada",
        status=404,
        says="node n9 does not exist",
        json={"set": {"zone": "z1"}},
    )
    assert admin.label("n3", remove=["zone"]).effective == {"zone": "z2", "pool": "a100"}

    # Changing a policy: given fields only; a label-only pool gets a policy of its own.
    refuse(
        "PATCH",
        "/pools/a100",
        user="alice",
        status=403,
        says="only admins may change pools",
        json={"same_zone": False},
    )
    refuse("PATCH", "/pools/a100", user="ada", status=422, says="nothing to change", json={})
    refuse(
        "PATCH",
        "/pools/v100",
        user="ada",
        status=404,
        says=["there is no pool v100", "gpuyard label NODE pool=v100"],
        json={"same_zone": True},
    )
    changed = admin.update_pool("a100", same_zone=False, grow_after="5m")
    assert (changed.preemption.value, changed.same_zone, changed.grow_after) == (
        "suspend",
        False,
        300.0,
    )
    h800 = admin.update_pool("h800", preemption="suspend")
    assert (h800.declared, h800.preemption.value, h800.notice, h800.nodes) == (
        True,
        "suspend",
        60.0,
        ["n1"],
    )


def test_a_pools_tail_guards_default_with_slices_round_trip_and_refuse_bad_values(
    client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    hours = 3600.0
    plain = admin.create_pool("plain")  # no slicing: the guards would do nothing, they are off
    assert (plain.age_halflife, plain.min_run) == (None, None)
    sliced = admin.create_pool("sliced", preemption="suspend", slices=["1h", "10h"])
    assert (sliced.age_halflife, sliced.min_run) == (
        TIME_SHARING_AGE_HALFLIFE,
        TIME_SHARING_MIN_RUN,
    )
    assert (sliced.age_halflife, sliced.min_run) == (3 * hours, 1 * hours)
    given = admin.create_pool("given", slices=["1h"], age_halflife="90m", min_run="off")
    assert (given.age_halflife, given.min_run) == (5400.0, None)
    assert {p.name: p.age_halflife for p in client.pools()} == {
        "default": None,
        "given": 5400.0,
        "plain": None,
        "sliced": 3 * hours,
    }

    # Changed alone, or switched off; the other field and the rest of the policy stay.
    changed = admin.update_pool("sliced", age_halflife="6h")
    assert (changed.age_halflife, changed.min_run, changed.slices) == (
        6 * hours,
        hours,
        [3600.0, 36000.0],
    )
    changed = admin.update_pool("sliced", min_run="off")
    assert (changed.age_halflife, changed.min_run) == (6 * hours, None)
    off = admin.update_pool("sliced", slices=[])  # slicing off: the guards stay, inert
    assert (off.age_halflife, off.min_run) == (6 * hours, None)
    # Turning slicing on fills only the guards a pool lacks, unless the change names them.
    again = admin.update_pool("sliced", slices=["2h"])
    assert (again.age_halflife, again.min_run) == (6 * hours, hours)
    turned_on = admin.update_pool("plain", slices=["1h"], min_run="off")
    assert (turned_on.age_halflife, turned_on.min_run) == (3 * hours, None)
    # A pool known only from node labels gets its policy from its first change.
    labelled = admin.update_pool("default", preemption="suspend", slices=["1h", "10h", "100h"])
    assert (labelled.declared, labelled.age_halflife, labelled.min_run) == (True, 3 * hours, hours)

    for field in ("age_halflife", "min_run"):
        for value, says in [
            (-5, "a duration above zero and at most 30 days (e.g. 3h, 90m or 5400), or off"),
            (0, "above zero"),
            ("0s", "above zero"),
            ("31d", "at most 30 days"),
            (True, "above zero"),
            ("soon", "cannot read 'soon' as a duration"),
            ("never", "or off to switch it off"),
        ]:
            expected = [f"{field}: ", says, f"(got {value!r})"]
            refuse(
                "PATCH", "/pools/sliced", user="ada", status=422, says=expected, json={field: value}
            )
            refuse(
                "POST",
                "/pools",
                user="ada",
                status=422,
                says=expected,
                json={"name": "new", field: value},
            )
        refuse(
            "PATCH",
            "/pools/sliced",
            user="alice",
            status=403,
            says="only admins may change pools",
            json={field: "1h"},
        )
    assert admin.pool("sliced").age_halflife == 6 * hours


def test_openapi_documents_the_account_routes(api_url: str) -> None:
    paths = set(httpx.get(f"{api_url}/api/v1/openapi.json").json()["paths"])
    assert {
        "/api/v1/users",
        "/api/v1/users/{name}",
        "/api/v1/groups",
        "/api/v1/groups/{name}",
        "/api/v1/quotas",
        "/api/v1/quotas/{kind}/{subject}/{tier}",
        "/api/v1/pools",
        "/api/v1/pools/{name}",
        "/api/v1/nodes/{name}/labels",
    } <= paths
