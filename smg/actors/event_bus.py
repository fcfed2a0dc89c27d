"""EventBus: typed events delivered into the mailboxes of the actors that subscribed to them.

Publishers (the registry, the KV-events actor, the mesh's actors) call `publish(event)`; each
actor subscribed to the event's type gets it with `tell`, in publish order (the messages and
who publishes what: `smg.actors.messages`). The bus is a table, not an actor: a publish is one
`tell` per subscriber, done by the publisher, so an event costs no extra hop and there is no bus
mailbox to overflow. A publisher never waits and never sees a subscriber's trouble:

- A subscriber whose mailbox is full misses the event (counted in `dropped`), and then gets what
  it chose when it subscribed (`Delivery`):
  * `RESYNC`, for news it derives state from (a worker added, removed, ready): one `Resync`
    notice in its control lane, read before anything queued, once per overflow (until a later
    event gets through); it rebuilds from the registry's snapshot, so a lost removal costs a
    rebuild, never a worker remembered forever;
  * `DROP`, for news that is level-triggered or best-effort (documents changed: the documents
    hold it; a pushed load: the next one follows; a metric; a hint): nothing more.
- A subscriber that stopped for good (its mailbox closed) is unsubscribed. One being restarted
  by its supervisor keeps its mailbox and its subscription: its events wait for the new
  incarnation.

Actors subscribe themselves, in `on_start` (a restart subscribes again, which replaces the
subscription). `close()` at shutdown makes later publishes no-ops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import structlog

from smg.actors.mailbox import MailboxClosed, MailboxFull
from smg.actors.messages import Resync
from smg.actors.runtime import ActorRef

log = structlog.get_logger("smg.events")

_RESYNC = Resync()


class Delivery(Enum):
    RESYNC = "resync"  # a missed event is followed by one Resync notice
    DROP = "drop"  # a missed event is only counted


@dataclass(slots=True, eq=False)
class Subscription:
    ref: ActorRef
    types: frozenset[type]
    delivery: Delivery
    delivered: int = 0
    dropped: int = 0
    resyncs: int = 0
    lagging: bool = field(default=False, repr=False)


class EventBus:
    def __init__(self) -> None:
        self._subs: dict[ActorRef, Subscription] = {}
        self._by_type: dict[type, tuple[Subscription, ...]] = {}
        self.closed = False

    def subscribe(
        self, ref: ActorRef, types: Iterable[type], delivery: Delivery = Delivery.RESYNC
    ) -> Subscription:
        """Deliver events of `types` to `ref` (replacing its earlier subscription)."""
        sub = Subscription(ref, frozenset(types), delivery)
        if not self.closed:
            self._subs[ref] = sub
            self._index()
        return sub

    def unsubscribe(self, ref: ActorRef) -> None:
        if self._subs.pop(ref, None) is not None:
            self._index()

    def publish(self, event: Any) -> int:
        """Tell `event` to every subscriber of its type; how many got it."""
        reached = 0
        for sub in self._by_type.get(type(event), ()):
            try:
                sub.ref.tell(event)
            except MailboxFull:
                self._missed(sub, event)
                continue
            except MailboxClosed:
                self.unsubscribe(sub.ref)  # stopped for good
                continue
            sub.delivered += 1
            sub.lagging = False
            reached += 1
        return reached

    def _missed(self, sub: Subscription, event: Any) -> None:
        sub.dropped += 1
        if sub.delivery is Delivery.RESYNC and not sub.lagging:
            sub.lagging = True
            sub.resyncs += 1
            log.warning(
                "event_dropped_resync", subscriber=sub.ref.name, event_type=type(event).__name__
            )
            try:
                sub.ref.tell_control(_RESYNC)
            except MailboxClosed:
                self.unsubscribe(sub.ref)

    def close(self) -> None:
        """Shutdown: nothing is delivered any more."""
        self.closed = True
        self._subs.clear()
        self._by_type = {}

    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(self._subs.values())

    def _index(self) -> None:
        by_type: dict[type, list[Subscription]] = {}
        for sub in self._subs.values():
            for t in sub.types:
                by_type.setdefault(t, []).append(sub)
        self._by_type = {t: tuple(subs) for t, subs in by_type.items()}
