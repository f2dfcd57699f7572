"""Claims: one row per (study, config) measured, so that concurrent tuners never measure a config twice.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("study", sa.String(256), nullable=False),
        sa.Column("config_key", sa.String(512), nullable=False),
        sa.Column("host", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("study", "config_key", name="uq_claim"),
    )


def downgrade() -> None:
    op.drop_table("claims")
