"""Node health: each node's latest inspection (what every probe found) and when it was made.

Nodes start uninspected (both None); the controller's next inspection fills them.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("health", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("inspected_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("inspected_at")
        batch.drop_column("health")
