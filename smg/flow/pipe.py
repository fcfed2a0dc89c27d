"""A relayed stream's body as callbacks: the worker's bytes go from the upstream connection's
`data_received` straight to the client's transport, with no future, task wake or coroutine
resume per read; the request's task sleeps until the stream ends, fails, the client leaves, or
the client's transport is paused.

Back-pressure both ways: a write that leaves the client's transport paused stops reading the
upstream socket (`Body.pause_source`) and wakes the task, which waits for the client to drain
(the edge's write timeout: a client that stops reading is cut) and resumes the upstream. What can
pile up is one upstream read past the client's high-water mark. While the client is paused the
stream's idle watch is `busy` (a slow client is not a silent worker); every chunk bumps its
progress. With `first_token` (tracing on), the first chunk records the time to the first token
in the request's own context.

`Pipe.run()` returns None when the stream ended, the failure (the idle cut, the deadline, a
broken or malformed answer) when it failed, and raises ConnectionError when the client left;
a cancelled task (the client's connection lost) stops the pipe: later callbacks do nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Protocol

from smg import tracing
from smg.core.idle import Watch


class Source(Protocol):
    """The upstream body (`h1_body.Body`)."""

    def pipe(self, sink: Pipe) -> None: ...
    def pause_source(self) -> None: ...
    def resume_source(self) -> None: ...


class Out(Protocol):
    """The client's side (`edge_answers.EdgeWriter`)."""

    def write_nowait(self, data: bytes) -> bool: ...
    def wait_writable(self) -> Awaitable[None]: ...


_RUNNING = object()


class Pipe:
    """One stream's body from its worker to its client; see the module doc."""

    __slots__ = ("_first", "_outcome", "_paused", "_waiter", "out", "source", "watch")

    def __init__(self, source: Source, out: Out, watch: Watch, first_token: bool = False) -> None:
        self.source = source
        self.out = out
        self.watch = watch
        self._outcome: object = _RUNNING  # None (ended), an exception (failed or client gone)
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._first: Callable[[], None] | None = None
        if first_token:
            ctx = contextvars.copy_context()  # the request's span, not the connection's
            self._first = lambda: ctx.run(tracing.first_token)

    # --- the upstream connection's callbacks -------------------------------------------------
    def data(self, chunk: bytes) -> None:
        if self._outcome is not _RUNNING:
            return
        watch = self.watch
        watch.progress += 1
        if self._first is not None:
            first, self._first = self._first, None
            first()
        try:
            more = self.out.write_nowait(chunk)
        except ConnectionError as exc:  # the client is gone
            self._settle(exc)
            return
        if not more and not self._paused:
            self._paused = True
            watch.busy = True  # a slow client is not an idle worker
            self.source.pause_source()
            self._wake()

    def end(self) -> None:
        self._settle(None)

    def fail(self, exc: BaseException) -> None:
        self._settle(exc)

    def _settle(self, outcome: BaseException | None) -> None:
        if self._outcome is _RUNNING:
            self._outcome = outcome
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # --- the request's task ------------------------------------------------------------------
    async def run(self) -> BaseException | None:
        """Until the stream is over; see the module doc."""
        loop = asyncio.get_running_loop()
        try:
            self.source.pipe(self)
            while (outcome := self._outcome) is _RUNNING:
                if self._paused:
                    await self.out.wait_writable()  # ConnectionError: the client is gone
                    self._paused = False
                    self.watch.busy = False
                    self.source.resume_source()
                    continue
                waiter = self._waiter = loop.create_future()
                await waiter
        finally:
            if self._outcome is _RUNNING:  # cancelled, or the client's drain failed
                self._outcome = asyncio.CancelledError()
            self._waiter = None
            if self._paused:  # ended while its client was slow: the connection may be reused
                self._paused = False
                self.watch.busy = False
                self.source.resume_source()
        if isinstance(outcome, ConnectionError):
            raise outcome
        assert outcome is None or isinstance(outcome, BaseException)
        return outcome
