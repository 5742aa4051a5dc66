"""Presets: the preset a study was made from (id and size) and its checks (null until computed)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("preset", sa.String(64)))
        batch.add_column(sa.Column("preset_size", sa.String(32)))
        batch.add_column(sa.Column("checks", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        for column in ("checks", "preset_size", "preset"):
            batch.drop_column(column)
