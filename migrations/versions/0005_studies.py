"""Studies: the studies table, and the study columns of experiments (study_id, index, point, seed, values)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner_id", sa.String(32), sa.ForeignKey("users.id"), nullable=True),
        sa.Column("name", sa.String(200)),
        sa.Column("visibility", sa.String(8), nullable=False, server_default="private"),
        sa.Column("priority", sa.Integer, nullable=False, server_default="1"),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("axes", sa.JSON, nullable=False),
        sa.Column("children", sa.Integer, nullable=False),
        sa.Column("points", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("revision", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_studies_owner_id", "studies", ["owner_id"])
    op.create_index("ix_studies_created_at", "studies", ["created_at"])
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("study_id", sa.String(32)))
        batch.add_column(sa.Column("study_index", sa.Integer))
        batch.add_column(sa.Column("study_point", sa.Integer))
        batch.add_column(sa.Column("study_seed", sa.BigInteger))
        batch.add_column(sa.Column("study_values", sa.JSON))
        batch.create_foreign_key("fk_experiments_study_id_studies", "studies", ["study_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_index("ix_experiments_study_id", ["study_id"])


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_study_id")
        batch.drop_constraint("fk_experiments_study_id_studies", type_="foreignkey")
        for column in ("study_values", "study_seed", "study_point", "study_index", "study_id"):
            batch.drop_column(column)
    op.drop_index("ix_studies_created_at", "studies")
    op.drop_index("ix_studies_owner_id", "studies")
    op.drop_table("studies")
