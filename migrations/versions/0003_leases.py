"""Leases, attempts history, checkpoints and queues (a job system that loses nothing)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("queue", sa.String(16), nullable=False, server_default="cpu"))
        batch.add_column(sa.Column("lease_owner", sa.String(240)))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True)))
        batch.create_index("ix_experiments_queue", ["queue"])
        batch.create_index("ix_experiments_lease_expires_at", ["lease_expires_at"])
    op.create_table(
        "attempts",
        sa.Column("experiment_id", sa.String(32), sa.ForeignKey("experiments.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("worker", sa.String(240), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("outcome", sa.String(16)),
        sa.Column("resumed_from_step", sa.Integer),
    )
    op.create_table(
        "checkpoints",
        sa.Column("experiment_id", sa.String(32), sa.ForeignKey("experiments.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("n_points", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_table("attempts")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_lease_expires_at")
        batch.drop_index("ix_experiments_queue")
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
        batch.drop_column("queue")
