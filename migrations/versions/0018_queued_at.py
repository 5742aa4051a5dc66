"""experiments.queued_at: when a job's current attempt was queued (created, requeued after a lost or handed-back
attempt, or continued). A study's ETA (store.study_eta) crosses a gap between its runs only when one of its children
was waiting through it; from created_at alone, a continued or requeued child could not say when it had waited, and
the pace of a study whose children were continued started over at every gap. Rows queued before: created_at for a
job on its first attempt, updated_at (its requeue's) for one queued again, else started_at (its wait unknown).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE experiments SET queued_at = CASE WHEN attempts <= 1 THEN created_at "
               "WHEN status = 'queued' THEN updated_at ELSE started_at END")


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("queued_at")
