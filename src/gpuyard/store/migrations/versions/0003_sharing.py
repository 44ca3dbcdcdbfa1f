"""Sharing a pool: users, groups, quotas, pool policies; suspension and queue state of jobs.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("urgent_limit", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column(
            "group_name",
            sa.String(64),
            sa.ForeignKey("groups.name", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("role", sa.String(16), nullable=False, server_default="user"),
        sa.Column("share", sa.Float(), nullable=False, server_default="1.0"),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "quotas",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
    )
    op.create_index("ux_quotas_subject_tier", "quotas", ["kind", "subject", "tier"], unique=True)
    op.create_table(
        "pools",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("preemption", sa.String(16), nullable=False, server_default="never"),
        sa.Column("same_zone", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("notice", sa.Float(), nullable=False, server_default="60"),
        sa.Column("grow_after", sa.Float(), nullable=False, server_default="60"),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("group_name", sa.String(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("seq", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("wait_code", sa.String(16), nullable=True))
        batch.add_column(sa.Column("start_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("suspend_deadline", sa.Float(), nullable=True))
        batch.add_column(sa.Column("last_checkpoint_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("suspensions", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("notice_sent_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("acknowledged_at", sa.Float(), nullable=True))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("extra_labels", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("extra_labels")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("acknowledged_at")
        batch.drop_column("notice_sent_at")
    with op.batch_alter_table("jobs") as batch:
        for column in (
            "suspensions",
            "last_checkpoint_at",
            "suspend_deadline",
            "start_at",
            "wait_code",
            "seq",
            "group_name",
        ):
            batch.drop_column(column)
    op.drop_table("pools")
    op.drop_index("ux_quotas_subject_tier", table_name="quotas")
    op.drop_table("quotas")
    op.drop_table("users")
    op.drop_table("groups")
