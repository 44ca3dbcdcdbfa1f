"""Migrations go up, hold what the tables say, and come down cleanly; on both databases."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect

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
        with store.engine.begin() as connection:
            command.downgrade(alembic_config(connection), "base")
        assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
    finally:
        store.close()
