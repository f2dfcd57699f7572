"""Energy: joules per call, average watts and SM clock on measurements; a winner per objective.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PROBLEM = ("family", "pattern", "m_bucket", "n", "k", "dtype", "out_dtype", "layout", "bias", "alignment")
ENERGY = ("joules", "avg_power_w", "sm_clock_mhz")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as b:
        for col in ENERGY:
            b.add_column(sa.Column(col, sa.Float, nullable=True))
    with op.batch_alter_table("winners") as b:
        b.add_column(sa.Column("objective", sa.String(8), nullable=False, server_default="time"))
        b.add_column(sa.Column("score", sa.Float, nullable=True))
        b.drop_constraint("uq_winner", type_="unique")
        b.create_unique_constraint("uq_winner", ["environment_id", *PROBLEM, "objective"])
    op.execute("UPDATE winners SET score = p50_ms WHERE objective = 'time'")


def downgrade() -> None:
    op.execute("DELETE FROM winners WHERE objective <> 'time'")
    with op.batch_alter_table("winners") as b:
        b.drop_constraint("uq_winner", type_="unique")
        b.create_unique_constraint("uq_winner", ["environment_id", *PROBLEM])
        b.drop_column("score")
        b.drop_column("objective")
    with op.batch_alter_table("measurements") as b:
        for col in ENERGY:
            b.drop_column(col)
