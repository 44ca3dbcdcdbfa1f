"""Groups, jobs and tokens by id, ids never reused, and tokens made from tokens.

- ``groups`` gets an integer ``id`` (its key; ``name`` stays unique, and users still name
  their group): a job's access for others refers to the id of its owner's group
  (``jobs.group_id``), so a group deleted and made again under the same name gives its new
  members nothing of the old one's jobs. Existing jobs get the id of the group of their name
  that existed when they were submitted (none if the group was made after them).
- On SQLite, ``groups``, ``jobs`` and ``api_tokens`` become ``AUTOINCREMENT`` tables: without
  it SQLite gives a new row the largest id in use plus one, so a new job would take the id of
  the job just deleted, and with it what still refers to that id. PostgreSQL's sequences never
  go back.
- ``api_tokens`` gets ``parent_id`` (the token a token was made with: revoking it revokes its
  children, through ``ON DELETE CASCADE``) and ``kind`` (``api``, or ``session`` for a web
  sign-in).

Going down drops the new columns and gives ``groups`` its name as key again.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_USERS_GROUP_FK = "users_group_name_fkey"  # PostgreSQL's name for 0003's unnamed key


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _groups_with_ids_sqlite()
    else:
        _groups_with_ids_postgresql()
    with op.batch_alter_table(
        "jobs", recreate="always" if sqlite else "auto", table_kwargs=_autoincrement(sqlite)
    ) as batch:
        batch.add_column(sa.Column("group_id", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE jobs SET group_id = (SELECT g.id FROM groups g WHERE g.name = jobs.group_name "
        "AND g.created_at <= jobs.created_at)"
    )
    with op.batch_alter_table(
        "api_tokens", recreate="always" if sqlite else "auto", table_kwargs=_autoincrement(sqlite)
    ) as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="api"))
        batch.create_foreign_key(
            "fk_api_tokens_parent", "api_tokens", ["parent_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_api_tokens_parent", ["parent_id"])


def _autoincrement(sqlite: bool) -> dict[str, bool]:
    return {"sqlite_autoincrement": True} if sqlite else {}


def _groups_with_ids_sqlite() -> None:
    """A new table copied in the order the groups were made, then put in the old one's place
    (foreign keys are off while migrations run, and users refer to the group by its name,
    which stays unique)."""
    op.create_table(
        "groups_new",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("urgent_limit", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("name", name="uq_groups_name"),
        sqlite_autoincrement=True,
    )
    op.execute(
        "INSERT INTO groups_new (name, urgent_limit, created_at) "
        "SELECT name, urgent_limit, created_at FROM groups ORDER BY created_at, name"
    )
    op.drop_table("groups")
    op.rename_table("groups_new", "groups")


def _groups_with_ids_postgresql() -> None:
    op.drop_constraint(_USERS_GROUP_FK, "users", type_="foreignkey")
    op.drop_constraint("groups_pkey", "groups", type_="primary")
    op.add_column("groups", sa.Column("id", sa.Integer(), sa.Identity(), nullable=False))
    # Numbered in the order they were made, as on SQLite; the sequence goes on after them.
    op.execute(
        "UPDATE groups SET id = numbered.n FROM (SELECT name, row_number() OVER "
        "(ORDER BY created_at, name) AS n FROM groups) AS numbered "
        "WHERE groups.name = numbered.name"
    )
    op.execute(
        "SELECT setval(pg_get_serial_sequence('groups', 'id'), "
        "(SELECT coalesce(max(id), 0) + 1 FROM groups), false)"
    )
    op.create_primary_key("groups_pkey", "groups", ["id"])
    op.create_unique_constraint("uq_groups_name", "groups", ["name"])
    op.create_foreign_key(
        _USERS_GROUP_FK, "users", "groups", ["group_name"], ["name"], ondelete="SET NULL"
    )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("api_tokens", recreate="always" if sqlite else "auto") as batch:
        batch.drop_index("ix_api_tokens_parent")
        if not sqlite:
            batch.drop_constraint("fk_api_tokens_parent", type_="foreignkey")
        batch.drop_column("kind")
        batch.drop_column("parent_id")
    with op.batch_alter_table("jobs", recreate="always" if sqlite else "auto") as batch:
        batch.drop_column("group_id")
    if sqlite:
        op.create_table(
            "groups_old",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("urgent_limit", sa.Integer(), nullable=True),
            sa.Column("created_at", sa.Float(), nullable=False),
        )
        op.execute(
            "INSERT INTO groups_old (name, urgent_limit, created_at) "
            "SELECT name, urgent_limit, created_at FROM groups"
        )
        op.drop_table("groups")
        op.rename_table("groups_old", "groups")
        return
    op.drop_constraint(_USERS_GROUP_FK, "users", type_="foreignkey")
    op.drop_constraint("uq_groups_name", "groups", type_="unique")
    op.drop_constraint("groups_pkey", "groups", type_="primary")
    op.drop_column("groups", "id")
    op.create_primary_key("groups_pkey", "groups", ["name"])
    op.create_foreign_key(
        _USERS_GROUP_FK, "users", "groups", ["group_name"], ["name"], ondelete="SET NULL"
    )
