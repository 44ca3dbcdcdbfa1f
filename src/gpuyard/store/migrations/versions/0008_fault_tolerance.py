"""Fault tolerance: each job's restarts and pre-flight failures, its fault-tolerance log, and
why a node is cordoned (by whom, since when).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("check_failures", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("check_next", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("resume", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch.add_column(sa.Column("hang_timeout", sa.Float(), nullable=True))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cordon_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("cordoned_by", sa.String(96), nullable=True))
        batch.add_column(sa.Column("cordoned_at", sa.Float(), nullable=True))
    op.create_table(
        "job_faults",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("cause", sa.String(128), nullable=False),
        sa.Column("suspect", sa.String(16), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("node", sa.String(128), nullable=True),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("outcome_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_job_faults_job", "job_faults", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_faults_job", table_name="job_faults")
    op.drop_table("job_faults")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("cordoned_at")
        batch.drop_column("cordoned_by")
        batch.drop_column("cordon_reason")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("hang_timeout")
        batch.drop_column("resume")
        batch.drop_column("check_next")
        batch.drop_column("check_failures")
        batch.drop_column("restarts")
