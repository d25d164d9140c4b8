"""The command-line flag of each setting that has one (the others are environment variables only).

A module of its own, importing nothing, so that the command line builds its parser (``--help``)
without the server's modules (``startup`` imports SQLAlchemy, Alembic, pydantic...)."""

FLAGS = {
    "database_url": "--database-url",
    "warehouse": "--warehouse",
    "host": "--host",
    "port": "--port",
    "workers": "--workers",
    "log_level": "--log-level",
}
