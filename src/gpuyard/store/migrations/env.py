"""Alembic environment: runs on the connection the store hands over."""

from __future__ import annotations

from alembic import context

from gpuyard.store.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - we always run migrations through Store
    raise RuntimeError("run gpuyard migrations through gpuyard.store.engine.Store.migrate()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
