"""The actor runtime on a fake clock: mailbox, tell/ask, crashes, supervision, shutdown.

No test sleeps for real: timers fire when the test advances the `FakeClock`, and `settle()` lets
the woken tasks run.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from smg.actors.mailbox import Mailbox, MailboxClosed, MailboxFull, Overflow
from smg.actors.runtime import Actor, ActorStopped, AskTimeout
from smg.actors.supervisor import ChildSpec, Strategy, Supervisor, SupervisorEscalation
from smg.clock import FakeClock, settle


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class World:
    """What the test actors report to: a start/stop log and every instance ever built."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.instances: dict[str, list[Probe]] = defaultdict(list)

    def spec(self, name: str, cls: type[Probe] | None = None, **kw: Any) -> ChildSpec:
        actor_cls = cls or Probe

        def make() -> Actor:
            actor = actor_cls(name, self)
            self.instances[name].append(actor)
            return actor

        return ChildSpec(name, make, **kw)

    def starts(self, name: str) -> int:
        return self.log.count(("start", name))

    def stops(self, name: str) -> int:
        return self.log.count(("stop", name))

    def latest(self, name: str) -> Probe:
        return self.instances[name][-1]


class Probe(Actor):
    """Records what it handles in `seen`; a few messages make it misbehave on purpose."""

    def __init__(self, name: str, world: World) -> None:
        super().__init__()
        self.name = name
        self.world = world
        self.seen: list[Any] = []

    async def on_start(self) -> None:
        self.world.log.append(("start", self.name))

    async def on_stop(self) -> None:
        self.world.log.append(("stop", self.name))

    async def handle(self, message: Any) -> Any:
        match message:
            case "get":
                return list(self.seen)
            case ("crash", why):
                raise RuntimeError(why)
            case ("fail-ask", key):
                raise KeyError(key)
            case ("block", asyncio.Event() as gate):
                await gate.wait()
                self.seen.append("unblocked")
            case ("spawn-fail", delay):
                self.spawn(self._fail_after(delay))
            case ("tell-later", delay, what):
                self.tell_later(delay, what)
            case _:
                self.seen.append(message)
        return None

    async def _fail_after(self, delay: float) -> None:
        await self.clock.sleep(delay)
        raise RuntimeError("spawned task failed")


def task(coro: Any) -> asyncio.Task[Any]:
    return asyncio.ensure_future(coro)


# --- mailbox ----------------------------------------------------------------------------------


async def test_mailbox_is_fifo_and_control_lane_jumps_the_queue() -> None:
    mb = Mailbox(capacity=4)
    mb.put(("a", None))
    mb.put(("b", None))
    mb.put_control(("stop", None))
    assert len(mb) == 3
    assert [(await mb.get())[0] for _ in range(3)] == ["stop", "a", "b"]


async def test_mailbox_reject_raises_when_full() -> None:
    mb = Mailbox(capacity=2, overflow=Overflow.REJECT)
    mb.put((1, None))
    mb.put((2, None))
    with pytest.raises(MailboxFull):
        mb.put((3, None))
    mb.put_control(("ctl", None))  # the control lane is never full
    assert mb.dropped == 0


async def test_mailbox_drop_oldest_counts_and_fails_dropped_asks() -> None:
    mb = Mailbox(capacity=2, overflow=Overflow.DROP_OLDEST)
    reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    mb.put((1, reply))
    mb.put((2, None))
    mb.put((3, None))
    mb.put((4, None))
    assert mb.dropped == 2
    assert [(await mb.get())[0] for _ in range(2)] == [3, 4]
    with pytest.raises(MailboxFull):
        reply.result()


async def test_mailbox_close_hands_back_the_rest_and_refuses_more() -> None:
    mb = Mailbox(capacity=2)
    mb.put((1, None))
    mb.put_control(("c", None))
    assert [m for m, _ in mb.close()] == ["c", 1]
    assert mb.closed
    with pytest.raises(MailboxClosed):
        mb.put((2, None))
    with pytest.raises(MailboxClosed):
        mb.put_control((2, None))
    with pytest.raises(MailboxClosed):
        await mb.get()


async def test_mailbox_close_wakes_a_blocked_reader_and_sender() -> None:
    mb = Mailbox(capacity=1)
    reader = task(mb.get())
    await settle()
    mb.close()
    await settle()
    with pytest.raises(MailboxClosed):
        reader.result()
    mb2 = Mailbox(capacity=1)
    mb2.put((1, None))
    sender = task(mb2.put_wait((2, None)))
    await settle()
    mb2.close()
    await settle()
    with pytest.raises(MailboxClosed):
        sender.result()


def test_mailbox_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Mailbox(capacity=0)


async def test_put_wait_blocks_until_room() -> None:
    mb = Mailbox(capacity=1)
    mb.put(("a", None))
    sender = task(mb.put_wait(("b", None)))
    await settle()
    assert not sender.done()
    assert (await mb.get())[0] == "a"
    await settle()
    assert sender.done()
    assert (await mb.get())[0] == "b"


async def test_a_cancelled_sender_does_not_swallow_the_wakeup() -> None:
    mb = Mailbox(capacity=1)
    mb.put(("a", None))
    first = task(mb.put_wait(("b", None)))
    second = task(mb.put_wait(("c", None)))
    await settle()
    first.cancel()
    await settle()
    assert (await mb.get())[0] == "a"
    await settle()
    assert second.done() and first.cancelled()
    assert (await mb.get())[0] == "c"


async def test_a_sender_cancelled_after_its_wakeup_passes_it_on() -> None:
    mb = Mailbox(capacity=1)
    mb.put(("a", None))
    first = task(mb.put_wait(("b", None)))
    second = task(mb.put_wait(("c", None)))
    await settle()
    assert (await mb.get())[0] == "a"  # wakes `first`, which has not run yet...
    first.cancel()  # ...and now never will
    await settle()
    assert first.cancelled()
    assert second.done()
    assert (await mb.get())[0] == "c"


# --- tell and ask -----------------------------------------------------------------------------


async def test_tell_and_ask_keep_mailbox_order(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        gate = asyncio.Event()
        ref.tell(("block", gate))
        ref.tell(1)
        first = task(ref.ask("get", timeout=5))
        await asyncio.sleep(0)  # `first` enqueues its ask
        ref.tell(2)
        second = task(ref.ask("get", timeout=5))
        await settle()
        assert not first.done()
        gate.set()
        await settle()
        assert first.result() == ["unblocked", 1]
        assert second.result() == ["unblocked", 1, 2]
        assert clock.next_deadline() is None  # answered asks leave no timers behind


async def test_ask_times_out_on_the_fake_clock(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        gate = asyncio.Event()
        ref.tell(("block", gate))
        pending = task(ref.ask("late", timeout=2.0))
        await clock.advance(1.9)
        assert not pending.done()
        await clock.advance(0.1)
        with pytest.raises(AskTimeout):
            pending.result()
        assert isinstance(pending.exception(), TimeoutError)
        gate.set()
        await settle()
        # the expired ask is skipped, not handled late
        assert await ref.ask("get", timeout=1) == ["unblocked"]


async def test_exception_in_ask_goes_to_the_caller_and_the_actor_lives_on(
    clock: FakeClock,
) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        ref.tell("before")
        with pytest.raises(KeyError):
            await ref.ask(("fail-ask", "k"), timeout=1)
        ref.tell("after")
        assert await ref.ask("get", timeout=1) == ["before", "after"]
        assert w.starts("a") == 1 and len(w.instances["a"]) == 1
        assert sup.restart_count == 0


async def test_tell_after_later_fires_on_the_fake_clock(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        ref.tell(("tell-later", 3.0, "later"))
        await clock.advance(2.9)
        assert await ref.ask("get", timeout=1) == []
        await clock.advance(0.1)
        assert await ref.ask("get", timeout=1) == ["later"]


# --- crashes and restarts ---------------------------------------------------------------------


async def test_crash_in_tell_restarts_with_fresh_state_same_ref_and_queue(
    clock: FakeClock,
) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        ref.tell("old")
        ref.tell(("crash", "boom"))
        ref.tell("queued-1")
        ref.tell("queued-2")
        await settle()
        assert w.log == [("start", "a"), ("stop", "a"), ("start", "a")]
        assert sup.restart_count == 1
        assert sup.ref("a") is ref and ref.alive
        first, second = w.instances["a"]
        assert first is not second
        assert first.seen == ["old"]
        assert await ref.ask("get", timeout=1) == ["queued-1", "queued-2"]


async def test_asks_queued_behind_a_crash_are_answered_by_the_next_incarnation(
    clock: FakeClock,
) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        ref.tell(("crash", "boom"))
        answer = await ref.ask("get", timeout=1)
        assert answer == [] and w.starts("a") == 2


async def test_crash_in_a_spawned_task_crashes_the_actor(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        ref.tell(("spawn-fail", 5.0))
        ref.tell("state")
        await clock.advance(4.9)
        assert w.starts("a") == 1
        await clock.advance(0.1)
        assert w.starts("a") == 2 and sup.restart_count == 1
        assert await ref.ask("get", timeout=1) == []


async def test_an_ask_in_flight_when_the_actor_crashes_fails_at_once(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        ref.tell(("spawn-fail", 1.0))
        in_flight = task(ref.ask(("block", asyncio.Event()), timeout=100.0))
        await clock.advance(1.0)
        assert in_flight.done()  # not left waiting for its 100 s deadline
        with pytest.raises(ActorStopped):
            in_flight.result()
        assert w.starts("a") == 2


async def test_spawned_tasks_are_cancelled_when_the_actor_stops(clock: FakeClock) -> None:
    cancelled: list[bool] = []

    class Spawner(Probe):
        async def on_start(self) -> None:
            await super().on_start()
            self.spawn(self._forever())

        async def _forever(self) -> None:
            try:
                await self.clock.sleep(1e9)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a", Spawner))
        ref.stop()
        await ref.wait_stopped()
        assert cancelled == [True]
        assert "a" not in sup  # a normal stop is not restarted
        assert w.starts("a") == 1


def test_spawn_before_start_is_refused() -> None:
    actor = Probe("a", World())

    async def nothing() -> None:
        return None

    with pytest.raises(RuntimeError):
        actor.spawn(nothing())


async def test_every_ticks_on_the_fake_clock(clock: FakeClock) -> None:
    class Ticker(Probe):
        async def on_start(self) -> None:
            await super().on_start()
            self.every(10.0, "tick")
            self.every(25.0, lambda: ("at", self.clock.now()))

    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a", Ticker))
        start = clock.now()
        await clock.advance(9.9)
        assert await ref.ask("get", timeout=1) == []
        await clock.advance(0.1)
        assert await ref.ask("get", timeout=1) == ["tick"]
        await clock.advance(20.0)
        assert await ref.ask("get", timeout=1) == ["tick", "tick", ("at", start + 25.0), "tick"]


async def test_every_skips_ticks_while_the_mailbox_is_full(clock: FakeClock) -> None:
    class Ticker(Probe):
        async def on_start(self) -> None:
            await super().on_start()
            self.every(10.0, "tick")

    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a", Ticker, capacity=1))
        gate = asyncio.Event()
        ref.tell(("block", gate))
        await settle()
        ref.tell("filler")
        await clock.advance(30.0)  # three ticks find the mailbox full
        assert w.starts("a") == 1 and sup.restart_count == 0
        gate.set()
        await settle()
        await clock.advance(10.0)
        assert await ref.ask("get", timeout=1) == ["unblocked", "filler", "tick"]


async def test_every_is_restarted_with_the_actor(clock: FakeClock) -> None:
    class Ticker(Probe):
        async def on_start(self) -> None:
            await super().on_start()
            self.every(10.0, "tick")

    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a", Ticker))
        await clock.advance(5.0)
        ref.tell(("crash", "boom"))
        await settle()
        await clock.advance(9.9)  # the old ticker (due at 10) died with its incarnation
        assert await ref.ask("get", timeout=1) == []
        await clock.advance(0.1)
        assert await ref.ask("get", timeout=1) == ["tick"]


# --- restart intensity ------------------------------------------------------------------------


async def test_too_many_restarts_in_the_window_escalate(clock: FakeClock) -> None:
    w = World()
    with pytest.raises(SupervisorEscalation):
        async with Supervisor(clock=clock, max_restarts=3, window_s=5.0) as sup:
            ref = await sup.start_child(w.spec("a"))
            for i in range(4):
                ref.tell(("crash", str(i)))
                await clock.advance(1.0)
    assert w.starts("a") == 4  # the first start and three restarts
    assert not ref.alive


async def test_max_restarts_within_the_window_is_tolerated(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock, max_restarts=3, window_s=5.0) as sup:
        ref = await sup.start_child(w.spec("a"))
        for i in range(3):
            ref.tell(("crash", str(i)))
            await clock.advance(1.0)
        assert sup.restart_count == 3 and ref.alive


async def test_restarts_spread_beyond_the_window_do_not_escalate(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock, max_restarts=2, window_s=5.0) as sup:
        ref = await sup.start_child(w.spec("a"))
        for i in range(10):
            ref.tell(("crash", str(i)))
            await clock.advance(2.6)  # at most two crashes in any 5 s
        assert sup.restart_count == 10 and ref.alive
        assert await ref.ask("get", timeout=1) == []


async def test_escalation_stops_the_other_children_in_reverse_order(clock: FakeClock) -> None:
    w = World()
    with pytest.raises(SupervisorEscalation):
        async with Supervisor(clock=clock, max_restarts=0) as sup:
            a = await sup.start_child(w.spec("a"))
            b = await sup.start_child(w.spec("b"))
            c = await sup.start_child(w.spec("c"))
            b.tell(("crash", "boom"))
            await settle()
    assert w.log[3:] == [("stop", "b"), ("stop", "c"), ("stop", "a")]
    assert not (a.alive or b.alive or c.alive)
    with pytest.raises(ActorStopped):
        await a.ask("get", timeout=1)


async def test_a_restart_that_cannot_start_escalates(clock: FakeClock) -> None:
    class StartsOnce(Probe):
        async def on_start(self) -> None:
            if self.world.starts(self.name):
                raise RuntimeError("cannot start twice")
            await super().on_start()

    w = World()
    with pytest.raises(SupervisorEscalation):
        async with Supervisor(clock=clock, max_restarts=5) as sup:
            ref = await sup.start_child(w.spec("a", StartsOnce))
            ref.tell(("crash", "boom"))
            await settle()
    assert len(w.instances["a"]) == 2  # no retry loop on a child that cannot start


# --- strategies -------------------------------------------------------------------------------


async def _crash_the_middle_child(sup: Supervisor, w: World) -> None:
    for name in "abc":
        ref = await sup.start_child(w.spec(name))
        ref.tell("state")
    sup.ref("b").tell(("crash", "boom"))
    await settle()


async def test_one_for_one_restarts_only_the_crashed_child(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock, strategy=Strategy.ONE_FOR_ONE) as sup:
        await _crash_the_middle_child(sup, w)
        assert [w.starts(n) for n in "abc"] == [1, 2, 1]
        assert await sup.ref("a").ask("get", timeout=1) == ["state"]
        assert await sup.ref("b").ask("get", timeout=1) == []
        assert await sup.ref("c").ask("get", timeout=1) == ["state"]


async def test_rest_for_one_restarts_the_children_started_after(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock, strategy=Strategy.REST_FOR_ONE) as sup:
        await _crash_the_middle_child(sup, w)
        assert [w.starts(n) for n in "abc"] == [1, 2, 2]
        # b crashed; c stopped; then b and c start again in their original order
        assert w.log[3:] == [("stop", "b"), ("stop", "c"), ("start", "b"), ("start", "c")]
        assert await sup.ref("a").ask("get", timeout=1) == ["state"]
        assert await sup.ref("b").ask("get", timeout=1) == []
        assert await sup.ref("c").ask("get", timeout=1) == []
        assert sup.restart_count == 1
        assert sup.children() == ["a", "b", "c"]


async def test_rest_for_one_crash_of_the_last_child_touches_no_one_else(
    clock: FakeClock,
) -> None:
    w = World()
    async with Supervisor(clock=clock, strategy=Strategy.REST_FOR_ONE) as sup:
        for name in "abc":
            await sup.start_child(w.spec(name))
        sup.ref("c").tell(("crash", "boom"))
        await settle()
        assert [w.starts(n) for n in "abc"] == [1, 1, 2]


# --- starting ---------------------------------------------------------------------------------


async def test_start_child_returns_only_after_on_start(clock: FakeClock) -> None:
    class SlowStart(Probe):
        async def on_start(self) -> None:
            await self.clock.sleep(5.0)
            await super().on_start()

    w = World()
    async with Supervisor(clock=clock) as sup:
        starting = task(sup.start_child(w.spec("a", SlowStart)))
        await clock.advance(4.9)
        assert not starting.done() and w.log == []
        await clock.advance(0.1)
        assert starting.done() and w.log == [("start", "a")]
        assert await starting.result().ask("get", timeout=1) == []


async def test_on_start_failure_propagates_from_start_child(clock: FakeClock) -> None:
    class NoStart(Probe):
        async def on_start(self) -> None:
            raise OSError("port in use")

    w = World()
    async with Supervisor(clock=clock) as sup:
        other = await sup.start_child(w.spec("ok"))
        with pytest.raises(OSError, match="port in use"):
            await sup.start_child(w.spec("bad", NoStart))
        await settle()
        assert "bad" not in sup and sup.children() == ["ok"]
        assert len(w.instances["bad"]) == 1  # not restarted
        assert sup.restart_count == 0
        assert w.stops("bad") == 1  # on_stop still ran
        assert await other.ask("get", timeout=1) == []
        # the name is free again
        await sup.start_child(w.spec("bad"))
        assert sup.children() == ["ok", "bad"]


async def test_start_child_checks(clock: FakeClock) -> None:
    w = World()
    sup = Supervisor(clock=clock)
    with pytest.raises(RuntimeError):
        await sup.start_child(w.spec("a"))
    async with sup:
        await sup.start_child(w.spec("a"))
        with pytest.raises(ValueError):
            await sup.start_child(w.spec("a"))
        await sup.stop_child("missing")  # a no-op


# --- stopping ---------------------------------------------------------------------------------


async def test_children_stop_in_reverse_start_order(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        refs = [await sup.start_child(w.spec(n)) for n in "abc"]
    assert w.log == [
        ("start", "a"),
        ("start", "b"),
        ("start", "c"),
        ("stop", "c"),
        ("stop", "b"),
        ("stop", "a"),
    ]
    assert not any(r.alive for r in refs)
    assert sup.children() == []


async def test_stop_jumps_the_queue_and_fails_the_asks_behind_it(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        gate = asyncio.Event()
        ref.tell(("block", gate))
        await settle()
        ref.tell("queued")
        behind = task(ref.ask("get", timeout=10.0))
        await settle()
        ref.stop()
        gate.set()
        await ref.wait_stopped()
        await settle()
        with pytest.raises(ActorStopped):
            behind.result()
        assert w.latest("a").seen == ["unblocked"]  # the stop went before "queued"
        assert not ref.alive and "a" not in sup


async def test_ask_and_tell_on_a_stopped_actor(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        await sup.stop_child("a")
        assert not ref.alive
        with pytest.raises(ActorStopped):
            await ref.ask("get", timeout=1)
        with pytest.raises(MailboxClosed):
            ref.tell("x")
        ref.stop()  # stopping twice is harmless
        await ref.wait_stopped()


async def test_stop_child_lets_the_current_message_finish(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a"))
        gate = asyncio.Event()
        ref.tell(("block", gate))
        await settle()
        stopping = task(sup.stop_child("a"))
        await settle()
        assert not stopping.done()
        gate.set()
        await settle()
        assert stopping.done()
        assert w.latest("a").seen == ["unblocked"] and not ref.alive


async def test_failing_on_stop_does_not_block_shutdown(clock: FakeClock) -> None:
    class BadStop(Probe):
        async def on_stop(self) -> None:
            await super().on_stop()
            raise RuntimeError("cleanup failed")

    w = World()
    async with Supervisor(clock=clock) as sup:
        ref = await sup.start_child(w.spec("a", BadStop))
    assert w.stops("a") == 1 and not ref.alive


async def test_an_error_in_the_owner_stops_the_children(clock: FakeClock) -> None:
    w = World()
    with pytest.raises(ExceptionGroup) as info:
        async with Supervisor(clock=clock) as sup:
            ref = await sup.start_child(w.spec("a"))
            ref.tell(("block", asyncio.Event()))
            ref.tell("queued")
            in_flight = task(ref.ask("get", timeout=100.0))
            await settle()
            raise ValueError("owner failed")
    assert info.group_contains(ValueError)
    await settle()
    assert w.stops("a") == 1 and not ref.alive
    with pytest.raises(ActorStopped):
        in_flight.result()


# --- overflow and back-pressure through refs --------------------------------------------------


async def _blocked(sup: Supervisor, w: World, **kw: Any) -> tuple[Any, asyncio.Event]:
    ref = await sup.start_child(w.spec("a", **kw))
    gate = asyncio.Event()
    ref.tell(("block", gate))
    await settle()  # the actor took the message: the mailbox is empty again
    return ref, gate


async def test_reject_mailbox_raises_mailbox_full(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref, gate = await _blocked(sup, w, capacity=2, overflow=Overflow.REJECT)
        ref.tell(1)
        ref.tell(2)
        with pytest.raises(MailboxFull):
            ref.tell(3)
        with pytest.raises(MailboxFull):
            await ref.ask("get", timeout=1)
        gate.set()
        await settle()
        assert await ref.ask("get", timeout=1) == ["unblocked", 1, 2]


async def test_drop_oldest_mailbox_drops_and_counts(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref, gate = await _blocked(sup, w, capacity=2, overflow=Overflow.DROP_OLDEST)
        dropped_ask = task(ref.ask("get", timeout=10.0))
        await asyncio.sleep(0)
        for i in range(1, 5):
            ref.tell(i)
        assert sup._children["a"].cell.mailbox.dropped == 3
        gate.set()
        await settle()
        with pytest.raises(MailboxFull):
            dropped_ask.result()
        assert await ref.ask("get", timeout=1) == ["unblocked", 3, 4]


async def test_send_waits_for_room(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref, gate = await _blocked(sup, w, capacity=1)
        ref.tell(1)
        sending = task(ref.send(2))
        await settle()
        assert not sending.done()
        gate.set()
        await settle()
        assert sending.done() and sending.exception() is None
        assert await ref.ask("get", timeout=1) == ["unblocked", 1, 2]


async def test_send_to_a_stopped_actor_fails(clock: FakeClock) -> None:
    w = World()
    async with Supervisor(clock=clock) as sup:
        ref, gate = await _blocked(sup, w, capacity=1)
        ref.tell(1)
        sending = task(ref.send(2))
        await settle()
        ref.stop()
        gate.set()
        await ref.wait_stopped()
        await settle()
        with pytest.raises(MailboxClosed):
            sending.result()
