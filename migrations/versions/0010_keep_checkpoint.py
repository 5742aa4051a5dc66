"""experiments.keep_checkpoint: keep a finished run's final checkpoint, so that it can be continued

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("keep_checkpoint", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("keep_checkpoint")
