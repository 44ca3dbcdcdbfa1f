"""The store: the database (SQLite or PostgreSQL), its tables and migrations, guarded writes,
and the scheduler's snapshot read from it."""

from gpuyard.store.engine import Store, normalize_url

__all__ = ["Store", "normalize_url"]
