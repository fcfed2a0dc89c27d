"""The in-flight table's wait for the last request (the drain's wait, smg/flow/inflight.py)."""

from __future__ import annotations

import asyncio

import pytest

from smg.flow.inflight import InFlight

pytestmark = pytest.mark.unit


async def test_wait_empty_returns_at_once_when_nothing_runs() -> None:
    table = InFlight()
    await asyncio.wait_for(table.wait_empty(), 1.0)


async def test_every_waiter_wakes_when_the_last_request_ends() -> None:
    table = InFlight()
    release = asyncio.Event()
    added: list[asyncio.Task[object]] = []

    async def request() -> None:
        task = table.add(0.0)
        added.append(task)
        await release.wait()
        table.remove(task)

    one, two = asyncio.create_task(request()), asyncio.create_task(request())
    await asyncio.sleep(0)
    assert len(table) == 2 and table.ages(1.5) == [1.5, 1.5]
    gave_up = asyncio.create_task(asyncio.wait_for(table.wait_empty(), 0.01))
    waiter = asyncio.create_task(table.wait_empty())
    with pytest.raises(TimeoutError):
        await gave_up  # its cancellation leaves the other waiter waiting
    await asyncio.sleep(0)
    assert not waiter.done()
    release.set()
    await asyncio.wait_for(waiter, 1.0)
    await asyncio.gather(one, two)
    assert len(table) == 0 and table._waiters == []
