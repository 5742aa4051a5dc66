"""Checkpoints of ended jobs dropped: a job whose worker was lost ended cancelled (a cancel was requested) or
failed (its attempts cap) by the sweeper kept its last checkpoint for good, though nothing resumes an ended
job (a succeeded one keeps its final checkpoint only with keep_checkpoint, to continue from: untouched).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM checkpoints WHERE experiment_id IN "
               "(SELECT id FROM experiments WHERE status IN ('failed', 'cancelled'))")


def downgrade() -> None:
    pass   # what was dropped was unreachable
