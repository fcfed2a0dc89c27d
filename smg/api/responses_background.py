"""Background responses (`"background": true`): generations the gateway owns, not a request.

`Background` holds the TaskGroup the generations run in (entered for as long as the gateway
serves: `async with background.serving()`), and at most `limit` of them at once (past it a new
one is refused: 429 `too_many_background_responses`). Each runs through the normal request flow
(admission included) as a stream whose frames go to an `EventLog` instead of a connection: the
POST that started it (with `stream: true`) and any `GET /v1/responses/{id}?stream=true` follow
that log while the response runs. The log is bounded in bytes (`log_bytes`): past it the oldest
frames are dropped, and a reader starting before them gets 400 `replay_unavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from smg.errors import ApiError
from smg.flow.render import SSE_HEADERS
from smg.pipeline.responses_output import ResponsesShaper
from smg.pipeline.responses_renderer import ResponsesRenderer

DEFAULT_LIMIT = 64  # background responses running or queued at once
DEFAULT_LOG_BYTES = 4 << 20  # event bytes kept per running response for live readers
WAIT_S = 15.0  # a reader's wait for new frames before it looks again
log = structlog.get_logger("smg.api")


def split_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The SSE frames in `data` (whole frames, as the renderer writes them), with their
    sequence numbers."""
    out: list[tuple[int, bytes]] = []
    for chunk in data.split(b"\n\n"):
        if not chunk.strip():
            continue
        seq = -1
        for line in chunk.split(b"\n"):
            if line.startswith(b"data: "):
                with contextlib.suppress(orjson.JSONDecodeError):
                    payload = orjson.loads(line[6:])
                    number = payload.get("sequence_number") if isinstance(payload, dict) else None
                    if isinstance(number, int):
                        seq = number
        out.append((seq, chunk + b"\n\n"))
    return out


class EventLog:
    """The frames of one running response, bounded in bytes; readers wake as frames arrive."""

    def __init__(self, max_bytes: int = DEFAULT_LOG_BYTES) -> None:
        self.max_bytes = max_bytes
        self.frames: deque[tuple[int, bytes]] = deque()
        self.size = 0
        self.dropped = -1  # the last sequence number dropped (-1: none)
        self.last = -1  # the last sequence number written
        self.ended = False
        self.changed = asyncio.Condition()

    async def write(self, data: bytes) -> None:
        async with self.changed:
            for seq, chunk in split_frames(data):
                self.frames.append((seq, chunk))
                self.size += len(chunk)
                self.last = max(self.last, seq)
            while self.size > self.max_bytes and len(self.frames) > 1:
                seq, chunk = self.frames.popleft()
                self.size -= len(chunk)
                self.dropped = max(self.dropped, seq)
            self.changed.notify_all()

    async def end(self) -> None:
        async with self.changed:
            self.ended = True
            self.changed.notify_all()

    def check(self, starting_after: int) -> None:
        if starting_after < self.dropped:
            raise ApiError(
                400,
                "replay_unavailable",
                f"Events up to sequence_number {self.dropped} are no longer kept for this "
                "running response; replay from a later starting_after",
                param="starting_after",
            )

    def _past(self, cursor: int) -> Callable[[], bool]:
        return lambda: self.last > cursor or self.ended

    async def follow(self, starting_after: int) -> AsyncIterator[bytes]:
        """Frames past `starting_after`, as they come, until the response ends."""
        cursor = starting_after
        while True:
            async with self.changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait_for(self._past(cursor)), WAIT_S)
                self.check(cursor)
                batch = [(s, f) for s, f in self.frames if s > cursor]
                ended = self.ended
            if batch:
                cursor = batch[-1][0]
                yield b"".join(f for _, f in batch)
            elif ended:
                return


class LogStream(web.StreamResponse):
    """The flow's "client stream" of a background response: its frames go to the event log."""

    def __init__(self, events: EventLog) -> None:
        super().__init__(status=200, headers=SSE_HEADERS)
        self.events = events
        self._opened = False

    def open(self, headers: dict[str, str]) -> LogStream:
        return self

    @property
    def prepared(self) -> bool:
        return self._opened

    async def prepare(self, request: Any) -> None:
        self._opened = True

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            await self.events.write(bytes(data))

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            await self.events.write(data)


class LogRenderer(ResponsesRenderer):
    """The Responses renderer whose streams write to a log (`open_stream`, smg.flow.render)."""

    def __init__(self, renderer: ResponsesRenderer, stream: LogStream) -> None:
        super().__init__(renderer.req, renderer.response_id)
        self.stream = stream

    def _shaper(self, spec: Any, decode: Any) -> ResponsesShaper:
        shaper = super()._shaper(spec, decode)
        shaper.open_stream = self.stream.open  # type: ignore[attr-defined]
        return shaper


@dataclasses.dataclass
class Job:
    render: LogRenderer
    events: EventLog
    task: asyncio.Task[None] | None = None
    items: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # its stored input
    cancelled: bool = False  # by `POST .../cancel` (which stores the cancelled response)


class Background:
    def __init__(self, limit: int = DEFAULT_LIMIT, log_bytes: int = DEFAULT_LOG_BYTES) -> None:
        self.limit = limit
        self.log_bytes = log_bytes
        self.jobs: dict[tuple[str, str], Job] = {}
        self._tg: asyncio.TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Background responses may run inside; at the end the running ones are cancelled."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            try:
                yield
            finally:
                self._tg = None
                for job in list(self.jobs.values()):
                    # (one cancelled already, by the drain, is storing how it ended: let it)
                    if job.task is not None and not job.task.cancelling():
                        job.task.cancel()

    def check(self) -> None:
        """Refuse a new background response the gateway cannot take now."""
        if self._tg is None:
            raise ApiError(503, "shutting_down", "The gateway is not serving background responses")
        if len(self.jobs) >= self.limit:
            raise ApiError(
                429,
                "too_many_background_responses",
                f"Too many background responses: at most {self.limit} run or wait at once",
            )

    def start(
        self,
        key: tuple[str, str],
        renderer: ResponsesRenderer,
        run: Callable[[Job], Awaitable[None]],
    ) -> Job:
        """Run `run(job)` in the gateway's task group (the job listed while it runs)."""
        self.check()
        assert self._tg is not None
        events = EventLog(self.log_bytes)
        job = Job(LogRenderer(renderer, LogStream(events)), events)
        self.jobs[key] = job

        async def running() -> None:
            try:
                await run(job)
            except asyncio.CancelledError:
                if not job.cancelled:
                    raise
            except Exception as exc:  # one response's failure ends it alone
                log.error("background_response_failed", response_id=key[1], error=repr(exc))
            finally:
                self.jobs.pop(key, None)
                await job.events.end()

        job.task = self._tg.create_task(running(), name=f"background-{key[1]}")
        return job


async def sse(
    request: web.Request, chunks: AsyncIterator[bytes] | list[bytes]
) -> web.StreamResponse:
    """An SSE answer of `chunks` (a client gone ends it quietly)."""
    resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await resp.prepare(request)
    with contextlib.suppress(ConnectionError):
        if isinstance(chunks, list):
            await resp.write(b"".join(chunks))
        else:
            async for chunk in chunks:
                await resp.write(chunk)
        await resp.write_eof()
    return resp
