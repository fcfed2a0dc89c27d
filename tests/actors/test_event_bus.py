"""EventBus on a fake clock: order, what a full subscriber gets (its overflow policy), a dead or
crashing subscriber, shutdown. No sockets, no sleeps: `settle()` lets the mailboxes drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.event_log import EventLog, worker_snapshot

from smg.actors.event_bus import Delivery, EventBus
from smg.actors.mailbox import Overflow
from smg.actors.messages import (
    MeshDocumentsChanged,
    Resync,
    WorkerAdded,
    WorkerHealthChanged,
    WorkerRemoved,
)
from smg.actors.runtime import Actor, ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock, settle
from smg.core.health import HealthStatus

LIFECYCLE = (WorkerAdded, WorkerRemoved, WorkerHealthChanged)


def added(wid: str) -> WorkerAdded:
    return WorkerAdded(worker_snapshot(wid), imported=False)


def removed(wid: str) -> WorkerRemoved:
    return WorkerRemoved(worker_snapshot(wid), imported=False)


def names(events: list[Any]) -> list[str]:
    return [
        type(e).__name__ + (f":{e.worker.worker_id}" if hasattr(e, "worker") else "")
        for e in events
    ]


class Gated(Actor):
    """Keeps what it is told, but waits at `gate` before each message: a slow subscriber."""

    def __init__(self, into: list[Any], gate: asyncio.Event) -> None:
        super().__init__()
        self.into = into
        self.gate = gate

    async def handle(self, message: Any) -> Any:
        await self.gate.wait()
        self.into.append(message)
        return None


class Fragile(Actor):
    """Subscribes itself; crashes on the event of worker "boom" (its supervisor restarts it)."""

    incarnations = 0

    def __init__(self, bus: EventBus, into: list[Any]) -> None:
        super().__init__()
        self.bus = bus
        self.into = into

    async def on_start(self) -> None:
        Fragile.incarnations += 1
        self.bus.subscribe(self.ref, (WorkerAdded,))

    async def handle(self, message: Any) -> Any:
        if message.worker.worker_id == "boom":
            raise RuntimeError("a subscriber's bug")
        self.into.append(message)
        return None


@pytest.fixture
async def sup() -> AsyncIterator[Supervisor]:
    async with Supervisor("events", clock=FakeClock()) as s:
        yield s


@pytest.fixture
async def gate(sup: Supervisor) -> AsyncIterator[asyncio.Event]:
    """What `Gated` subscribers wait at; opened at the end so a failed test cannot hang."""
    event = asyncio.Event()
    yield event
    event.set()


async def log_actor(sup: Supervisor, name: str, into: list[Any], **kw: Any) -> ActorRef:
    return await sup.start_child(ChildSpec(name, lambda: EventLog(into), **kw))


async def test_each_subscriber_gets_its_types_in_publish_order(sup: Supervisor) -> None:
    bus = EventBus()
    every: list[Any] = []
    removals: list[Any] = []
    bus.subscribe(await log_actor(sup, "every", every), LIFECYCLE)
    bus.subscribe(await log_actor(sup, "removals", removals), (WorkerRemoved,), Delivery.DROP)
    sequence = [
        added("a"),
        WorkerHealthChanged(worker_snapshot("a"), HealthStatus.READY),
        added("b"),
        removed("a"),
        MeshDocumentsChanged(frozenset({"workers"})),  # nobody subscribed: nobody gets it
        removed("b"),
    ]
    reached = [bus.publish(e) for e in sequence]
    assert reached == [1, 1, 1, 2, 0, 2]
    await settle()
    assert every == [e for e in sequence if isinstance(e, LIFECYCLE)]
    assert names(removals) == ["WorkerRemoved:a", "WorkerRemoved:b"]
    assert all(s.dropped == 0 for s in bus.subscriptions())


async def test_subscribing_again_replaces_the_subscription(sup: Supervisor) -> None:
    bus = EventBus()
    got: list[Any] = []
    ref = await log_actor(sup, "log", got)
    bus.subscribe(ref, (WorkerAdded,))
    bus.subscribe(ref, (WorkerRemoved,))  # a restarted actor subscribing in on_start
    bus.publish(added("a"))
    bus.publish(removed("a"))
    await settle()
    assert names(got) == ["WorkerRemoved:a"] and len(bus.subscriptions()) == 1


async def test_a_full_resync_subscriber_misses_events_and_then_reads_one_resync_first(
    sup: Supervisor,
    gate: asyncio.Event,
) -> None:
    """The publisher never waits; the slow subscriber gets one Resync per overflow, ahead of
    what is queued, and the others get everything."""
    bus = EventBus()
    slow: list[Any] = []
    fast: list[Any] = []
    slow_ref = await sup.start_child(ChildSpec("slow", lambda: Gated(slow, gate), capacity=2))
    slow_sub = bus.subscribe(slow_ref, LIFECYCLE, Delivery.RESYNC)
    bus.subscribe(await log_actor(sup, "fast", fast), LIFECYCLE)
    bus.publish(added("w0"))
    await settle()  # the slow one takes w0 and waits at its gate with it
    for i in range(1, 6):
        bus.publish(added(f"w{i}"))  # w1, w2 fit its mailbox; w3..w5 do not
    assert (slow_sub.delivered, slow_sub.dropped, slow_sub.resyncs) == (3, 3, 1)
    gate.set()
    await settle()
    assert names(slow) == ["WorkerAdded:w0", "Resync", "WorkerAdded:w1", "WorkerAdded:w2"]
    assert names(fast) == [f"WorkerAdded:w{i}" for i in range(6)]
    # an event that gets through ends the overflow: the next one sends a Resync again
    gate.clear()
    bus.publish(removed("w1"))
    await settle()
    for i in range(2, 6):
        bus.publish(removed(f"w{i}"))
    assert (slow_sub.dropped, slow_sub.resyncs) == (5, 2)
    gate.set()
    await settle()
    assert names(slow)[4:] == ["WorkerRemoved:w1", "Resync", "WorkerRemoved:w2", "WorkerRemoved:w3"]
    assert sum(isinstance(m, Resync) for m in slow) == 2


async def test_a_full_drop_subscriber_only_loses_the_events(
    sup: Supervisor, gate: asyncio.Event
) -> None:
    bus = EventBus()
    got: list[Any] = []
    ref = await sup.start_child(ChildSpec("metrics", lambda: Gated(got, gate), capacity=1))
    sub = bus.subscribe(ref, LIFECYCLE, Delivery.DROP)
    for i in range(4):
        bus.publish(added(f"w{i}"))
        if i == 0:
            await settle()  # w0 held at the gate; w1 queued; w2, w3 dropped
    gate.set()
    await settle()
    assert names(got) == ["WorkerAdded:w0", "WorkerAdded:w1"]
    assert (sub.delivered, sub.dropped, sub.resyncs) == (2, 2, 0)


async def test_a_drop_oldest_mailbox_keeps_the_newest_without_the_bus_noticing(
    sup: Supervisor,
    gate: asyncio.Event,
) -> None:
    """A subscriber built with `Overflow.DROP_OLDEST` (gossip-like news) never refuses: its own
    mailbox drops the oldest, so the bus counts every event as delivered."""
    bus = EventBus()
    got: list[Any] = []
    spec = ChildSpec("docs", lambda: Gated(got, gate), capacity=1, overflow=Overflow.DROP_OLDEST)
    sub = bus.subscribe(await sup.start_child(spec), (MeshDocumentsChanged,), Delivery.DROP)
    for ns in ("workers", "cache", "rate_limits"):
        bus.publish(MeshDocumentsChanged(frozenset({ns})))
        if ns == "workers":
            await settle()
    gate.set()
    await settle()
    assert [set(e.namespaces) for e in got] == [{"workers"}, {"rate_limits"}]
    assert (sub.delivered, sub.dropped) == (3, 0)


async def test_a_stopped_subscriber_is_dropped_and_the_others_still_hear(
    sup: Supervisor,
) -> None:
    bus = EventBus()
    gone: list[Any] = []
    kept: list[Any] = []
    dead = await log_actor(sup, "dead", gone)
    bus.subscribe(dead, LIFECYCLE)
    bus.subscribe(await log_actor(sup, "kept", kept), LIFECYCLE)
    dead.stop()
    await dead.wait_stopped()
    assert bus.publish(added("a")) == 1
    assert [s.ref for s in bus.subscriptions()] != [dead] and len(bus.subscriptions()) == 1
    await settle()
    assert gone == [] and names(kept) == ["WorkerAdded:a"]


async def test_a_crashed_subscriber_keeps_its_events_across_the_restart(
    sup: Supervisor,
) -> None:
    """Its supervisor restarts it over the same mailbox: what was published meanwhile waits for
    the new incarnation, which subscribes again (replacing, not adding)."""
    bus = EventBus()
    got: list[Any] = []
    Fragile.incarnations = 0
    await sup.start_child(ChildSpec("fragile", lambda: Fragile(bus, got)))
    for wid in ("a", "boom", "b", "c"):
        assert bus.publish(added(wid)) == 1  # published while it crashes and restarts
    await settle(20)
    assert Fragile.incarnations == 2
    assert names(got) == ["WorkerAdded:a", "WorkerAdded:b", "WorkerAdded:c"]
    assert len(bus.subscriptions()) == 1


async def test_after_close_nothing_is_delivered_or_subscribed(sup: Supervisor) -> None:
    bus = EventBus()
    got: list[Any] = []
    ref = await log_actor(sup, "log", got)
    bus.subscribe(ref, LIFECYCLE)
    bus.close()
    assert bus.publish(added("a")) == 0
    bus.subscribe(ref, LIFECYCLE)  # an actor restarting during shutdown
    assert bus.publish(added("b")) == 0 and bus.subscriptions() == ()
    await settle()
    assert got == []
