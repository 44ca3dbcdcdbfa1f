"""Who may do what: API tokens, each job's access for others, the pool's settings, the audit
trail, and the OS account each user's jobs run as.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column(
            "user_name",
            sa.String(64),
            sa.ForeignKey("users.name", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("label", sa.String(64), nullable=False, server_default=""),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_api_tokens_user", "api_tokens", ["user_name"])
    op.create_table(
        "pool_settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=True),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(96), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(160), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False, server_default=""),
    )
    op.create_index("ix_audit_time", "audit", ["time"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("access", sa.String(16), nullable=False, server_default="none"))
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("os_user", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("os_user")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("access")
    op.drop_index("ix_audit_time", "audit")
    op.drop_table("audit")
    op.drop_table("pool_settings")
    op.drop_index("ix_api_tokens_user", "api_tokens")
    op.drop_table("api_tokens")
