"""Actors: private state, a bounded mailbox, `tell`, `ask` with a deadline.

An exception while handling an `ask` goes back to the caller; one while handling a `tell` (or in a
task the actor spawned) crashes the actor and its supervisor decides what happens next. Stopping
fails every pending `ask` with `ActorStopped`, so no caller waits forever. A restarted actor is a
fresh instance behind the same `ActorRef` and mailbox: callers never see the restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from smg.actors.mailbox import Mailbox, MailboxClosed, MailboxFull, Overflow
from smg.clock import Clock, LoopClock, TimerHandle


class ActorStopped(Exception):
    """The actor stopped (or was never started) before it answered."""


class AskTimeout(TimeoutError):
    """The actor did not answer an `ask` before its deadline."""


class ActorCrashed(Exception):
    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"actor {name!r} crashed: {cause!r}")
        self.name = name
        self.cause = cause


class _Stop:
    __slots__ = ()

    def __repr__(self) -> str:
        return "STOP"


STOP = _Stop()


class Actor:
    """Subclass and implement `handle`. `on_start` runs before the ready handshake completes;
    `on_stop` runs on every exit (stop or crash)."""

    ref: ActorRef
    clock: Clock

    def __init__(self) -> None:
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def on_start(self) -> None:
        return None

    async def handle(self, message: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not handle {message!r}")

    async def on_stop(self) -> None:
        return None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """A task owned by this actor: cancelled when it stops; its failure crashes the actor."""
        if self._tg is None:
            coro.close()
            raise RuntimeError("spawn() before the actor started")
        task = self._tg.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def every(self, interval_s: float, message: Callable[[], Any] | Any) -> asyncio.Task[Any]:
        """Tell self `message` every `interval_s` on the actor's clock, first after one interval."""

        async def ticker() -> None:
            while True:
                await self.clock.sleep(interval_s)
                msg = message() if callable(message) else message
                try:
                    self.ref.tell(msg)
                except MailboxFull:
                    continue  # skip this tick rather than crash the actor; the next one comes
                except MailboxClosed:
                    return

        return self.spawn(ticker(), name=f"{self.ref.name}-every")

    def tell_later(self, delay_s: float, message: Any) -> TimerHandle:
        ref = self.ref

        def fire() -> None:
            if ref.alive:
                ref.tell(message)

        return self.clock.call_later(delay_s, fire)

    @property
    def stop_requested(self) -> bool:
        """A stop is queued behind the message being handled: a handler that yields between
        slices of a long job checks this to end early rather than hold up the shutdown."""
        return self.ref._cell.mailbox.control_pending

    def _cancel_tasks(self) -> None:
        for t in list(self._tasks):
            t.cancel()


class ActorRef:
    """The address of an actor; stays valid across restarts."""

    __slots__ = ("_cell", "name")

    def __init__(self, cell: ActorCell) -> None:
        self._cell = cell
        self.name = cell.name

    @property
    def alive(self) -> bool:
        return not self._cell.mailbox.closed

    def tell(self, message: Any) -> None:
        """Fire and forget. Raises `MailboxFull` (REJECT) or `MailboxClosed` (stopped)."""
        self._cell.mailbox.put((message, None))

    def tell_control(self, message: Any) -> None:
        """Put `message` in the control lane: read before the mailbox's other messages and never
        refused for room (for stop, and the event bus's one `Resync` notice per overflow).
        Raises `MailboxClosed` (stopped)."""
        self._cell.mailbox.put_control((message, None))

    async def send(self, message: Any) -> None:
        """`tell` that waits for room in the mailbox (back-pressure)."""
        await self._cell.mailbox.put_wait((message, None))

    async def ask(self, message: Any, timeout: float) -> Any:
        """Request/response with a deadline on the actor's clock."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        try:
            self._cell.mailbox.put((message, reply))
        except MailboxClosed:
            raise ActorStopped(self.name) from None

        def expire() -> None:
            if not reply.done():
                reply.set_exception(AskTimeout(f"{self.name} did not answer in {timeout:g} s"))

        timer = self._cell.clock.call_later(timeout, expire)
        try:
            return await reply
        finally:
            timer.cancel()

    def stop(self) -> None:
        """Ask the actor to stop after the message it is handling (control lane)."""
        try:
            self._cell.mailbox.put_control((STOP, None))
        except MailboxClosed:
            pass

    async def wait_stopped(self) -> None:
        await asyncio.shield(self._cell.finished)

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r})"


class ActorCell:
    """Runs incarnations of one actor over one mailbox."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], Actor],
        *,
        clock: Clock | None = None,
        capacity: int = 1024,
        overflow: Overflow = Overflow.REJECT,
    ) -> None:
        self.name = name
        self.factory = factory
        self.clock: Clock = clock or LoopClock()
        self.mailbox = Mailbox(capacity, overflow)
        self.ref = ActorRef(self)
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.instance: Actor | None = None

    async def run(self, ready: asyncio.Future[None] | None = None) -> None:
        """One incarnation. Returns on STOP; raises `ActorCrashed` on a crash."""
        actor = self.factory()
        actor.ref = self.ref
        actor.clock = self.clock
        self.instance = actor
        stopping = False
        try:
            async with asyncio.TaskGroup() as tg:
                actor._tg = tg
                await actor.on_start()
                if ready is not None and not ready.done():
                    ready.set_result(None)
                await self._loop(actor)
                stopping = True
                actor._cancel_tasks()
        except ExceptionGroup as eg:
            cause: BaseException = eg.exceptions[0] if len(eg.exceptions) == 1 else eg
            self._fail_ready(ready, cause)
            await self._safe_on_stop(actor)
            raise ActorCrashed(self.name, cause) from cause
        except asyncio.CancelledError:
            self._fail_ready(ready, ActorStopped(self.name))
            await self._safe_on_stop(actor)
            raise
        await self._safe_on_stop(actor)
        if stopping:
            self.close()

    async def _loop(self, actor: Actor) -> None:
        get = self.mailbox.get
        handle = actor.handle
        while True:
            message, reply = await get()
            if message is STOP:
                return
            if reply is None:
                await handle(message)
                continue
            if reply.done():
                continue
            try:
                result = await handle(message)
            except Exception as exc:
                if not reply.done():
                    reply.set_exception(exc)
                continue
            except asyncio.CancelledError:  # crashed (a spawned task failed) or halted mid-ask
                if not reply.done():
                    reply.set_exception(ActorStopped(f"{self.name} stopped before answering"))
                raise
            if not reply.done():
                reply.set_result(result)

    def close(self) -> None:
        """Final stop: fail pending asks, mark finished."""
        for message, reply in self.mailbox.close():
            if reply is not None and not reply.done():
                reply.set_exception(
                    ActorStopped(f"{self.name} stopped before answering {message!r}")
                )
        if not self.finished.done():
            self.finished.set_result(None)

    @staticmethod
    def _fail_ready(ready: asyncio.Future[None] | None, exc: BaseException) -> None:
        if ready is not None and not ready.done():
            ready.set_exception(exc)

    @staticmethod
    async def _safe_on_stop(actor: Actor) -> None:
        try:
            await actor.on_stop()
        except Exception:  # a failing cleanup must not mask the original exit
            pass
