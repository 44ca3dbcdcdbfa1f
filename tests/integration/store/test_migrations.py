"""Migrations go up, hold what the tables say, and come down cleanly; on both databases."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from gpuyard.store.engine import Store, alembic_config
from gpuyard.store.tables import Base


def test_up_check_down(database_url: str) -> None:
    store = Store(database_url)
    try:
        store.migrate()
        inspector = inspect(store.engine)
        tables = set(inspector.get_table_names())
        assert set(Base.metadata.tables) <= tables
        for name, table in Base.metadata.tables.items():
            columns = {c["name"] for c in inspector.get_columns(name)}
            assert columns == {c.name for c in table.columns}, name
        store.migrate()  # idempotent
        with store.migrating() as connection:
            command.downgrade(alembic_config(connection), "base")
        assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
    finally:
        store.close()


def test_0008_adds_fault_tolerance_and_going_down_keeps_the_rest(database_url: str) -> None:
    """Jobs start with no restarts and resuming; nodes uncordoned; the fault log is empty."""
    store = Store(database_url)
    try:
        with store.migrating() as connection:
            command.upgrade(alembic_config(connection), "0007")
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, owner, state, version, priority, spec, attempt, "
                    "created_at) VALUES (1, 'j', 'alice', 'queued', 0, 'normal', '{}', 0, 1.0)"
                )
            )
            command.upgrade(alembic_config(connection), "0008")
            row = connection.execute(
                text("SELECT restarts, check_failures, check_next, resume, hang_timeout FROM jobs")
            ).one()
            assert (row[0], row[1], bool(row[2]), bool(row[3]), row[4]) == (0, 0, False, True, None)
            assert connection.execute(text("SELECT count(*) FROM job_faults")).scalar() == 0
            command.downgrade(alembic_config(connection), "0007")
        inspector = inspect(store.engine)
        assert "job_faults" not in inspector.get_table_names()
        assert "cordon_reason" not in {c["name"] for c in inspector.get_columns("nodes")}
        with store.migrating() as connection:
            assert connection.execute(text("SELECT name FROM jobs")).scalar() == "j"
    finally:
        store.close()


def test_0009_gives_pools_their_tail_guards_and_jobs_the_time_they_ran(database_url: str) -> None:
    """Pools keep their policy with both guards off; a job suspended before the upgrade ran
    for its service over its GPUs (how long it has waited follows from it); going down keeps
    the rest of each row."""
    store = Store(database_url)
    try:
        with store.migrating() as connection:
            command.upgrade(alembic_config(connection), "0008")
            job = {
                "name": "j",
                "owner": "alice",
                "version": 0,
                "priority": "normal",
                "spec": "{}",
                "attempt": 1,
                "created_at": 100.0,
            }
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, owner, state, version, priority, spec, attempt, "
                    "created_at, nodes, gpus, attained) VALUES (:id, :name, :owner, :state, "
                    ":version, :priority, :spec, :attempt, :created_at, :nodes, :gpus, :attained)"
                ),
                [
                    job | {"id": 1, "state": "suspended", "nodes": 2, "gpus": 4, "attained": 8e3},
                    job | {"id": 2, "state": "queued", "nodes": 1, "gpus": 0, "attained": 0.0},
                ],
            )
            connection.execute(
                text("INSERT INTO pools (name, preemption, slices) VALUES ('a100', 'suspend', :s)"),
                {"s": "[3600.0]"},
            )
            command.upgrade(alembic_config(connection), "0009")
            jobs = connection.execute(text("SELECT id, ran, attained FROM jobs ORDER BY id"))
            assert [tuple(r) for r in jobs] == [(1, 1000.0, 8000.0), (2, 0.0, 0.0)]
            pools = connection.execute(text("SELECT name, age_halflife, min_run FROM pools"))
            assert [tuple(r) for r in pools] == [("a100", None, None)]
            command.downgrade(alembic_config(connection), "0008")
        inspector = inspect(store.engine)
        assert "ran" not in {c["name"] for c in inspector.get_columns("jobs")}
        assert {"age_halflife", "min_run"}.isdisjoint(
            c["name"] for c in inspector.get_columns("pools")
        )
        with store.migrating() as connection:
            kept = connection.execute(text("SELECT id, attained FROM jobs ORDER BY id"))
            assert [tuple(r) for r in kept] == [(1, 8000.0), (2, 0.0)]
            assert connection.execute(text("SELECT slices FROM pools")).scalar_one() in (
                "[3600.0]",
                [3600.0],
            )
    finally:
        store.close()


def test_0011_gives_nodes_an_empty_health_and_going_down_keeps_the_rest(database_url: str) -> None:
    """Nodes start uninspected (no findings, no time); going down drops both, nothing else."""
    store = Store(database_url)
    try:
        with store.migrating() as connection:
            command.upgrade(alembic_config(connection), "0010")
            connection.execute(
                text(
                    "INSERT INTO nodes (name, address, state, executor, gpus, gpu_model, "
                    "gpu_devices, cpus, memory, labels, extra_labels, updated_at, "
                    "cordon_reason, cordoned_by, cordoned_at) VALUES ('n0', '10.0.0.1', "
                    "'cordoned', 'local', 8, 'H100', '[]', 64, 1024, '{}', '{}', 1.0, "
                    "'flaky NIC', 'user:ada', 2.0)"
                )
            )
            command.upgrade(alembic_config(connection), "0011")
            row = connection.execute(text("SELECT health, inspected_at FROM nodes")).one()
            assert tuple(row) == (None, None)
            connection.execute(
                text("UPDATE nodes SET health = :h, inspected_at = 3.0"),
                {"h": '[{"probe": "disk", "status": "ok"}]'},
            )
            command.downgrade(alembic_config(connection), "0010")
        columns = {c["name"] for c in inspect(store.engine).get_columns("nodes")}
        assert {"health", "inspected_at"}.isdisjoint(columns)
        with store.migrating() as connection:
            kept = connection.execute(
                text("SELECT name, state, cordon_reason, cordoned_by FROM nodes")
            ).one()
            assert tuple(kept) == ("n0", "cordoned", "flaky NIC", "user:ada")
    finally:
        store.close()


def test_0013_adds_usage_series_that_go_with_their_job(database_url: str) -> None:
    """Usage points of a worker are deleted with its job (cascade, both databases); a node's
    stay; going down drops the series and keeps the jobs."""
    store = Store(database_url)
    try:
        with store.migrating() as connection:
            command.upgrade(alembic_config(connection), "0011")
            for job_id in (1, 2):
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, name, owner, state, version, priority, spec, "
                        "attempt, created_at) VALUES (:id, 'j', 'alice', 'running', 0, "
                        "'normal', '{}', 0, 1.0)"
                    ),
                    {"id": job_id},
                )
                connection.execute(
                    text(
                        "INSERT INTO workers (id, job_id, attempt, rank, node, role, task, "
                        "\"primary\", state) VALUES (:id, :id, 0, 0, 'n0', 'worker', 0, "
                        "true, 'running')"
                    ),
                    {"id": job_id},
                )
            command.upgrade(alembic_config(connection), "0013")
            for level, t in ((0, 60.0), (0, 70.0), (1, 60.0)):
                for job_id in (1, 2):
                    connection.execute(
                        text(
                            "INSERT INTO worker_usage (worker_id, level, t, job_id, samples, "
                            "cpu, memory, gpu_util, gpu_memory) VALUES (:w, :level, :t, :w, "
                            "1, 1.5, 1024, NULL, NULL)"
                        ),
                        {"w": job_id, "level": level, "t": t},
                    )
            connection.execute(
                text(
                    "INSERT INTO node_usage (node, level, t, samples, cpu, memory) "
                    "VALUES ('n0', 0, 60.0, 1, 2.0, 4096)"
                )
            )
        with store.engine.begin() as connection:  # foreign keys on, as the pool runs
            connection.execute(text("DELETE FROM jobs WHERE id = 1"))
            left = connection.execute(text("SELECT DISTINCT job_id FROM worker_usage")).all()
            assert [tuple(r) for r in left] == [(2,)]
            assert connection.execute(text("SELECT count(*) FROM node_usage")).scalar() == 1
        store.downgrade("0011")
        inspector = inspect(store.engine)
        assert {"worker_usage", "node_usage"}.isdisjoint(inspector.get_table_names())
        with store.migrating() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).scalar() == 2
    finally:
        store.close()


def test_0012_adds_holds_and_exec_workers_and_going_down_ends_held_jobs(database_url: str) -> None:
    """Nothing is held and no worker is an exec worker after the upgrade; every earlier fault
    is the platform's. Going down ends each held job as its hold would have (failing after a
    failure it was kept for, stopping otherwise) and keeps the rest of each row."""
    store = Store(database_url)
    try:
        with store.migrating() as connection:
            command.upgrade(alembic_config(connection), "0011")
            job = "INSERT INTO jobs (id, name, owner, state, version, priority, spec, attempt, "
            job += "created_at) VALUES (:id, 'j', 'alice', :state, 0, 'normal', '{}', 0, 1.0)"
            connection.execute(text(job), [{"id": i, "state": "running"} for i in (1, 2, 3)])
            connection.execute(
                text(
                    'INSERT INTO workers (job_id, attempt, rank, node, role, task, "primary", '
                    "state) VALUES (1, 0, 0, 'n0', 'worker', 0, true, 'running')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO job_faults (job_id, attempt, at, kind, cause, suspect, evidence, "
                    "action) VALUES (1, 0, 2.0, 'failure', 'x', 'node', 'e', 'a')"
                )
            )
            command.upgrade(alembic_config(connection), "0012")
            jobs = connection.execute(text("SELECT held_until, hold_outcome FROM jobs")).all()
            assert [tuple(r) for r in jobs] == [(None, None)] * 3
            workers = connection.execute(text("SELECT argv, stop_grace FROM workers")).one()
            assert tuple(workers) == (None, None)
            assert connection.execute(text("SELECT actor FROM job_faults")).scalar() is None
            connection.execute(
                text(
                    "UPDATE jobs SET state = :state, held_until = 9.0, hold_outcome = :outcome "
                    "WHERE id = :id"
                ),
                [
                    {"id": 1, "state": "held", "outcome": "failed"},
                    {"id": 2, "state": "halting", "outcome": "stopped"},
                    {"id": 3, "state": "restarting", "outcome": None},
                ],
            )
            command.downgrade(alembic_config(connection), "0011")
        inspector = inspect(store.engine)
        assert {"held_until", "hold_outcome"}.isdisjoint(
            c["name"] for c in inspector.get_columns("jobs")
        )
        assert {"argv", "stop_grace"}.isdisjoint(
            c["name"] for c in inspector.get_columns("workers")
        )
        assert "actor" not in {c["name"] for c in inspector.get_columns("job_faults")}
        with store.migrating() as connection:
            states = connection.execute(text("SELECT id, state FROM jobs ORDER BY id")).all()
            assert [tuple(r) for r in states] == [(1, "failing"), (2, "stopping"), (3, "stopping")]
            assert connection.execute(text("SELECT count(*) FROM job_faults")).scalar() == 1
    finally:
        store.close()


def test_going_down_to_the_first_migration_keeps_every_worker_of_every_job(
    database_url: str,
) -> None:
    """Alembic's batch mode on SQLite copies a table and drops the old one; with foreign keys
    on, dropping ``jobs`` would delete its workers (``ON DELETE CASCADE``)."""
    store = Store(database_url)
    try:
        store.migrate()
        with store.migrating() as connection:
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, owner, state, version, priority, spec, attempt, "
                    "created_at) VALUES (1, 'j', 'alice', 'queued', 0, 'normal', '{}', 0, 1.0)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO workers (job_id, attempt, rank, node, state) "
                    "VALUES (1, 0, 0, 'node0', 'exited')"
                )
            )
        store.downgrade("0001")
        with store.migrating() as connection:
            assert connection.execute(text("SELECT job_id, node FROM workers")).all() == [
                (1, "node0")
            ]
        store.migrate()
        # The keys are on again in the pool.
        with store.engine.begin() as connection, pytest.raises(IntegrityError):
            connection.execute(
                text(
                    "INSERT INTO workers (job_id, attempt, rank, node, state) "
                    "VALUES (99, 0, 0, 'node0', 'exited')"
                )
            )
    finally:
        store.close()


def test_0017_gives_groups_ids_jobs_their_groups_id_and_never_reuses_ids(
    database_url: str,
) -> None:
    """Issue 24, point 6, on a database with data: groups are numbered in the order they were
    made; a job gets the id of the group of its name that existed when it was submitted
    (none if the group came later: a group made again under an old name); tokens are API
    tokens without a parent; a deleted job's, group's or token's id is not given again; going
    down keeps every row."""
    store = Store(database_url)
    try:
        with store.migrating() as connection:
            command.upgrade(alembic_config(connection), "0016")
            connection.execute(
                text(
                    "INSERT INTO groups (name, created_at) VALUES ('ops', 5.0), ('lab', 1.0), "
                    "('gone', 1.0)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO users (name, group_name, role, share, created_at) VALUES "
                    "('ann', 'lab', 'user', 1.0, 1.0)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO api_tokens (id, digest, user_name, label, created_at) "
                    "VALUES (1, 'a', 'ann', '', 1.0), (2, 'b', 'ann', '', 1.0)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, owner, state, version, priority, spec, attempt, "
                    "created_at, group_name) VALUES "
                    "(1, 'a', 'ann', 'queued', 0, 'normal', '{}', 0, 2.0, 'lab'), "
                    "(2, 'b', 'ann', 'queued', 0, 'normal', '{}', 0, 3.0, 'ops'), "
                    "(3, 'c', 'ann', 'queued', 0, 'normal', '{}', 0, 4.0, 'lab')"
                )
            )
            command.upgrade(alembic_config(connection), "0017")
            groups = connection.execute(text("SELECT name, id FROM groups ORDER BY id")).all()
            assert [tuple(g) for g in groups] == [("gone", 1), ("lab", 2), ("ops", 3)]
            jobs = connection.execute(text("SELECT id, group_id FROM jobs ORDER BY id")).all()
            assert [tuple(j) for j in jobs] == [(1, 2), (2, None), (3, 2)]
            tokens = connection.execute(text("SELECT id, kind, parent_id FROM api_tokens"))
            assert sorted(tuple(t) for t in tokens) == [(1, "api", None), (2, "api", None)]
            # Ids are never given again: delete the newest row, insert one more.
            for table, columns, values in [
                (
                    "jobs",
                    "name, owner, state, version, priority, spec, attempt, created_at",
                    "'d', 'ann', 'queued', 0, 'normal', '{}', 0, 9.0",
                ),
                ("groups", "name, created_at", "'new', 9.0"),
                ("api_tokens", "digest, user_name, label, created_at", "'c', 'ann', '', 9.0"),
            ]:
                newest = connection.execute(text(f"SELECT max(id) FROM {table}")).scalar_one()  # noqa: S608
                connection.execute(text(f"DELETE FROM {table} WHERE id = {newest}"))  # noqa: S608
                if database_url.startswith("postgresql") and table != "groups":
                    # The rows above were given their ids by hand: move the sequence past them.
                    connection.execute(text(f"SELECT setval('{table}_id_seq', {newest})"))
                connection.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({values})"))  # noqa: S608
                again = connection.execute(text(f"SELECT max(id) FROM {table}")).scalar_one()  # noqa: S608
                assert again > newest, table
            command.downgrade(alembic_config(connection), "0016")
        inspector = inspect(store.engine)
        assert "group_id" not in {c["name"] for c in inspector.get_columns("jobs")}
        assert "id" not in {c["name"] for c in inspector.get_columns("groups")}
        with store.migrating() as connection:
            kept = connection.execute(text("SELECT name FROM groups ORDER BY name")).all()
            assert [k[0] for k in kept] == ["gone", "lab", "new"]
            assert connection.execute(text("SELECT count(*) FROM jobs")).scalar() == 3
            assert connection.execute(text("SELECT group_name FROM users")).scalar() == "lab"
    finally:
        store.close()
