"""The image catalogue: the images of the pool's registry that users pushed through the pool,
with their owner, visibility, scope, accelerator kind, description, size and digest
(docs/images.md, "The catalogue"). One row per repository and tag.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "images",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repository", sa.String(255), nullable=False),
        sa.Column("tag", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=True),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("accelerator", sa.String(64), nullable=False, server_default=""),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("pushed_by", sa.String(64), nullable=False),
        sa.Column("pushed_at", sa.Float(), nullable=False),
        sqlite_autoincrement=sqlite,
    )
    op.create_index("ux_images_name", "images", ["repository", "tag"], unique=True)
    op.create_index("ix_images_digest", "images", ["digest"])


def downgrade() -> None:
    op.drop_index("ix_images_digest", table_name="images")
    op.drop_index("ux_images_name", table_name="images")
    op.drop_table("images")
