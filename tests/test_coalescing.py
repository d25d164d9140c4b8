"""Unit tests (pure logic, no server) of ``server.coalescing``: the writes of one turn of the event
loop leave in one ``writelines``, in order, and nothing written is lost or reordered by a close."""

from __future__ import annotations

import asyncio

from catalog.server.coalescing import Coalescing


class Recorded:
    """A transport that records what reaches it (the socket's system calls, one per entry)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", [data]))

    def writelines(self, data: list[bytes]) -> None:
        self.calls.append(("writelines", list(data)))

    def write_eof(self) -> None:
        self.calls.append(("eof", []))

    def close(self) -> None:
        self.calls.append(("close", []))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", []))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def run(steps):
    async def main():
        recorded = Recorded()
        steps(Coalescing(recorded, asyncio.get_running_loop()), recorded)
        await asyncio.sleep(0)  # the end of the turn
        await asyncio.sleep(0)
        return recorded.calls

    return asyncio.run(main())


def test_a_head_and_body_written_in_one_turn_leave_in_one_call_in_order():
    def steps(t, _):
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"{}")

    assert run(steps) == [("writelines", [b"HTTP/1.1 200 OK\r\n\r\n", b"{}"])]


def test_a_lone_write_leaves_as_it_is_at_the_end_of_the_turn():
    def steps(t, recorded):
        t.write(b"HTTP/1.1 304 Not Modified\r\n\r\n")
        assert recorded.calls == []  # not yet: at the end of the turn
        assert t.get_write_buffer_size() == 7 + 29

    assert run(steps) == [("write", [b"HTTP/1.1 304 Not Modified\r\n\r\n"])]


def test_close_and_eof_write_what_is_pending_first_and_abort_drops_it():
    def closing(t, _):
        t.write(b"a")
        t.write(b"b")
        t.close()

    assert run(closing) == [("writelines", [b"a", b"b"]), ("close", [])]

    def eof(t, _):
        t.writelines([b"a"])
        t.write_eof()

    assert run(eof) == [("write", [b"a"]), ("eof", [])]

    def aborting(t, _):
        t.write(b"a")
        t.abort()

    assert run(aborting) == [("abort", [])]


def test_nothing_is_written_to_a_transport_already_closing_and_the_rest_is_the_transports():
    def steps(t, recorded):
        t.write(b"a")
        recorded.closing = True  # the peer went away in the meantime
        assert t.get_extra_info("peername") == "info peername"

    assert run(steps) == []
