"""Performance detection and the collective check's floor: the window a job's step rate is
watched over (a column, so the loop finds the jobs to watch), and each pool's all-reduce bus
bandwidth floor for the node check.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("perf_window", sa.Float(), nullable=True))
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("allreduce_floor", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("allreduce_floor")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("perf_window")
