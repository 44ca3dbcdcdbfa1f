"""Job dependencies, holds and excluded nodes: the jobs each job waits for and whether it is held
(columns, so that each scheduling pass finds the few blocked jobs without reading every spec),
and the nodes it must not run on (a request column, as node_names).

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("held", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("depends", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("exclude_nodes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("exclude_nodes")
        batch.drop_column("depends")
        batch.drop_column("held")
