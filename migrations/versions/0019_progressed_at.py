"""experiments.progressed_at: when the current attempt last wrote its step (a progress report). An experiment's ETA
(store.jobs.estimated_finish) is that time plus the steps then left at the attempt's pace; from updated_at, which an
edit of the name, tags or note and a cancel request move too, an edit 2 s after a write at 2% moved the ETA by
~200 s. Rows stored before: updated_at where the attempt has a pace (it reported), else null.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("progressed_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE experiments SET progressed_at = updated_at WHERE pace_started_at IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("progressed_at")
