"""The pointer read of loadTable on PostgreSQL, awaited on the event loop instead of run on a thread.

A blocking read is handed to a worker thread (``api.wire.blocking``). On PostgreSQL that hop cost
more than the read itself: measured here, 88 us of process CPU per read through a thread against
42 us awaited on psycopg's asyncio connection, and loadTable is the hottest route. So the hot read
alone keeps a few asyncio connections of its own; everything else (writes, the CAS, lists) stays on
SQLAlchemy's pool.

Hand-written rather than a pool library because it needs so little (a bounded set of idle
connections, in autocommit, bound to the server's event loop) and psycopg's pool is not a
dependency. A read that fails on a pooled connection (the server closed it: a restart, a failover)
drops every idle connection, which the server closed as well, and is tried once more on a new one,
as a read may be; a failure there is a 503 like every other database error (``sql.translate``).
A connection whose read was cancelled or failed is closed, never pooled again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import sqlalchemy as sa

from catalog.database.sql import Compiled, translate

CONNECT_TIMEOUT_SECONDS = 5
# At most this many per process (fewer when CATALOG_DB_POOL_SIZE is smaller): a read holds its
# connection for one round trip, so a few serve every load one event loop can have in flight.
CONNECTIONS = 8


class AsyncReads:
    """Up to ``size`` asyncio connections (made when first needed) for one precompiled read."""

    def __init__(self, url: sa.URL, size: int) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._size = size
        self._idle: list[psycopg.AsyncConnection] = []
        self._slots: asyncio.Semaphore | None = None  # made in the event loop that uses it

    async def fetch_one(self, query: Compiled, values: dict[str, object]) -> tuple | None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._size)
        async with self._slots:
            for attempt in (1, 2):
                pooled = attempt == 1 and bool(self._idle)
                conn = None
                try:
                    conn = self._idle.pop() if pooled else await self._connect()
                    cursor = await conn.execute(query.sql, query.parameters(values))
                    row = await cursor.fetchone()
                except psycopg.Error as e:  # translated as every database error (a 503 for a schema not
                    _close(conn)  # migrated, say); closed: its state is not worth knowing
                    if pooled and isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)):
                        self.close()  # the server closed it, so it did the other idle ones: a new one
                        continue
                    translated = translate(e)
                    if translated is None:
                        raise
                    raise translated from e
                except BaseException:  # cancelled, or a bug: the connection's state is unknown
                    _close(conn)
                    raise
                self._idle.append(conn)
                return row
        raise AssertionError("unreachable")

    async def _connect(self) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
        )

    def close(self) -> None:
        while self._idle:
            _close(self._idle.pop())


def _close(conn: Any) -> None:
    """Close without awaiting (also from a cancelled task): the socket goes at once."""
    if conn is not None:
        conn.pgconn.finish()


def for_engine(engine: sa.Engine, size: int) -> AsyncReads | None:
    """Async reads for a PostgreSQL engine on psycopg (3); None for any other database or driver."""
    if engine.dialect.name != "postgresql" or engine.dialect.driver != "psycopg":
        return None
    return AsyncReads(engine.url, size)
