import asyncio

import pytest

from smg.clock import FakeClock, settle
from smg.errors import ApiError
from smg.flow.admission import Admission


async def test_permits_up_to_limit_then_queue_then_429() -> None:
    clock = FakeClock()
    adm = Admission(limit=2, queue_size=1, timeout_s=5.0, clock=clock)
    await adm.acquire()
    await adm.acquire()
    assert adm.active == 2
    waiter = asyncio.ensure_future(adm.acquire())
    await settle()
    assert adm.queued == 1 and not waiter.done()
    with pytest.raises(ApiError) as full:
        await adm.acquire()
    assert full.value.status == 429 and full.value.code == "admission_queue_full"
    adm.release()  # the permit moves straight to the waiter
    await settle()
    assert waiter.done() and waiter.exception() is None
    assert adm.active == 2 and adm.queued == 0


async def test_queue_timeout_is_408_on_the_injected_clock() -> None:
    clock = FakeClock()
    adm = Admission(limit=1, queue_size=4, timeout_s=3.0, clock=clock)
    await adm.acquire()
    waiter = asyncio.ensure_future(adm.acquire())
    await clock.advance(2.9)
    assert not waiter.done()
    await clock.advance(0.2)
    assert waiter.done()
    err = waiter.exception()
    assert isinstance(err, ApiError) and err.status == 408 and err.code == "admission_queue_timeout"
    assert adm.queued == 0
    adm.release()
    assert adm.active == 0


async def test_fifo_order_and_cancelled_waiter_passes_permit_on() -> None:
    clock = FakeClock()
    adm = Admission(limit=1, queue_size=4, timeout_s=30.0, clock=clock)
    await adm.acquire()
    order: list[str] = []

    async def take(name: str) -> None:
        await adm.acquire()
        order.append(name)

    first = asyncio.ensure_future(take("first"))
    second = asyncio.ensure_future(take("second"))
    await settle()
    first.cancel()
    await settle()
    adm.release()
    await settle()
    assert order == ["second"]
    assert adm.active == 1
    await second


async def test_zero_limit_means_unlimited() -> None:
    adm = Admission(limit=0, queue_size=0, timeout_s=1.0, clock=FakeClock())
    for _ in range(100):
        await adm.acquire()
    assert adm.active == 100


async def test_close_answers_the_queued_and_refuses_new_ones_with_503() -> None:
    clock = FakeClock()
    adm = Admission(limit=1, queue_size=4, timeout_s=30.0, clock=clock)
    await adm.acquire()
    queued = asyncio.ensure_future(adm.acquire())
    await settle()
    adm.close()
    await settle()
    err = queued.exception()
    assert isinstance(err, ApiError) and err.status == 503 and err.code == "shutting_down"
    with pytest.raises(ApiError) as late:
        await adm.acquire()
    assert late.value.code == "shutting_down"
    assert adm.queued == 0 and adm.active == 1  # the one in flight keeps its permit
    adm.release()
    assert adm.active == 0
