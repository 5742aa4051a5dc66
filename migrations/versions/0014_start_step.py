"""experiments.start_step: the step a job's current attempt started from (a checkpoint's, else 0). A resumed or
continued job's pace is (step − start_step) / (now − started_at); from its whole progress since the resumed
attempt's start its ETA ran ahead (a job continued from half way showed a fifth to a seventh of the time left).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("start_step", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("start_step")
