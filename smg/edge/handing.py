"""The hand-over's part of the edge's connection (mixed into smg/edge/protocol.py's H1Protocol):
route the bytes that start a request, hold them while the request line is incomplete, and give
the connection to `handoff()`'s protocol when it is not native. The decision itself is pure
(smg/edge/handoff.py); the rules are in protocol.py's module doc.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from smg.edge.h1 import H1Connection, Limits, RequestHead
from smg.edge.handoff import PREFIX_BOUND, Native, Prefix, line_of

log = logging.getLogger(__name__)

Handoff = Callable[[], asyncio.Protocol]


class HandingOver:
    """Routing at request boundaries; see the module doc."""

    transport: asyncio.Transport
    core: H1Connection
    current: Any
    closing: bool
    registry: Any
    watcher: Any
    _read_paused: bool

    def _init_handing(self, native: Native | None, handoff: Handoff | None, limits: Limits) -> None:
        on = native is not None and handoff is not None
        self.native = native if on else None
        self.handoff = handoff
        bound = min(PREFIX_BOUND, limits.max_head_bytes)
        self.prefix = Prefix(native, bound) if native is not None and on else None
        self.early = b""  # the next request's first bytes, come while the answer is written
        self.handed = False  # the connection is not ours (handed over, or refused)
        self.native_next = False  # the next head was judged native as its line came

    def _await_head(self) -> None:
        """Bytes of a request line are held: its deadline runs (the protocol's timers)."""
        raise NotImplementedError

    def _stop_timers(self) -> None:
        raise NotImplementedError

    def _route(self, data: bytes) -> bytes | None:
        """What of `data` the core is to parse now (None: held, or the connection handed over)."""
        core = self.core
        prefix = self.prefix
        assert prefix is not None
        if self.closing:
            return data
        if not (self.early or (core.between and not core.events and not core.done)):
            return data  # mid-request, or behind queued ones: the core's
        if self.current is not None:  # judged once the answer in flight is done
            if len(self.early) + len(data) <= prefix.bound:
                self.early += data
                return None
            data, self.early = self.early + data, b""
            return data
        decision, data = prefix.add(data)
        if decision is None:
            self._await_head()
            return None
        if decision is False:
            self._hand_over(data)
            return None
        self.native_next = prefix.judged
        return data

    def _holding(self) -> bool:
        return self.prefix is not None and bool(self.prefix.held)

    def _not_native(self, head: RequestHead) -> bool:
        """A parsed request not judged as its line came (so pipelined) that is not native: it
        cannot be handed over."""
        if self.native_next:
            self.native_next = False
            return False
        return self.native is not None and self.native(line_of(head.method, head.path)) is False

    def _hand_over(self, data: bytes) -> None:
        """The connection is `handoff()`'s from now on: timers off, out of the registry."""
        self.handed = self.closing = True
        self._stop_timers()
        self.registry.discard(self)
        if self.watcher is not None:
            self.watcher.forget(self)  # the new protocol is admitted by its own (one count)
        transport = self.transport
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        assert self.handoff is not None
        try:
            new = self.handoff()
        except Exception:
            log.exception("edge: the hand-over protocol could not be made")
            transport.abort()
            return
        transport.set_protocol(new)
        new.connection_made(transport)
        if data and not transport.is_closing():
            new.data_received(data)
