"""Tags and notes: experiments.note, and experiment_tags (one row per tag, indexed by tag for the filter)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("note", sa.Text, nullable=True))
    op.create_table(
        "experiment_tags",
        sa.Column("experiment_id", sa.String(32), sa.ForeignKey("experiments.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
    )
    op.create_index("ix_experiment_tags_tag", "experiment_tags", ["tag"])


def downgrade() -> None:
    op.drop_index("ix_experiment_tags_tag", "experiment_tags")
    op.drop_table("experiment_tags")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("note")
