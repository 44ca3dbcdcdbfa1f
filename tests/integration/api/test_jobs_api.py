"""The jobs API over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import func, select

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, InvalidSpec, NotFound
from gpuyard.executors.fake import FakeExecutor
from gpuyard.store.engine import Store
from gpuyard.store.tables import EventRow, JobRow
from gpuyard.testing.auth import AsUser, TokenFor


def test_submit_get_and_defaults(client: Client) -> None:
    job = client.submit({"command": "python train.py --lr 0.1", "resources": {"gpus": 2}})
    assert (job.id, job.name, job.owner, job.status.value, job.state.value) == (
        job.id,
        "train",
        "alice",
        "queued",
        "queued",
    )
    assert job.spec.resources.gpus == 2
    assert job.spec.graceful_shutdown == 30
    got = client.job(job.id)
    assert got.spec == job.spec
    assert [e.to_state for e in client.events(job.id)] == ["queued"]


def test_1000_submissions_then_filters_and_paging_return_exactly_the_right_jobs(
    api_url: str, controller: Controller, fake_executor: FakeExecutor, as_user: AsUser
) -> None:
    owners = ["alice", "bob", "carol"]
    clients = {o: as_user(o) for o in owners}
    admin = as_user("root-admin", admin=True)  # sees every job
    expected: dict[int, tuple[str, str, str]] = {}  # id -> (name, owner, status)
    for i in range(1000):
        owner = owners[i % 3]
        name = f"{'resnet' if i % 4 == 0 else 'bert'}-{i}"
        job = clients[owner].submit({"command": "python train.py", "name": name})
        expected[job.id] = (name, owner, "queued")
    for job_id in list(expected)[::5]:  # every fifth is stopped while queued
        admin.stop(job_id)
        expected[job_id] = (*expected[job_id][:2], "stopped")
    controller.tick()  # the fake node has 64 CPUs: the first 64 queued jobs start
    started = [j for j in sorted(expected) if expected[j][2] == "queued"][:64]
    for job_id in started:
        expected[job_id] = (*expected[job_id][:2], "running")
    for k, job_id in enumerate(started[:30]):  # some end: even k succeed, odd k fail
        fake_executor.exit(job_id, code=0 if k % 2 == 0 else 3)
        expected[job_id] = (*expected[job_id][:2], "succeeded" if k % 2 == 0 else "failed")
    controller.tick()  # settles those 30 and starts the next 30 queued in their place
    for job_id in [j for j in sorted(expected) if expected[j][2] == "queued"][:30]:
        expected[job_id] = (*expected[job_id][:2], "running")

    def expect(
        status: set[str] | None = None, name: str | None = None, owner: str | None = None
    ) -> list[int]:
        return sorted(
            (
                i
                for i, (n, o, st) in expected.items()
                if (status is None or st in status)
                and (name is None or name in n)
                and (owner is None or o == owner)
            ),
            reverse=True,
        )

    def fetch_all(**filters: object) -> tuple[list[int], int]:
        ids: list[int] = []
        offset = 0
        while True:
            page = admin.jobs(offset=offset, limit=70, **filters)  # type: ignore[arg-type]
            ids += [j.id for j in page.items]
            assert all(filters.get("owner") in (None, j.owner) for j in page.items)
            offset += 70
            if offset >= page.total:
                return ids, page.total

    def check(**filters: object) -> None:
        status = filters.get("status")
        states = {"error" if s == "failed" else s for s in status} if status else None
        want = expect(
            {"failed" if s == "error" else s for s in states} if states else None,
            filters.get("name"),  # type: ignore[arg-type]
            filters.get("owner"),  # type: ignore[arg-type]
        )
        assert fetch_all(**filters) == (want, len(want)), filters

    check()
    check(status=["running"])
    check(status=["queued"])
    check(status=["error", "succeeded"])
    check(status=["stopped"], owner="carol")
    check(name="resnet")
    check(name="resnet", status=["running"], owner="bob")
    check(name="-99")
    assert len(expect({"running"})) == 64 and len(expect({"stopped"})) == 200
    page = admin.jobs(offset=990, limit=100)
    assert [j.id for j in page.items] == sorted(expected)[9::-1]
    assert admin.jobs(name="%").total == 0  # LIKE wildcards are escaped
    # A plain user sees only its own jobs (their access for others is none).
    assert clients["carol"].jobs(limit=1).total == len(expect(owner="carol"))


def test_list_rejects_bad_parameters(client: Client) -> None:
    with pytest.raises(InvalidSpec, match="unknown status 'done'; choose one of"):
        client.jobs(status=["done"])
    with pytest.raises(InvalidSpec, match="limit"):
        client.jobs(limit=0)


INVALID = [
    ({"command": "KEY=VALUE python3 train.py"}, 'bash -c "KEY=VALUE python3 train.py"'),
    (
        {"command": "python3 train.py && python3 evaluate.py"},
        'bash -c "python3 train.py && python3 evaluate.py"',
    ),
    ({"command": "x", "resources": {"gpus": -1}}, "resources.gpus"),
    ({"command": "x", "resources": {"gpus": 9}}, "no node has 9 GPUs"),
    ({"command": "x", "nodes": 2}, "needs 2 nodes but only 1"),
    ({"command": "x", "mode": "quantum"}, "mode: Input should be 'single'"),
    ({"command": "x", "max_runtime": "soon"}, "cannot read 'soon' as a duration"),
    ({"command": "x", "resources": {"memory": "lots"}}, "cannot read 'lots' as a size"),
    ({"command": "x", "env": {"1BAD": "x"}}, "not an environment variable name"),
    ({"command": "x", "workdir": "relative/dir"}, "absolute path"),
    ({"command": "x", "name": "a/b"}, "job name"),
    ({"command": "x", "colour": "red"}, "colour: Extra inputs are not permitted"),
    ({}, "command: a regular job needs a command"),
    ({"command": "x", "mode": "mpi", "parameter_servers": 1}, "only the tensorflow mode"),
    ({"type": "batch", "command": "x"}, "a batch job needs at least one sub-task"),
    ({"type": "batch", "tasks": [{"command": "a && b"}]}, 'bash -c "a && b"'),
    ({"command": "x", "mounts": {"datasets": [{"name": "..", "path": "/d"}]}}, "mount name"),
    ({"command": "x", "mounts": {"algorithm": "code/"}}, "absolute path"),
    (
        {
            "command": "x",
            "mode": "tensorflow",
            "parameter_servers": 1,
            "nodes": 2,
            "resources": {"cpus": 64},
        },
        "its 3 workers do not fit together",
    ),
]


@pytest.mark.parametrize(("body", "message"), INVALID)
def test_invalid_specs_get_422_saying_what_to_change_and_store_nothing(
    api_url: str,
    controller: Controller,
    store: Store,
    token_for: TokenFor,
    body: dict[str, object],
    message: str,
) -> None:
    headers = {"Authorization": f"Bearer {token_for('alice')}"}
    response = httpx.post(f"{api_url}/api/v1/jobs", json=body, headers=headers)
    assert response.status_code == 422
    data = response.json()
    assert data["code"] == "invalid_spec"
    assert message in data["detail"]
    with store.read() as session:
        assert session.scalar(select(func.count()).select_from(JobRow)) == 0
        assert session.scalar(select(func.count()).select_from(EventRow)) == 0


def test_errors_have_detail_and_code(api_url: str, token_for: TokenFor) -> None:
    response = httpx.get(f"{api_url}/api/v1/jobs/12345")
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"
    assert "gpuyard login" in response.json()["detail"]
    headers = {"Authorization": f"Bearer {token_for('alice')}"}
    response = httpx.get(f"{api_url}/api/v1/jobs/12345", headers=headers)
    assert (response.status_code, response.json()) == (
        404,
        {"detail": "job 12345 does not exist", "code": "not_found"},
    )
    response = httpx.get(f"{api_url}/api/v1/jobs/0", headers=headers)
    assert response.status_code == 422 and response.json()["code"] == "invalid_spec"
    # A word is no job id: there is no such path (and PATCH /jobs/stop is a 405, see
    # test_api_document.py).
    response = httpx.get(f"{api_url}/api/v1/jobs/abc", headers=headers)
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_stop_a_queued_job_then_delete_it(client: Client, fake_executor: FakeExecutor) -> None:
    job = client.submit({"command": "sleep 100"})
    with pytest.raises(Conflict, match="stop it first"):
        client.delete(job.id)
    stopped = client.stop(job.id)
    assert (stopped.status.value, stopped.reason) == ("stopped", "stopped by alice")
    with pytest.raises(Conflict, match="already ended"):
        client.stop(job.id)
    assert [(e.from_state, e.to_state, e.actor) for e in client.events(job.id)] == [
        (None, "queued", "user:alice"),
        ("queued", "stopped", "user:alice"),
    ]
    client.delete(job.id)
    with pytest.raises(NotFound):
        client.job(job.id)
    with pytest.raises(NotFound):
        client.events(job.id)


def test_clone_copies_the_spec_with_overrides(client: Client) -> None:
    job = client.submit(
        {"command": "python t.py", "name": "orig", "env": {"A": "1"}, "resources": {"gpus": 1}}
    )
    copy = client.clone(job.id)
    assert copy.id != job.id and copy.name == "orig" and copy.spec.env == {"A": "1"}
    renamed = client.clone(job.id, name="second", resources={"gpus": 2})
    assert (renamed.name, renamed.spec.resources.gpus) == ("second", 2)
    with pytest.raises(InvalidSpec, match="cloned spec is invalid"):
        client.clone(job.id, nodes=0)


def test_nodes_and_health(client: Client, controller: Controller) -> None:
    client.submit({"command": "x", "resources": {"gpus": 3, "cpus": 2, "memory": "1G"}})
    controller.tick()
    [n] = client.nodes()
    assert (n.name, n.gpus, n.gpus_used, n.cpus_used, n.memory_used, n.state.value) == (
        "fake0",
        8,
        3,
        2.0,
        1 << 30,
        "ready",
    )
    assert n.jobs == [1]
    health = client.health()
    assert health["status"] == "ok" and health["database"] in ("sqlite", "postgresql")


def test_logs_by_offset_and_follow(
    client: Client, controller: Controller, fake_executor: FakeExecutor
) -> None:
    job = client.submit({"command": "python train.py"})
    assert client.logs(job.id).data == ""  # queued: no log yet, not an error
    controller.tick()
    fake_executor.write_log(job.id, b"step 1 loss 0.5\n" + "αβγ".encode())
    # 17 bytes would cut "α" (2 bytes) in half: the chunk stops before it instead.
    first = client.logs(job.id, limit=17)
    assert (first.data, first.next_offset, first.size, first.eof) == (
        "step 1 loss 0.5\n",
        16,
        22,
        False,
    )
    rest = client.logs(job.id, offset=first.next_offset)
    assert (rest.data, rest.next_offset) == ("αβγ", 22)
    with pytest.raises(NotFound, match="no worker 3"):
        client.logs(job.id, worker=3)
    fake_executor.exit(job.id, code=0)
    controller.tick()
    streamed = b"".join(client.follow_logs(job.id))
    assert streamed.decode() == "step 1 loss 0.5\nαβγ"
    assert client.logs(job.id, offset=rest.next_offset).eof


def test_openapi_documents_the_api(api_url: str) -> None:
    spec = httpx.get(f"{api_url}/api/v1/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/stop",
        "/api/v1/jobs/{job_id}/clone",
        "/api/v1/jobs/{job_id}/events",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/nodes",
        "/api/v1/health",
    } <= paths
    job_spec = spec["components"]["schemas"]["JobSpec"]["properties"]
    assert "graceful_shutdown" in job_spec and job_spec["command"]["description"]
