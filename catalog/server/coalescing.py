"""One socket write per response: the writes a connection makes within one turn of the event loop
go out together, in one ``writelines`` (one ``writev``, no copy), at the end of that turn.

uvicorn writes a response's head when the app sends ``http.response.start`` and its body when the
app sends ``http.response.body``, each with its own ``transport.write``: two system calls per
response (issue 27: the send was the largest share of the server's GIL time on commits). Litestar
sends both messages in one step of the request's task, so deferring a write to the end of the
loop's current turn joins them. Measured: loadTable CPU -11 to -15%, where sending both as soon as
the body is written bought -2.5 to -5.5% (``docs/performance.md``; probably because the request
also finishes, access line and metrics, before its client is woken). The cost: a response leaves
at the end of the loop's turn, not mid-turn. Anything that ends the connection (``close``,
``write_eof``) writes what is pending first; ``abort`` drops it, as it drops the transport's own
buffer.

Guarded by ``tests/test_coalescing.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Coalescing:
    """A transport that defers its writes to the end of the loop's turn (see the module docstring);
    everything else is the wrapped transport's."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(data)

    def writelines(self, data: Any) -> None:
        for chunk in data:
            self.write(chunk)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if not pending or self._transport.is_closing():
            return
        if len(pending) == 1:
            self._transport.write(pending[0])
        else:
            self._transport.writelines(pending)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(b) for b in self._pending or ())

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
