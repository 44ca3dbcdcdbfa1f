"""Users' logins at the registries images are copied from, their passwords sealed with the
pool's key: a copy without credentials uses its caller's own (docs/images.md, "Registry
logins").

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_logins",
        sa.Column("owner", sa.String(64), primary_key=True),
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("username", sa.String(256), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("saved_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("registry_logins")
