"""Alembic environment: run with the connection handed over by cutlass_nm.store.db.upgrade."""

from alembic import context

from cutlass_nm.store.schema import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
