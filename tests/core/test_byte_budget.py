"""The request-body budget: the pure core (who gets in, in which order) and its asyncio shell
(deadline, cancellation) on a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.api.body_budget import BodyBudget
from smg.clock import FakeClock, settle
from smg.core.byte_budget import ByteBudget
from smg.errors import ApiError

CAP = 6400  # small bodies: up to 100 bytes; large ones hold at most 4800 together


def test_sizes_of_the_classes() -> None:
    b = ByteBudget(CAP)
    assert (b.small_max, b.large_cap, b.largest) == (100, 4800, 4800)
    assert not b.is_large(100) and b.is_large(101)


def test_large_bodies_leave_a_quarter_for_small_ones() -> None:
    b = ByteBudget(CAP)
    assert b.request(1, 3000) and not b.request(2, 3000)  # 6000 > 4800 large: queued
    assert b.waiting == 1
    for t in range(10, 26):  # sixteen small bodies of 100 still fit next to 3000 large
        assert b.request(t, 100), t
    assert b.held == 4600 and b.large_held == 3000


def test_a_small_body_never_waits_behind_a_large_one() -> None:
    b = ByteBudget(CAP)
    assert b.request(1, 4000)
    assert not b.request(2, 2000)  # large, does not fit: waits
    assert b.request(3, 50)  # small: in at once, although a large one waits
    assert b.release(4000) == [2]  # the large waiter gets in when room comes
    assert b.held == 2050


def test_fifo_within_a_class() -> None:
    b = ByteBudget(CAP)
    assert b.request(1, 4000)
    assert not b.request(2, 2000)
    assert not b.request(3, 500)  # would fit next to 4000, but a larger one came first
    assert b.release(4000) == [2, 3]


def test_small_bodies_queue_in_order_once_small_ones_fill_the_budget() -> None:
    b = ByteBudget(1000)  # small: up to 15 bytes; large: up to 750 together
    for t in range(66):
        assert b.request(t, 15)
    assert not b.request(100, 15)  # 990 + 15 > 1000
    assert not b.request(101, 5)  # would fit, but FIFO among small ones: behind ticket 100
    assert b.release(15) == [100, 101]  # 975 + 15 + 5 = 995


def test_shrink_moves_a_grant_to_its_true_size_and_class() -> None:
    b = ByteBudget(CAP)
    assert b.request(1, 4800)  # a body of unknown length reserves the largest
    assert not b.request(2, 1000)
    assert b.shrink(4800, 40) == [2]  # it was 40 bytes: small now, and the waiter gets in
    assert (b.held, b.large_held) == (1040, 1000)
    assert b.release(40) == [] and b.release(1000) == []
    assert (b.held, b.large_held) == (0, 0)


def test_cancel_leaves_the_queue_and_lets_the_next_one_in() -> None:
    b = ByteBudget(CAP)
    assert b.request(1, 4000)
    assert not b.request(2, 4000)
    assert not b.request(3, 700)  # behind 2 (FIFO among large ones)
    assert b.cancel(2) == [3]
    assert b.cancel(2) == []  # not queued any more: nothing happens
    assert b.waiting == 0


def test_misuse_raises() -> None:
    b = ByteBudget(CAP)
    with pytest.raises(ValueError):
        b.request(1, 4801)  # more than the largest grant: the caller answers 413 instead
    with pytest.raises(ValueError):
        b.release(10)
    with pytest.raises(ValueError):
        ByteBudget(0)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from("rqc"), st.integers(1, 4800)), max_size=60))
def test_invariants_hold_under_any_sequence(ops: list[tuple[str, int]]) -> None:
    """Held bytes never pass the capacity or the large share; every grant is given back
    exactly once; a queue with room for its head never stays queued; a request is granted at
    once exactly when it fits and nothing of its class waits."""
    b = ByteBudget(CAP)
    held: dict[int, int] = {}  # ticket -> bytes granted
    queued: dict[int, int] = {}
    for i, (op, n) in enumerate(ops):
        if op == "r":
            # the rule `request` writes out inline: room for it, and none of its class waiting
            now = b.fits(n) and not any((m > 100) == (n > 100) for m in queued.values())
            assert b.request(i, n) is now
            if now:
                held[i] = n
            else:
                queued[i] = n
        elif op == "q" and held:
            ticket = min(held)
            for t in b.release(held.pop(ticket)):
                held[t] = queued.pop(t)
        elif op == "c" and queued:
            ticket = min(queued)
            queued.pop(ticket)
            for t in b.cancel(ticket):
                held[t] = queued.pop(t)
        assert b.held == sum(held.values()) <= CAP
        assert b.large_held == sum(v for v in held.values() if v > 100) <= 4800
        assert b.waiting == len(queued)
        for large in (False, True):
            heads = [n for n in queued.values() if (n > 100) == large]
            assert not heads or not b.fits(heads[0])
    while held:
        for t in b.release(held.pop(min(held))):
            held[t] = queued.pop(t)
    assert not queued  # with everything given back, every waiter got in
    assert b.held == 0 and b.large_held == 0


# --- the shell -----------------------------------------------------------------------------------


async def busy_budget() -> tuple[FakeClock, BodyBudget]:
    """A budget with 4000 of its 4800 large bytes taken, waiting 5 s at most."""
    clock = FakeClock()
    budget = BodyBudget(CAP, 5.0, clock)
    await budget.acquire(4000)
    return clock, budget


async def test_a_body_that_can_never_fit_gets_413_at_once() -> None:
    budget = BodyBudget(CAP, 5.0, FakeClock())
    with pytest.raises(ApiError) as info:
        await budget.acquire(4801)
    assert info.value.status == 413 and info.value.code == "request_body_too_large"
    assert "max_buffered_request_bytes" in info.value.message


async def test_waiting_for_room_ends_with_503_at_the_deadline() -> None:
    clock, budget = await busy_budget()
    waiter = asyncio.ensure_future(budget.acquire(2000))
    small = asyncio.ensure_future(budget.acquire(2000))  # large too (> 100): queued behind
    await settle()
    assert budget.core.waiting == 2
    await clock.advance(4.9)
    assert not waiter.done()
    await clock.advance(0.2)
    err = waiter.exception()
    assert isinstance(err, ApiError) and err.status == 503
    assert err.code == "request_body_budget_timeout"
    assert small.done() and isinstance(small.exception(), ApiError)  # its deadline too
    assert budget.core.waiting == 0 and budget.core.held == 4000


async def test_room_that_comes_in_time_wakes_the_waiter() -> None:
    clock, budget = await busy_budget()
    waiter = asyncio.ensure_future(budget.acquire(2000))
    await clock.advance(1.0)
    budget.release(4000)
    await settle()
    assert waiter.done() and waiter.exception() is None
    assert budget.core.held == 2000
    await clock.advance(10.0)  # its timer was cancelled: nothing fires
    assert budget.core.held == 2000


async def test_a_cancelled_waiter_leaves_and_passes_the_room_on() -> None:
    _, budget = await busy_budget()
    first = asyncio.ensure_future(budget.acquire(4000))
    second = asyncio.ensure_future(budget.acquire(700))
    await settle()
    first.cancel()  # the client left while waiting
    await settle()
    assert second.done() and second.exception() is None
    assert budget.core.held == 4700 and budget.core.waiting == 0


async def test_a_grant_that_races_a_cancel_is_given_back() -> None:
    _, budget = await busy_budget()
    waiter = asyncio.ensure_future(budget.acquire(4000))
    await settle()
    budget.release(4000)  # grants the waiter...
    waiter.cancel()  # ...which is cancelled before it runs again
    await settle()
    assert waiter.cancelled()
    assert budget.core.held == 0
