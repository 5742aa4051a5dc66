"""Compare studies: studies.kind (expand | compare) and study_members, the existing experiments a
compare study groups (by position; no foreign key to experiments, so a deleted member stays listed)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="expand"))
    op.create_table(
        "study_members",
        sa.Column("study_id", sa.String(32), sa.ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.String(32), nullable=False),
    )
    op.create_index("ix_study_members_experiment_id", "study_members", ["experiment_id"])


def downgrade() -> None:
    op.drop_index("ix_study_members_experiment_id", "study_members")
    op.drop_table("study_members")
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("kind")
