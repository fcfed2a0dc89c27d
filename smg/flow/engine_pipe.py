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

from collections.abc import Callable
from functools import partial
from typing import Protocol

from smg.flow.pipe import RUNNING, Out, Piped
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


class EnginePipe(Piped):
    """One streamed answer from its engine to its client; see the module doc."""

    __slots__ = ("_frames_of", "_last", "probe", "renderer", "source")

    def __init__(
        self, source: Source, out: Out, renderer: Frames, probe: RequestProbe | None
    ) -> None:
        super().__init__(out)
        self.source = source
        self.renderer = renderer
        self.probe = probe  # the request's probe (TTFT), if any, until the first batch
        self._last: list[bytes] = []
        self._frames_of = frames_of(renderer)

    def _start(self) -> None:
        self.source.pipe(self)

    def _pause(self) -> None:
        self.source.pause_source()

    def _resume(self) -> None:
        self.source.resume_source()

    # --- the engine stream's callbacks ---------------------------------------------------------
    def events(self, batch: list[EngineEvent]) -> None:
        if self._outcome is not RUNNING:
            return
        try:
            probe = self.probe
            if probe is not None:  # TTFT: the first batch, once per request
                self.probe = None
                if probe.first_at is None:
                    probe.first_at = probe.now()
            renderer = self.renderer
            frames = self._frames_of(batch)
            if renderer.all_done:
                self._last = frames
                self._settle(None)
            elif frames:
                self._write(frames[0] if len(frames) == 1 else b"".join(frames))
        except Exception as exc:  # a renderer's bug: raised in the request's task
            self._settle(exc)

    # --- the request's task ------------------------------------------------------------------
    async def run(self) -> list[bytes]:
        """Until the answer is over; see the module doc."""
        outcome = await self._until_over()
        if outcome is not None:
            raise outcome
        return self._last


def frames_of(renderer: Frames) -> Callable[[list[EngineEvent]], list[bytes]]:
    """A batch's frames, up to the event that ends the last choice: the renderer's own batch
    call when it has one (`on_events`), else its events one at a time."""
    batch_call: Callable[[list[EngineEvent]], list[bytes]] | None = getattr(
        renderer, "on_events", None
    )
    return batch_call or partial(_one_by_one, renderer)


def _one_by_one(renderer: Frames, batch: list[EngineEvent]) -> list[bytes]:
    """A batch's frames an event at a time, up to the one that ends the last choice (a
    renderer without `on_events`)."""
    if len(batch) == 1:
        return renderer.on_event(batch[0])
    frames: list[bytes] = []
    for ev in batch:
        frames += renderer.on_event(ev)
        if renderer.all_done:
            break
    return frames
