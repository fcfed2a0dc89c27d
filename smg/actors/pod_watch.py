"""One pod watch: list, then watch from the list's resourceVersion, for as long as its owner
runs it (a task in the owner's group). The state machine is the sans-IO informer
(smg/core/informer.py); this loop does the IO, the retries and the waiting.

A stream that drops or ends is resumed from the last resourceVersion (bookmarks keep it fresh);
410 Gone lists again. Waits between tries back off (bounded, jittered, on the injected clock and
randomness); the count resets once the server accepts a watch, so a healthy API that cuts
streams is rejoined in tens of milliseconds, and a failing one is not hammered.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import structlog
from prometheus_client import Counter

from smg.clock import Clock
from smg.core.informer import Backoff, Gone, Informer, Step

log = structlog.get_logger("smg.discovery")


class PodSource(Protocol):
    async def list(self) -> tuple[list[Any], str]: ...
    def watch(
        self, resource_version: str, on_open: Callable[[], None] | None = None
    ) -> AsyncIterator[Any]: ...
    async def close(self) -> None: ...


class PodWatch:
    def __init__(
        self,
        name: str,
        connect: Callable[[], Awaitable[PodSource]],
        on_change: Callable[[Informer], None],
        *,
        clock: Clock,
        rng: random.Random,
        restarts: Counter,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.name = name  # "workers" or "routers": the log's and the metric's word for it
        self.connect = connect
        self.on_change = on_change
        self.clock = clock
        self.rng = rng
        self.restarts = restarts  # labelled (source, reason)
        self.backoff = backoff
        self.informer = Informer()
        self._attempt = 0  # failures in a row: the backoff's exponent

    async def run(self) -> None:
        source: PodSource | None = None
        try:
            while source is None:
                try:
                    source = await self.connect()
                except Exception as exc:  # no config yet, unreadable token: keep trying
                    log.warning("discovery_config_failed", watch=self.name, error=str(exc)[:300])
                    await self._back_off()
            self._attempt = 0
            await self._loop(source)
        finally:
            if source is not None:
                await source.close()

    async def _loop(self, source: PodSource) -> None:
        relist = True
        while True:
            try:
                if relist:
                    items, rv = await source.list()
                    self._changed(self.informer.relisted(items, rv))
                    relist = False
                if await self._follow(source):
                    relist = True
                    self.restarts.labels("kubernetes", "gone").inc()
                    log.info("discovery_relist", watch=self.name, reason="410 Gone")
                    continue
                reason = "ended"
            except Gone:
                relist, reason = True, "410 Gone"
            except Exception as exc:
                reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            self.restarts.labels("kubernetes", "dropped").inc()
            log.info("discovery_watch_retry", watch=self.name, reason=reason, attempt=self._attempt)
            await self._back_off()

    def _changed(self, step: Step) -> None:
        if step is Step.CHANGED:
            self.on_change(self.informer)

    async def _back_off(self) -> None:
        delay = self.backoff.delay_s(self._attempt, self.rng)
        self._attempt += 1
        await self.clock.sleep(delay)

    def _opened(self) -> None:
        self._attempt = 0

    async def _follow(self, source: PodSource) -> bool:
        """Watch from the informer's resourceVersion until the stream ends or drops (raises);
        True when the server says the version is gone (410: list again)."""
        rv = self.informer.resource_version
        assert rv is not None
        async for ev in source.watch(rv, self._opened):
            step = self.informer.event(ev)
            if step is Step.RELIST:
                return True
            self._changed(step)
        return False
