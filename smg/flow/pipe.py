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
The body's last bytes, when its end came with them, are not written: they wait in `tail` for
the caller to write with the answer's own end (one write, not two).
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


RUNNING = object()  # a pipe's outcome while it has none yet


class Piped:
    """What a pipe's two sides share (this module's `Pipe`, engine_pipe's `EnginePipe`): the
    outcome the callbacks settle, the client's pause, and the request's task asleep until one
    of them. A subclass says how its source starts (`_start`), pauses and resumes."""

    __slots__ = ("_outcome", "_paused", "_waiter", "out")

    def __init__(self, out: Out) -> None:
        self.out = out
        self._outcome: object = RUNNING  # None (over), an exception (failed or client gone)
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    def _start(self) -> None: ...
    def _pause(self) -> None: ...
    def _resume(self) -> None: ...

    # --- the source's callbacks --------------------------------------------------------------
    def end(self) -> None:
        self._settle(None)

    def fail(self, exc: BaseException) -> None:
        self._settle(exc)

    def _write(self, data: bytes) -> None:
        """`data` to the client without waiting; a client that takes no more pauses the source
        and wakes the task (which waits for the drain), a client gone settles the pipe."""
        write = self.out.write_nowait  # (an attribute load, not a method load: see EdgeWriter)
        try:
            more = write(data)
        except ConnectionError as exc:
            self._settle(exc)
            return
        if not more and not self._paused:
            self._paused = True
            self._pause()
            self._wake()

    def _settle(self, outcome: BaseException | None) -> None:
        if self._outcome is RUNNING:
            self._outcome = outcome
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # --- the request's task ------------------------------------------------------------------
    async def _until_over(self) -> BaseException | None:
        """Start the source, then sleep until the outcome, draining the client (and resuming
        the source) whenever it paused; the outcome (ConnectionError: the client is gone)."""
        loop = asyncio.get_running_loop()
        try:
            self._start()
            while (outcome := self._outcome) is RUNNING:
                if self._paused:
                    await self.out.wait_writable()  # ConnectionError: the client is gone
                    self._paused = False
                    self._resume()  # may hand over more now, and pause again
                    continue
                waiter = self._waiter = loop.create_future()
                await waiter
        finally:
            if self._outcome is RUNNING:  # cancelled, or the client's drain failed
                self._outcome = asyncio.CancelledError()
            self._waiter = None
        assert outcome is None or isinstance(outcome, BaseException)
        return outcome


class Pipe(Piped):
    """One stream's body from its worker to its client; see the module doc."""

    __slots__ = ("_first", "source", "tail", "watch")

    def __init__(self, source: Source, out: Out, watch: Watch, first_token: bool = False) -> None:
        super().__init__(out)
        self.source = source
        self.watch = watch
        self.tail = b""  # the body's last bytes, held for the caller's end (see the module doc)
        self._first: Callable[[], None] | None = None
        if first_token:
            ctx = contextvars.copy_context()  # the request's span, not the connection's
            self._first = lambda: ctx.run(tracing.first_token)

    def _start(self) -> None:
        self.source.pipe(self)

    def _pause(self) -> None:
        self.watch.busy = True  # a slow client is not an idle worker
        self.source.pause_source()

    def _resume(self) -> None:
        self.watch.busy = False
        self.source.resume_source()

    # --- the upstream connection's callbacks -------------------------------------------------
    def data(self, chunk: bytes) -> None:
        if self._outcome is not RUNNING:
            return
        self.watch.progress += 1
        if self._first is not None:
            self._first_token()
        self._write(chunk)

    def last(self, chunk: bytes) -> None:
        """The body's last bytes, its end right behind them: held for the caller's end."""
        if self._outcome is not RUNNING:
            return
        if self._first is not None:  # the whole body in one read
            self._first_token()
        self.tail = chunk
        self._settle(None)

    def _first_token(self) -> None:
        first, self._first = self._first, None
        if first is not None:
            first()

    # --- the request's task ------------------------------------------------------------------
    async def run(self) -> BaseException | None:
        """Until the stream is over; see the module doc."""
        try:
            outcome = await self._until_over()
        finally:
            if self._paused:  # ended while its client was slow: the connection may be reused
                self._paused = False
                self._resume()
        if isinstance(outcome, ConnectionError):
            raise outcome
        return outcome
