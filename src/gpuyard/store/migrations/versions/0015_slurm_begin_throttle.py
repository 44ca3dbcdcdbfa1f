"""Slurm's ``--begin`` and array throttles (``--array=0-9%2``): when a job may start at the
earliest, and how many tasks of its array may run at once (columns, so that each scheduling
pass finds the few jobs they hold back without reading every spec).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("begin_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("array_throttle", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("array_throttle")
        batch.drop_column("begin_at")
