"""Worker roles and sub-tasks, job tokens: for distributed modes and batch jobs.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="worker"))
        batch.add_column(sa.Column("task", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("primary", sa.Boolean(), nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("token", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("token")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("primary")
        batch.drop_column("task")
        batch.drop_column("role")
