"""Time-slicing's tail guards in live pools: each pool's aging half-life and quantum, and the
seconds each job ran in its earlier attempts (how long it has waited follows from it).

A job suspended before this revision ran for about ``attained`` / its GPUs (exact unless an
elastic job changed size between attempts): that is what its ``ran`` starts from.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("age_halflife", sa.Float(), nullable=True))
        batch.add_column(sa.Column("min_run", sa.Float(), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("ran", sa.Float(), nullable=False, server_default="0"))
    jobs = sa.table(
        "jobs",
        sa.column("ran", sa.Float()),
        sa.column("attained", sa.Float()),
        sa.column("gpus", sa.Integer()),
        sa.column("nodes", sa.Integer()),
    )
    op.execute(
        jobs.update()
        .where(jobs.c.attained > 0, jobs.c.gpus > 0, jobs.c.nodes > 0)
        .values(ran=jobs.c.attained / (jobs.c.gpus * jobs.c.nodes))
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("ran")
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("min_run")
        batch.drop_column("age_halflife")
