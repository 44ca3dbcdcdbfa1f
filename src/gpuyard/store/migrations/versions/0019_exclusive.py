"""Whether a job takes its nodes whole (``exclusive``: true, false, or null for the default,
whole nodes for a multi-node job): a request column beside the others, which the scheduler's
snapshot reads without parsing specs (docs/scheduling.md, "Whole nodes").

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("exclusive", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("exclusive")
