"""Initial schema: environments, measurements, winners.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

PROBLEM = ("family", "pattern", "m_bucket", "n", "k", "dtype", "out_dtype", "layout", "bias", "alignment")


def _problem_columns() -> list[sa.Column]:
    return [
        sa.Column("family", sa.String(32), nullable=False),
        sa.Column("pattern", sa.String(16), nullable=False),
        sa.Column("m_bucket", sa.Integer, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("dtype", sa.String(8), nullable=False),
        sa.Column("out_dtype", sa.String(8), nullable=False),
        sa.Column("layout", sa.String(8), nullable=False),
        sa.Column("bias", sa.Boolean, nullable=False),
        sa.Column("alignment", sa.Integer, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("hard_key", sa.String(64), nullable=False, index=True),
        sa.Column("soft_key", sa.String(64), nullable=False),
        sa.Column("gpu", sa.String(128), nullable=False),
        sa.Column("compute_capability", sa.String(8), nullable=False),
        sa.Column("sm_count", sa.Integer, nullable=False),
        sa.Column("l2_bytes", sa.BigInteger, nullable=False),
        sa.Column("cutlass_version", sa.String(32), nullable=False),
        sa.Column("nvcc_version", sa.String(64), nullable=False),
        sa.Column("template_hash", sa.String(64), nullable=False),
        sa.Column("driver", sa.String(32), nullable=False),
        sa.Column("torch_version", sa.String(64), nullable=False),
        sa.UniqueConstraint("hard_key", "soft_key", name="uq_environment"),
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uid", sa.String(36), nullable=False, unique=True),
        sa.Column("environment_id", sa.Integer, sa.ForeignKey("environments.id"), nullable=False, index=True),
        *_problem_columns(),
        sa.Column("m", sa.Integer, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("config_key", sa.String(512), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("p20_ms", sa.Float, nullable=True),
        sa.Column("p50_ms", sa.Float, nullable=True),
        sa.Column("p80_ms", sa.Float, nullable=True),
        sa.Column("iterations", sa.Integer, nullable=False),
        sa.Column("host", sa.String(128), nullable=False),
        sa.Column("study", sa.String(128), nullable=True),
        sa.Column("trial", sa.Integer, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "winners",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("environment_id", sa.Integer, sa.ForeignKey("environments.id"), nullable=False, index=True),
        *_problem_columns(),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("p50_ms", sa.Float, nullable=False),
        sa.Column("measurement_uid", sa.String(36), nullable=False),
        sa.UniqueConstraint("environment_id", *PROBLEM, name="uq_winner"),
    )


def downgrade() -> None:
    op.drop_table("winners")
    op.drop_table("measurements")
    op.drop_table("environments")
