"""An index on jobs.finished_at: the duration predictor reads the jobs that ended since it last
looked, every few seconds, without a scan of the whole history (docs/scheduling.md,
"Predicted run times").

Revision ID: 0022
Revises: 0021
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_finished_at", table_name="jobs")
