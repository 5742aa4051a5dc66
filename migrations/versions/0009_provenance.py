"""Provenance of each attempt: engine, torch and NumPy versions, git commit, device and dtype (JSON)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("provenance", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("provenance")
