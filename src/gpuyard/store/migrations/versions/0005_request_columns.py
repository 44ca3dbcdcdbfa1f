"""Each job's request in columns of its own, and its queue prediction.

A scheduling pass used to parse every queued job's spec (JSON) to learn what it asks for; the
request (gpuyard.models.request.JobRequest) now sits in plain columns beside the spec, written
whenever the spec is. Existing jobs get theirs from their stored spec. The controller writes
each queued job's prediction, so the API no longer runs the scheduler to answer for one.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_INTS = ("nodes", "gpus", "mcpus", "memory", "tasks", "parameter_servers")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("prediction", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("nodes", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("gpus", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("mcpus", sa.Integer(), nullable=False, server_default="1000"))
        batch.add_column(sa.Column("memory", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("tasks", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(
            sa.Column("parameter_servers", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("alternatives", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("min_nodes", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pool", sa.String(64), nullable=True))
        batch.add_column(sa.Column("node_names", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("driver", sa.String(64), nullable=True))
        batch.add_column(sa.Column("max_runtime", sa.Float(), nullable=True))
    _backfill()


def _backfill() -> None:
    """Fill the new columns of existing jobs from their specs, with the same rule as new
    submissions (gpuyard.models.request.request_of)."""
    from gpuyard.models.job import JobSpec
    from gpuyard.models.request import request_of
    from gpuyard.store.tables import request_columns

    jobs = sa.table(
        "jobs",
        sa.column("id", sa.Integer()),
        sa.column("spec", sa.JSON()),
        *(sa.column(name, sa.Integer()) for name in _INTS),
        sa.column("alternatives", sa.JSON()),
        sa.column("min_nodes", sa.Integer()),
        sa.column("pool", sa.String()),
        sa.column("node_names", sa.JSON()),
        sa.column("driver", sa.String()),
        sa.column("max_runtime", sa.Float()),
    )
    connection = op.get_bind()
    for job_id, spec in connection.execute(sa.select(jobs.c.id, jobs.c.spec)).all():
        try:
            values = request_columns(request_of(JobSpec.model_validate(spec)))
        except ValueError:  # a spec no longer valid keeps the defaults; it fails at launch
            continue
        connection.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in (
            "max_runtime",
            "driver",
            "node_names",
            "pool",
            "min_nodes",
            "alternatives",
            *reversed(_INTS),
            "prediction",
        ):
            batch.drop_column(name)
