"""Persistence: tables, the store, and Alembic migrations."""
