"""Users, API keys, experiment owner/visibility/priority, and a revision counter for ETags

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False, server_default="user"),
        sa.Column("max_active_jobs", sa.Integer),
        sa.Column("max_work", sa.BigInteger),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("label", sa.String(200)),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_api_keys_user_id", "api_keys", ["user_id"])
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("owner_id", sa.String(32)))
        batch.add_column(sa.Column("visibility", sa.String(8), nullable=False, server_default="private"))
        batch.add_column(sa.Column("priority", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="0"))
        batch.create_foreign_key("fk_experiments_owner_id_users", "users", ["owner_id"], ["id"])
        batch.create_index("ix_experiments_owner_id", ["owner_id"])


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_owner_id")
        batch.drop_constraint("fk_experiments_owner_id_users", type_="foreignkey")
        batch.drop_column("revision")
        batch.drop_column("priority")
        batch.drop_column("visibility")
        batch.drop_column("owner_id")
    op.drop_index("ix_api_keys_user_id", "api_keys")
    op.drop_table("api_keys")
    op.drop_table("users")
