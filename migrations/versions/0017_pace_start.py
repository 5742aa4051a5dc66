"""experiments.pace_started_at and pace_start_step: when and at which step a job's current attempt first reported
progress, its set-up done. Its pace is (step − pace_start_step) / (now − pace_started_at); from the attempt's
start (started_at, start_step) it counted the set-up as steps' time: a 1000-step train job whose data, model and
checks took 2.4 s of its 9 s showed 47 s left at its first report, with 6 s to go.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("pace_started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("pace_start_step", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("pace_start_step")
        batch.drop_column("pace_started_at")
