"""Slurm-compatible commands: signals a person sends to a running job's steps or batch shell
(``scancel --signal``), the job array each job belongs to (``sbatch --array``), and how long
before its time limit a job wants a signal (``--signal=SIG@SECONDS``).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_signals",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("signal", sa.Integer(), nullable=False),
        sa.Column("steps", sa.Boolean(), nullable=False),
        sa.Column("actor", sa.String(96), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("delivered_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_job_signals_pending", "job_signals", ["delivered_at"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("limit_signal", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_array", "jobs", ["array_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_array", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("limit_signal")
        batch.drop_column("array_id")
    op.drop_index("ix_job_signals_pending", "job_signals")
    op.drop_table("job_signals")
