"""Usage series: each worker's and each node's CPU, memory and GPU figures at four
resolutions (the samples, 1-minute, 15-minute and 1-hour averages). A worker's points go with
the worker, so with its job.

Revision ID: 0013
Revises: 0012
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _figures() -> list[sa.Column[Any]]:
    return [
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("cpu", sa.Float(), nullable=True),
        sa.Column("memory", sa.BigInteger(), nullable=True),
        sa.Column("gpu_util", sa.Float(), nullable=True),
        sa.Column("gpu_memory", sa.BigInteger(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "worker_usage",
        sa.Column(
            "worker_id",
            sa.Integer(),
            sa.ForeignKey("workers.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("level", sa.SmallInteger(), primary_key=True),
        sa.Column("t", sa.Float(), primary_key=True),
        sa.Column(
            "job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        *_figures(),
    )
    op.create_index("ix_worker_usage_job", "worker_usage", ["job_id", "level", "t"])
    op.create_index("ix_worker_usage_level_t", "worker_usage", ["level", "t"])
    op.create_table(
        "node_usage",
        sa.Column("node", sa.String(128), primary_key=True),
        sa.Column("level", sa.SmallInteger(), primary_key=True),
        sa.Column("t", sa.Float(), primary_key=True),
        *_figures(),
    )
    op.create_index("ix_node_usage_level_t", "node_usage", ["level", "t"])


def downgrade() -> None:
    op.drop_index("ix_node_usage_level_t", table_name="node_usage")
    op.drop_table("node_usage")
    op.drop_index("ix_worker_usage_level_t", table_name="worker_usage")
    op.drop_index("ix_worker_usage_job", table_name="worker_usage")
    op.drop_table("worker_usage")
