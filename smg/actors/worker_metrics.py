"""TransitionMetricsActor: counts worker transitions (`smg_worker_transitions_total`) from the
lifecycle events on the bus.

A counter can lose a transition under overload without harm to anything else, so it subscribes
with `Delivery.DROP` (the bus counts what it dropped).
"""

from __future__ import annotations

from typing import Any, Protocol

from smg.actors.event_bus import Delivery, EventBus
from smg.actors.messages import WorkerBreakerChanged, WorkerHealthChanged
from smg.actors.runtime import Actor


class TransitionSink(Protocol):
    def transition(self, worker_url: str, kind: str, to: str) -> None: ...


class TransitionMetricsActor(Actor):
    def __init__(self, sink: TransitionSink, events: EventBus) -> None:
        super().__init__()
        self.sink = sink
        self.events = events

    async def on_start(self) -> None:
        types = (WorkerHealthChanged, WorkerBreakerChanged)
        self.events.subscribe(self.ref, types, Delivery.DROP)

    async def handle(self, message: Any) -> Any:
        match message:
            case WorkerHealthChanged(worker=w, health=health):
                self.sink.transition(w.url, "health", health.value)
            case WorkerBreakerChanged(worker=w, state=state):
                self.sink.transition(w.url, "breaker", state.label)
            case _:
                raise TypeError(f"TransitionMetricsActor: unexpected message {message!r}")
        return None
