"""Heterogeneous jobs (Slurm's ``#SBATCH hetjob``): what each node of a job asks, when its
nodes do not all ask the same (a column beside the job's other request columns, which the
scheduler's snapshot reads without parsing specs).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("node_resources", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("node_resources")
