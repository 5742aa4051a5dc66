"""experiments.distributions: histograms with their theory (sde kind)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("distributions", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("distributions")
