"""An engine's answer to the client: typed events in, the surface's frames out.

The engine adapter delivers `TokenDelta` / `Finished` events, a batch at a time (those that
arrived together). The surface's `Renderer` turns them into its own frames: `OutputShaper` for
OpenAI chat and completions, `GenerateShaper` for SGLang's /generate; a new surface (Anthropic
Messages, Responses) is a new renderer. Here, once for every surface and every plan (one engine
or a PD pair's decode leg):

* a stream is written one write per batch of events (never waiting for more), and the last
  batch goes out with the closing frames and the end of the body in one write;
* a whole answer is collected and sent as one body;
* an engine that fails mid-answer ends the stream with the renderer's failure frames, or fails a
  whole answer that has nothing to show (`engine_error`, 502); what the engine said goes to the
  log with the client's request id and the engine's;
* `finish(success)` reports the engine's outcome exactly once: None when the client left first
  (cancelled, or a write found it gone), which says nothing about the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import structlog
from aiohttp import web

from smg import errors
from smg.errors import ApiError
from smg.flow.answer import Whole
from smg.flow.engine_pipe import EnginePipe, frames_of
from smg.metrics.router import CURRENT, RequestProbe, answered
from smg.pipeline.backends.grpc_pool import EngineStream
from smg.pipeline.chat_answer import ChatStep
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.engine_types import EngineEvent
from smg.pipeline.output import OutputSpec

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
ROUTED_WORKER_HEADER = "X-SMG-Routed-Worker-Id"  # the worker's id (a UUID), never its URL
PREFILL_WORKER_HEADER = "X-SMG-Prefill-Worker-Id"  # PD mode: the prefill leg's worker id
log = structlog.get_logger("smg.pipeline")


class Renderer(Protocol):
    """A surface's view of one engine answer (see smg.pipeline.output.OutputShaper)."""

    error: str | None  # what the engine said when it failed (None: it did not)

    @property
    def all_done(self) -> bool:
        """Every choice has ended (the engine call is no longer needed)."""
        ...

    def on_event(self, ev: EngineEvent) -> list[bytes]: ...
    def closing_frames(self) -> list[bytes]: ...
    def failure_frames(self, err: ApiError) -> list[bytes]: ...
    def collect(self, ev: EngineEvent) -> None: ...
    def whole(self) -> bytes | None: ...


class RenderFactory(Protocol):
    def __call__(
        self, spec: OutputSpec, decode: DecodeFn, now: Callable[[], float]
    ) -> Renderer: ...


class ChatRenderer(Protocol):
    """A surface's view of an HTTP worker's chat answer, read back (see chat.py)."""

    def chat_frames(self, step: ChatStep) -> list[bytes]: ...
    def collect_chat(self, step: ChatStep) -> None: ...
    def closing_frames(self) -> list[bytes]: ...
    def failure_frames(self, err: ApiError) -> list[bytes]: ...
    def whole(self) -> bytes | None: ...


@runtime_checkable
class ChatRenderFactory(Protocol):
    """A surface the gateway renders itself, whatever serves it: an engine's events in token
    mode (`__call__`), an HTTP worker's chat answer otherwise (`for_chat`)."""

    def __call__(
        self, spec: OutputSpec, decode: DecodeFn, now: Callable[[], float]
    ) -> Renderer: ...

    def for_chat(self, created: int) -> ChatRenderer: ...


def sse_response(renderer: object, headers: dict[str, str]) -> web.StreamResponse:
    """The response a stream is written to: a new SSE response, or the one the renderer's
    `open_stream` gives (a Responses tool loop: every model round of one response writes to one
    body, see smg.api.responses_loop)."""
    opener = getattr(renderer, "open_stream", None)
    if opener is not None:
        resp: web.StreamResponse = opener(headers)
        return resp
    return web.StreamResponse(status=200, headers={**SSE_HEADERS, **headers})


def engine_failure(renderer: Renderer, client_id: str | None, engine_id: str) -> ApiError:
    """The client's error for an engine that failed mid-answer; what it said goes to the log."""
    log.warning("engine_failed", request_id=client_id, engine_id=engine_id, error=renderer.error)
    return errors.engine_failed()


async def whole(
    engine: EngineStream,
    renderer: Renderer,
    headers: dict[str, str],
    engine_id: str,
    finish: Callable[[bool | None], None],
) -> Whole:
    """Collect one engine call into one body (a `Whole`: no aiohttp response is built for it);
    `finish(success)` reports the outcome."""
    success: bool | None = None  # stays None if the client leaves first
    probe = CURRENT.get()
    try:
        async for ev in engine.events():
            renderer.collect(ev)
            if renderer.all_done:
                break
        success = renderer.error is None
        if probe is not None:
            answered(probe, renderer)
            probe.failed = not success
        body = renderer.whole()
        if body is None:
            raise engine_failure(renderer, headers.get("X-Request-Id"), engine_id)
        return Whole(body, headers)
    finally:
        await engine.aclose()
        finish(success)


async def stream(
    client: web.Request,
    resp: web.StreamResponse,
    engine: EngineStream,
    renderer: Renderer,
    engine_id: str,
    finish: Callable[[bool | None], None],
) -> None:
    """Relay one engine call as the renderer's frames on `resp` (prepared here for `client`);
    `finish` reports the engine's outcome (None when the client left first)."""
    success: bool | None = None  # stays None if the client leaves first
    probe = CURRENT.get()
    if probe is not None:
        probe.streaming = True
    try:
        try:
            await resp.prepare(client)
            # piped when what `resp` writes goes straight to the lean edge's writer (not when
            # a background response's event log is the "client")
            writer = getattr(resp, "_payload_writer", None)
            if (
                engine.pipeable
                and hasattr(writer, "write_nowait")
                and type(resp).write is web.StreamResponse.write
            ):
                last = await EnginePipe(engine, writer, renderer, probe).run()  # type: ignore[arg-type]
            else:
                last = await _pump(engine, resp, renderer, probe)
            success = renderer.error is None
            if probe is not None:
                answered(probe, renderer)
                probe.failed = not success
            if renderer.error is not None:
                err = engine_failure(renderer, resp.headers.get("X-Request-Id"), engine_id)
                last += renderer.failure_frames(err)
            last += renderer.closing_frames()
            await resp.write_eof(b"".join(last))
        except ConnectionError:  # the client left: nothing more to send
            return
    finally:
        await engine.aclose()
        finish(success)


async def _pump(
    engine: EngineStream,
    resp: web.StreamResponse,
    renderer: Renderer,
    probe: RequestProbe | None,
) -> list[bytes]:
    """`stream`'s loop where the answer cannot be piped (engine_pipe.py does the same from the
    engine connection's callbacks): one write per batch; returns the last batch's frames once
    every choice is done ([] if the stream ended first)."""
    write = resp.write
    batch_frames = frames_of(renderer)
    async for batch in engine.batches():
        if probe is not None and probe.first_at is None:
            probe.first_at = probe.now()  # TTFT: the first batch, once per request
        frames = batch_frames(batch)
        if renderer.all_done:
            return frames
        if frames:
            await write(frames[0] if len(frames) == 1 else b"".join(frames))
    return []
