"""LeanCall as its connection feeds it (`_arrived`, `_end`): piped, held, read in batches."""

from __future__ import annotations

import asyncio

from smg.pipeline.backends.grpc_call import LeanCall


class Host:
    """A connection as a call sees it: what it credited and how often it was asked to write."""

    def __init__(self) -> None:
        self.credited: list[tuple[int, int]] = []
        self.flushes = 0

    def credit(self, sid: int, nbytes: int) -> None:
        self.credited.append((sid, nbytes))

    def flush_soon(self) -> None:
        self.flushes += 1

    def cancel_stream(self, sid: int) -> None:
        raise AssertionError("not reset here")


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[str, object]] = []

    def messages(self, messages: list[bytes], size: int) -> None:
        self.got.append(("messages", (list(messages), size)))

    def ended(self, status: str, details: str) -> None:
        self.got.append(("ended", status))


def a_call(loop: asyncio.AbstractEventLoop | None = None) -> tuple[LeanCall, Host]:
    call, host = LeanCall(loop), Host()  # (a piped call needs no loop)
    call._conn, call._sid = host, 3  # type: ignore[assignment]
    return call, host


def test_a_piped_call_gets_each_read_at_once_and_credits_it() -> None:
    call, host = a_call()
    sink = Sink()
    call.pipe(sink)
    call._arrived([b"ab", b"c"])
    assert sink.got == [("messages", ([b"ab", b"c"], 3))]
    assert host.credited == [(3, 3 + 2 * 5)]  # the payloads and their 5-byte prefixes
    call._arrived([b"d"])
    call._end("OK")
    assert sink.got[1:] == [("messages", ([b"d"], 1)), ("ended", "OK")]
    assert host.credited[1:] == [(3, 6)]


def test_a_held_call_keeps_what_arrives_uncredited_until_released() -> None:
    call, host = a_call()
    call._arrived([b"early"])  # before the pipe: kept
    sink = Sink()
    call.pipe(sink)
    assert sink.got == [("messages", ([b"early"], 5))] and host.credited == [(3, 10)]
    call.hold()
    call._arrived([b"x", b"yy"])
    call._arrived([b"zzz"])
    call._end("OK")
    assert sink.got[1:] == [] and host.credited[1:] == []  # nothing read, nothing credited
    call.release()
    assert sink.got[1:] == [("messages", ([b"x", b"yy", b"zzz"], 6)), ("ended", "OK")]
    assert host.credited[1:] == [(3, 6 + 3 * 5)]


def test_an_unpiped_call_reads_what_arrived_as_one_batch() -> None:
    loop = asyncio.new_event_loop()
    call, host = a_call(loop)
    call._arrived([b"a"])
    call._arrived([b"b", b"c"])
    call._end("OK")
    assert loop.run_until_complete(call.read_batch()) == [b"a", b"b", b"c"]
    assert loop.run_until_complete(call.read_batch()) == []
    assert host.credited == [(3, 3 + 3 * 5)]
    loop.close()
