"""pools.idle_timeout: a pool's own idle timeout for interactive jobs (docs/interactive.md,
"Reclaimed when idle"); None: the pool-wide GPUYARD_IDLE_TIMEOUT.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("idle_timeout", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("idle_timeout")
