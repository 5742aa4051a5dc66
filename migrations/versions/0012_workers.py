"""Workers: one row per worker process, its queues, whether it runs a job and when it was last seen (on the
database's clock): the processes a claimer divides a study's children by; and write_probe, where the
probes try a write

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(240), primary_key=True),
        sa.Column("queues", sa.String(200), nullable=False),
        sa.Column("busy", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("study_id", sa.String(32), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_workers_seen_at", "workers", ["seen_at"])
    # always empty: /healthz and /readyz try a write here (rolled back) to see whether the disk has space
    op.create_table("write_probe", sa.Column("id", sa.Integer, primary_key=True), sa.Column("data", sa.LargeBinary))


def downgrade() -> None:
    op.drop_table("write_probe")
    op.drop_index("ix_workers_seen_at", "workers")
    op.drop_table("workers")
