"""Streaming in gRPC mode writes one SSE write per batch of engine events that arrived together,
never holds a frame back for a later batch, and sends the last batch with the closing frames and
the end of the body in one write."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson

from smg.flow import render
from smg.pipeline.backends.grpc_pool import EngineStream
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta
from smg.pipeline.output import OutputShaper, OutputSpec


def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    return "".join(chr(i) for i in ids)


class FakeResponse:
    def __init__(self, fail_after: int | None = None) -> None:
        self.writes: list[bytes] = []
        self.eof: bytes | None = None
        self.fail_after = fail_after

    async def prepare(self, request: Any) -> None:
        return None

    async def write(self, data: bytes) -> None:
        if self.fail_after is not None and len(self.writes) >= self.fail_after:
            raise ConnectionResetError
        self.writes.append(data)

    async def write_eof(self, data: bytes = b"") -> None:
        self.eof = data


def delta(text: str, done: int) -> TokenDelta:
    return TokenDelta(0, [ord(c) for c in text], 3, done)


async def run(batches: list[list[EngineEvent]], resp: FakeResponse) -> bool | None:
    async def agen() -> AsyncGenerator[list[EngineEvent], None]:
        for batch in batches[1:]:
            yield batch

    outcome: list[bool | None] = []
    spec = OutputSpec(response_id="chatcmpl-1", model="m", created=1, chat=True)
    engine = EngineStream(agen(), batches[0])
    shaper = OutputShaper(spec, decode)
    await render.stream(None, resp, engine, shaper, "chatcmpl-1", outcome.append)  # type: ignore[arg-type]
    return outcome[0]


def contents(data: bytes) -> list[object]:
    out: list[object] = []
    for line in data.split(b"\n\n"):
        if line.startswith(b"data: {"):
            choice = orjson.loads(line[6:])["choices"][0]
            out.append(choice["delta"].get("content", choice["finish_reason"]))
        elif line == b"data: [DONE]":
            out.append("[DONE]")
    return out


async def test_one_write_per_batch_and_the_last_batch_with_the_end() -> None:
    resp = FakeResponse()
    batches: list[list[EngineEvent]] = [
        [delta("a", 1)],
        [delta("b", 2), delta("c", 3), delta("d", 4)],
        [delta("e", 5)],
        [delta("f", 6), Finished(0, "length", 3, 6)],
    ]
    assert await run(batches, resp) is True
    assert [contents(w) for w in resp.writes] == [["", "a"], ["b", "c", "d"], ["e"]]
    assert resp.eof is not None and contents(resp.eof) == ["f", "length", "[DONE]"]


async def test_a_client_that_leaves_reports_no_outcome() -> None:
    resp = FakeResponse(fail_after=1)
    batches: list[list[EngineEvent]] = [[delta("a", 1)], [delta("b", 2)], [delta("c", 3)]]
    assert await run(batches, resp) is None
    assert resp.eof is None


async def test_a_whole_answer_stopped_early_leaves_no_async_generator_to_finalize() -> None:
    """`render.whole` stops reading once every choice is done: the events iterator it drops
    must not be an async generator, or the loop's finalizer hook schedules a task per request
    to close it."""
    finalized: list[object] = []
    old = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(firstiter=old.firstiter, finalizer=finalized.append)

    async def agen() -> AsyncGenerator[list[EngineEvent], None]:
        yield [delta("c", 3)]
        yield [Finished(0, "length", 3, 4)]
        yield [delta("never", 9)]

    try:
        engine = EngineStream(agen(), [delta("a", 1), delta("b", 2)])
        spec = OutputSpec(response_id="chatcmpl-1", model="m", created=1, chat=False)
        shaper = OutputShaper(spec, decode)
        outcome: list[bool | None] = []
        answer = await render.whole(engine, shaper, {}, "chatcmpl-1", outcome.append)
        await asyncio.sleep(0)
    finally:
        sys.set_asyncgen_hooks(*old)
    assert orjson.loads(answer.body)["choices"][0]["text"] == "abc"  # type: ignore[arg-type]
    assert outcome == [True]
    assert finalized == []
