"""The dataset catalogue (docs/datasets.md): datasets (owner, name, visibility), their
immutable versions (state, where the files are, the manifest, size), users' favourites, and
the upload sessions an interrupted upload resumes from.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def _cascade(table: str) -> sa.ForeignKey:
    return sa.ForeignKey(f"{table}.id", ondelete="CASCADE")


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=True),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", sa.Float(), nullable=False),
        sqlite_autoincrement=sqlite,
    )
    op.create_index("ux_datasets_owner_name", "datasets", ["owner", "name"], unique=True)
    op.create_index("ix_datasets_name", "datasets", ["name"])
    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("dataset_id", sa.Integer(), _cascade("datasets"), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=True),
        sa.Column("digest", sa.String(71), nullable=False, server_default=""),
        sa.Column("size", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("files", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("error", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sqlite_autoincrement=sqlite,
    )
    op.create_index(
        "ux_dataset_versions", "dataset_versions", ["dataset_id", "version"], unique=True
    )
    op.create_table(
        "dataset_favourites",
        sa.Column("user", sa.String(64), primary_key=True),
        sa.Column("dataset_id", sa.Integer(), _cascade("datasets"), primary_key=True),
    )
    op.create_table(
        "dataset_uploads",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("version_id", sa.Integer(), _cascade("dataset_versions"), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("received", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("dataset_uploads")
    op.drop_table("dataset_favourites")
    op.drop_index("ux_dataset_versions", table_name="dataset_versions")
    op.drop_table("dataset_versions")
    op.drop_index("ix_datasets_name", table_name="datasets")
    op.drop_index("ux_datasets_owner_name", table_name="datasets")
    op.drop_table("datasets")
