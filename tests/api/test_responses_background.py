"""The background machinery in process: the bounded event log its readers follow, and the
bound on background responses."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from smg.api.responses_background import Background, EventLog, Job, split_frames
from smg.errors import ApiError
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_request import parse_responses


def frames(*seqs: int, pad: int = 0) -> bytes:
    out = b""
    for seq in seqs:
        payload = {"type": "response.output_text.delta", "delta": "x" * pad, "sequence_number": seq}
        out += b"event: response.output_text.delta\ndata: " + orjson.dumps(payload) + b"\n\n"
    return out


def test_frames_are_split_with_their_sequence_numbers() -> None:
    got = split_frames(frames(0, 1, 2))
    assert [seq for seq, _ in got] == [0, 1, 2]
    assert b"".join(f for _, f in got) == frames(0, 1, 2)


async def read(log: EventLog, after: int) -> list[int]:
    seqs: list[int] = []
    async for chunk in log.follow(after):
        seqs += [seq for seq, _ in split_frames(chunk)]
    return seqs


async def test_readers_follow_the_log_as_frames_come_until_it_ends() -> None:
    log = EventLog()
    await log.write(frames(0, 1))
    early = asyncio.create_task(read(log, -1))
    late = asyncio.create_task(read(log, 1))
    await asyncio.sleep(0.01)
    assert not early.done()  # waiting for more
    await log.write(frames(2))
    await log.write(frames(3, 4))
    await log.end()
    assert await asyncio.wait_for(early, 2.0) == [0, 1, 2, 3, 4]
    assert await asyncio.wait_for(late, 2.0) == [2, 3, 4]
    assert await asyncio.wait_for(read(log, 4), 2.0) == []


async def test_the_log_is_bounded_and_a_replay_from_dropped_frames_is_400() -> None:
    one = len(frames(0, pad=100))
    log = EventLog(max_bytes=3 * one)
    for seq in range(10):
        await log.write(frames(seq, pad=100))
    assert log.size <= 3 * one and [s for s, _ in log.frames] == [7, 8, 9]
    await log.end()
    with pytest.raises(ApiError) as info:
        await read(log, 2)
    assert info.value.status == 400 and info.value.code == "replay_unavailable"
    assert await read(log, 6) == [7, 8, 9]


async def test_background_responses_are_bounded_and_run_in_its_task_group() -> None:
    bg = Background(limit=1)
    renderer = ResponsesRenderer(parse_responses({"model": "m", "input": "x"}), "resp_1")
    with pytest.raises(ApiError) as info:  # not serving
        bg.check()
    assert info.value.status == 503
    release = asyncio.Event()
    ran: list[str] = []

    async def run(job: Job) -> None:
        await job.render.stream.write(frames(0))
        await release.wait()
        ran.append("done")

    async with bg.serving():
        job = bg.start(("t", "resp_1"), renderer, run)
        with pytest.raises(ApiError) as info:
            bg.start(("t", "resp_2"), renderer, run)
        assert info.value.status == 429 and info.value.code == "too_many_background_responses"
        assert info.value.type == "rate_limit_error"
        release.set()
        assert await asyncio.wait_for(read(job.events, -1), 2.0) == [0]
        await asyncio.sleep(0)
        assert ("t", "resp_1") not in bg.jobs  # done: a new one may start
        blocked = bg.start(("t", "resp_3"), renderer, lambda job: asyncio.Event().wait())
    assert ran == ["done"]
    assert blocked.task is not None and blocked.task.cancelled()  # ended with the serving
