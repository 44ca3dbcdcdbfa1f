"""``gpuyard exec`` and held jobs: when a held job's hold ends and how, an exec worker's command
and a person's request to stop it, and who asked for a usercall of the fault-tolerance log.

Every new column is nullable and empty for existing rows: no job is held, no worker is an exec
worker, every earlier fault-log entry is the platform's. Going down ends the jobs that are held
(failing if they were kept after a failure, else stopping).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("held_until", sa.Float(), nullable=True))
        batch.add_column(sa.Column("hold_outcome", sa.String(16), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("argv", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("stop_grace", sa.Float(), nullable=True))
    with op.batch_alter_table("job_faults") as batch:
        batch.add_column(sa.Column("actor", sa.String(96), nullable=True))


def downgrade() -> None:
    # The states before this revision do not know a hold: a held job is ended the way its
    # hold would have ended it (its workers drained by the controller).
    jobs = sa.table("jobs", sa.column("state", sa.String(16)), sa.column("hold_outcome"))
    held = jobs.c.state.in_(["halting", "held", "restarting"])
    op.execute(
        jobs.update()
        .where(held)
        .values(state=sa.case((jobs.c.hold_outcome == "failed", "failing"), else_="stopping"))
    )
    _drop_columns("job_faults", "actor")
    _drop_columns("workers", "stop_grace", "argv")
    _drop_columns("jobs", "hold_outcome", "held_until")


def _drop_columns(table: str, *columns: str) -> None:
    """Drop plain columns in place. Not through a batch on SQLite where it can be helped: a batch
    copies the table and drops the old one, and with foreign keys on (the store's connections
    turn them on) dropping ``jobs`` deletes every row that cascades from it: events, workers,
    the fault log. SQLite drops a column itself from 3.35 on."""
    bind = op.get_bind()
    version = getattr(bind.dialect.dbapi, "sqlite_version_info", (0,))
    old_sqlite = bind.dialect.name == "sqlite" and version < (3, 35)
    if old_sqlite:
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.drop_column(column)
        return
    for column in columns:
        op.drop_column(table, column)
