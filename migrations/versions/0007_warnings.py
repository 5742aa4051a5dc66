"""Out-of-regime warnings of an experiment (smdengine.spec_warnings), written at submission

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("warnings", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("warnings")
