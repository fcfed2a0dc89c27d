"""An engine's streamed answer as callbacks: the events of each read of the engine's connection
are rendered and written to the client's transport from that connection's `data_received`
(`EngineStream.pipe`), with no future, task wake or coroutine resume per read; the request's
task sleeps until the answer is complete, the client leaves, or the client's transport pauses.
pipe.py does the same for an HTTP worker's bytes; this one renders.

Back-pressure: a write that leaves the client's transport paused holds the engine stream (its
messages stay unread and uncredited, so the engine stops once the stream window is spent; the
idle watch counts the time as the client's) and wakes the task, which waits for the client to
drain under the edge's write timeout (a client that stops reading is cut) and resumes it.

`EnginePipe.run()` returns the frames that end the answer (those of the last batch, once every
choice is done; the caller adds the closing frames in one write), or [] when the stream ended
before that (the renderer's `error` says why); raises ConnectionError when the client left, and
what a callback raised (a renderer's bug, an engine message that does not parse) in the
request's own task. A cancelled task stops the pipe: later callbacks do nothing.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from smg.flow.pipe import Out
from smg.metrics.router import RequestProbe
from smg.pipeline.engine_types import EngineEvent


class Frames(Protocol):
    """What the pipe needs of the surface's renderer (`render.Renderer`)."""

    @property
    def all_done(self) -> bool: ...
    def on_event(self, ev: EngineEvent) -> list[bytes]: ...


class Source(Protocol):
    """The engine's stream (`grpc_pool.EngineStream`)."""

    def pipe(self, sink: EnginePipe) -> None: ...
    def pause_source(self) -> None: ...
    def resume_source(self) -> None: ...


_RUNNING = object()


class EnginePipe:
    """One streamed answer from its engine to its client; see the module doc."""

    __slots__ = ("_last", "_outcome", "_paused", "_waiter", "out", "probe", "renderer", "source")

    def __init__(
        self, source: Source, out: Out, renderer: Frames, probe: RequestProbe | None
    ) -> None:
        self.source = source
        self.out = out
        self.renderer = renderer
        self.probe = probe  # the request's probe (TTFT), if any
        self._outcome: object = _RUNNING  # None (over), an exception (failed or client gone)
        self._last: list[bytes] = []
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    # --- the engine stream's callbacks ---------------------------------------------------------
    def events(self, batch: list[EngineEvent]) -> None:
        if self._outcome is not _RUNNING:
            return
        try:
            probe = self.probe
            if probe is not None and probe.first_at is None:
                probe.first_at = probe.now()  # TTFT: the first batch, once per request
            renderer = self.renderer
            if len(batch) == 1:
                frames = renderer.on_event(batch[0])
            else:
                frames = []
                for ev in batch:
                    frames += renderer.on_event(ev)
                    if renderer.all_done:
                        break
            if renderer.all_done:
                self._last = frames
                self._settle(None)
                return
            if not frames:
                return
            more = self.out.write_nowait(frames[0] if len(frames) == 1 else b"".join(frames))
        except Exception as exc:  # ConnectionError: the client is gone; else a bug, raised
            self._settle(exc)  # in the request's task
            return
        if not more and not self._paused:
            self._paused = True
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
    async def run(self) -> list[bytes]:
        """Until the answer is over; see the module doc."""
        loop = asyncio.get_running_loop()
        try:
            self.source.pipe(self)
            while (outcome := self._outcome) is _RUNNING:
                if self._paused:
                    await self.out.wait_writable()  # ConnectionError: the client is gone
                    self._paused = False
                    self.source.resume_source()  # may hand over more now, and pause again
                    continue
                waiter = self._waiter = loop.create_future()
                await waiter
        finally:
            if self._outcome is _RUNNING:  # cancelled, or the client's drain failed
                self._outcome = asyncio.CancelledError()
            self._waiter = None
        if outcome is not None:
            assert isinstance(outcome, BaseException)
            raise outcome
        return self._last
