"""Which nodes hold which images, and each job's pinned image digest as a column: the
scheduler prefers, among nodes otherwise equally good, those holding a job's image, and reads
both without parsing specs (docs/images.md, "Placement").

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("image_digest", sa.String(71), nullable=True))
    op.create_table(
        "node_images",
        sa.Column("node", sa.String(255), primary_key=True),
        sa.Column("digest", sa.String(71), primary_key=True),
        sa.Column("at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_images")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("image_digest")
