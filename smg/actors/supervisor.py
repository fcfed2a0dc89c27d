"""Supervision: restart crashed actors, within an intensity budget, then escalate.

`one_for_one` restarts only the crashed child; `rest_for_one` also restarts every child started
after it (they depend on it). More than `max_restarts` restarts within `window_s` means the fault
is not transient: the supervisor stops all its children (in reverse start order) and raises
`SupervisorEscalation` to whoever owns it.

A supervisor owns one TaskGroup; `async with Supervisor(...) as sup:` scopes every child's task.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog

from smg.actors.mailbox import Overflow
from smg.actors.runtime import Actor, ActorCell, ActorCrashed, ActorRef
from smg.clock import Clock, LoopClock

log = structlog.get_logger("smg.actors")


class Strategy(Enum):
    ONE_FOR_ONE = "one_for_one"
    REST_FOR_ONE = "rest_for_one"


class SupervisorEscalation(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ChildSpec:
    name: str
    factory: Callable[[], Actor]
    capacity: int = 1024
    overflow: Overflow = Overflow.REJECT


class _Child:
    __slots__ = ("cell", "restarting", "spec", "task")

    def __init__(self, spec: ChildSpec, cell: ActorCell) -> None:
        self.spec = spec
        self.cell = cell
        self.task: asyncio.Task[None] | None = None
        self.restarting = False


class Supervisor:
    def __init__(
        self,
        name: str = "root",
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        max_restarts: int = 3,
        window_s: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.clock: Clock = clock or LoopClock()
        self._children: dict[str, _Child] = {}  # insertion order = start order
        self._restarts: deque[float] = deque()
        self._tg: asyncio.TaskGroup | None = None
        self._escalated: SupervisorEscalation | None = None
        self.restart_count = 0

    async def __aenter__(self) -> Supervisor:
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, et: Any, exc: Any, tb: Any) -> bool | None:
        if et is None:
            await self.stop_all()
        else:
            for child in self._children.values():
                if child.task is not None:
                    child.task.cancel()
        assert self._tg is not None
        try:
            await self._tg.__aexit__(et, exc, tb)
            return None
        except BaseExceptionGroup as eg:
            _, rest = eg.split(SupervisorEscalation)
            if self._escalated is not None and rest is None:
                raise self._escalated from None  # the owner sees the escalation itself
            raise

    def children(self) -> list[str]:
        return list(self._children)

    def ref(self, name: str) -> ActorRef:
        return self._children[name].cell.ref

    def __contains__(self, name: str) -> bool:
        return name in self._children

    async def start_child(self, spec: ChildSpec) -> ActorRef:
        """Start a child and wait for its ready handshake (its `on_start` finished)."""
        if self._tg is None:
            raise RuntimeError("supervisor not entered")
        if spec.name in self._children:
            raise ValueError(f"child {spec.name!r} already exists")
        cell = ActorCell(
            spec.name,
            spec.factory,
            clock=self.clock,
            capacity=spec.capacity,
            overflow=spec.overflow,
        )
        child = _Child(spec, cell)
        self._children[spec.name] = child
        try:
            await self._launch(child)
        except Exception:
            self._children.pop(spec.name, None)
            cell.close()
            raise
        return cell.ref

    async def _launch(self, child: _Child) -> None:
        assert self._tg is not None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        child.task = self._tg.create_task(
            self._watch(child, ready), name=f"actor:{child.spec.name}"
        )
        await ready

    async def _watch(self, child: _Child, ready: asyncio.Future[None]) -> None:
        try:
            await child.cell.run(ready)
        except ActorCrashed as crash:
            if not _handshake_ok(ready) or child.restarting:
                return  # a failed start: whoever awaits `ready` (start_child, a restart) handles it
            if child.cell.mailbox.closed:
                return
            await self._on_crash(child, crash)
            return
        except asyncio.CancelledError:
            if child.restarting:
                return
            child.cell.close()
            raise
        # normal stop: the child is gone for good
        self._children.pop(child.spec.name, None)

    async def _on_crash(self, child: _Child, crash: ActorCrashed) -> None:
        now = self.clock.now()
        self._restarts.append(now)
        while self._restarts and now - self._restarts[0] > self.window_s:
            self._restarts.popleft()
        log.warning("actor_crashed", actor=crash.name, cause=repr(crash.cause))
        if len(self._restarts) > self.max_restarts:
            await self._escalate(crash)
            return
        names = list(self._children)
        if self.strategy is Strategy.REST_FOR_ONE and child.spec.name in names:
            later = [self._children[n] for n in names[names.index(child.spec.name) + 1 :]]
        else:
            later = []
        for other in reversed(later):
            await self._halt_incarnation(other)
        self.restart_count += 1
        for c in [child, *later]:
            c.restarting = False
            try:
                await self._launch(c)
            except Exception as exc:  # a child that cannot even start is a fault to escalate
                await self._escalate(ActorCrashed(c.spec.name, exc))
                return

    async def _halt_incarnation(self, child: _Child) -> None:
        child.restarting = True
        if child.task is not None and not child.task.done():
            child.task.cancel()
            try:
                await child.task
            except asyncio.CancelledError:
                pass

    async def _escalate(self, crash: ActorCrashed) -> None:
        self._escalated = SupervisorEscalation(
            f"supervisor {self.name!r}: over {self.max_restarts} restarts in {self.window_s:g} s; "
            f"last: {crash}"
        )
        log.error("supervisor_escalated", supervisor=self.name, cause=str(crash))
        await self.stop_all()
        raise self._escalated

    async def stop_child(self, name: str) -> None:
        child = self._children.pop(name, None)
        if child is None:
            return
        child.cell.ref.stop()
        if child.task is not None and child.task is not asyncio.current_task():
            try:
                await child.task
            except (ActorCrashed, SupervisorEscalation):
                pass
        child.cell.close()

    async def stop_all(self) -> None:
        """Ordered shutdown: children stop in reverse start order; pending asks fail."""
        for name in reversed(list(self._children)):
            await self.stop_child(name)


def _handshake_ok(ready: asyncio.Future[None]) -> bool:
    """The incarnation finished `on_start` (as opposed to failing or being cancelled in it)."""
    return ready.done() and not ready.cancelled() and ready.exception() is None
