"""Time-slicing: the service each job has had, whether it listens for notices, pool slices.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attained", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("listens", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("slices", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("slices")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("listens")
        batch.drop_column("attained")
