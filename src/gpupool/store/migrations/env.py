"""Alembic environment: runs migrations on the URL given in the config."""

from alembic import context
from sqlalchemy import create_engine

from gpupool.store.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
engine = create_engine(url)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=url.startswith("sqlite"),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
