"""Alembic environment: run with the connection handed over by cutlass_nm.store.db.upgrade."""

from alembic import context

from cutlass_nm.store.schema import Base

connection = context.config.attributes["connection"]
# Our own version table: Optuna's RDB storage keeps its "alembic_version" in the same database.
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                  version_table="cutlass_nm_alembic_version")
with context.begin_transaction():
    context.run_migrations()
