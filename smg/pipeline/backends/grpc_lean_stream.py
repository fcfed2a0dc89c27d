"""One lean Generate call read into our events (`GenerateCalls.batches` on a lean channel).

A `LeanStream` is an async iterator of event batches (the events of the engine messages that
arrived together; never an empty batch): a plain object, not an async generator, so it can also
be piped. `pipe(sink)` hands each read's events to an `EventSink` from the connection's
callbacks (`LeanCall.pipe`), with no future, task wake or coroutine resume per read; `hold` and
`release` carry the sink's back-pressure to the call (held: nothing read, no credit, so the
engine stops once the stream window is spent).

Either way, the same rules (the generator this replaces had them): a failure before any output is
raised, classified (`UpstreamError`, `EngineError`); one after output ends each open choice with
`Finished("error")`; the stream is cut when the engine stays silent past the idle limit (a
non-streamed call sends nothing until it is done: only its deadline applies) or its answer
exceeds the byte cap. `aclose` ends a call the engine did not end (the consumer stopped early or
was cancelled, or our deadline passed): the call is cancelled and an Abort for its request id is
sent without waiting. A call that finished with only its trailers to come is left to end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from smg.core.idle import IdleSweeper, Watch
from smg.pipeline.backends.grpc_call import LeanCall
from smg.pipeline.backends.grpc_errors import CallError, classify_code
from smg.pipeline.backends.grpc_replies import ResponseNormaliser
from smg.pipeline.engine_types import EngineEvent


class EventSink(Protocol):
    """Who reads a piped stream: its events a batch at a time, then its end (or a failure of
    the gateway's own, e.g. a message that does not parse)."""

    def events(self, batch: list[EngineEvent]) -> None: ...
    def end(self) -> None: ...
    def fail(self, exc: BaseException) -> None: ...


class LeanStream:
    """See the module doc. Built by `GenerateCalls`, started by the first `__anext__`."""

    __slots__ = (
        "_abort",
        "_call",
        "_closed",
        "_done",
        "_ended",
        "_idle",
        "_left",
        "_limit",
        "_norm",
        "_parse",
        "_request_id",
        "_sink",
        "_start",
        "_started",
        "_timeout_s",
        "_url",
        "_watch",
    )

    def __init__(
        self,
        start: Callable[[], Any],
        norm: ResponseNormaliser,
        parse: Callable[[bytes], Any],
        *,
        url: str,
        request_id: str,
        timeout_s: float | None,
        abort: Callable[[str], None],
        idle: IdleSweeper | None,
        max_response_bytes: int | None,
    ) -> None:
        self._start = start  # () -> awaitable LeanCall (raises CallError)
        self._norm = norm
        self._parse = parse
        self._url = url
        self._request_id = request_id
        self._timeout_s = timeout_s
        self._abort = abort
        self._idle = idle  # streamed calls only (None: no idle limit)
        self._limit = max_response_bytes
        self._left = max_response_bytes  # what the call may still send us (None: no cap)
        self._call: LeanCall | None = None
        self._watch: Watch | None = None
        self._sink: EventSink | None = None
        self._started = False  # events went out
        # the engine is done with the request: no Abort needed (None: as the normaliser says,
        # every choice finished; not written per read)
        self._ended: bool | None = None
        self._done = False  # nothing more to hand out
        self._closed = False

    # --- the iterator ----------------------------------------------------------------------
    def __aiter__(self) -> LeanStream:
        return self

    async def __anext__(self) -> list[EngineEvent]:
        call = self._call
        if call is None:
            call = await self._open()
        watch = self._watch
        if watch is not None:
            watch.busy = False  # the consumer is back: waiting on the engine again
        while not self._done:
            try:
                messages = await call.read_batch()
            except CallError as exc:
                batch = self._failed(exc.code, exc.details)
            else:
                if messages:
                    batch = self._take(messages, sum(map(len, messages)))
                else:
                    batch = self._closed_early()
            if batch:
                if watch is not None:  # while the consumer has it, the engine is not idle
                    watch.busy = True
                return batch
        raise StopAsyncIteration

    async def _open(self) -> LeanCall:
        try:
            call = await self._start()
        except CallError as exc:
            raise classify_code(exc.code, exc.details, self._url, self._timeout_s) from exc
        self._call = call
        if self._idle is not None:
            self._watch = self._idle.watch(call.expire_idle)
        return call

    # --- what each mode shares -----------------------------------------------------------------
    def _take(self, messages: list[bytes], size: int) -> list[EngineEvent]:
        """The events of `messages` (non-empty; `size`: their payload bytes), in order."""
        watch = self._watch
        if watch is not None:
            watch.progress += 1
        left = self._left
        if left is not None:
            left = self._left = left - size
            if left < 0:  # a hostile engine's endless answer: cut it, as HTTP does
                self._done = True
                if self._ended is None:  # (what it was before the cut)
                    self._ended = self._norm.all_finished
                return list(self._norm.fail(f"the engine's answer exceeded {self._limit} bytes"))
        batch: list[EngineEvent] = self._norm.feed_all(map(self._parse, messages))
        if batch:
            self._started = True
        return batch

    def _closed_early(self) -> list[EngineEvent]:
        """The call ended OK with choices unfinished."""
        self._done = self._ended = True
        return list(self._norm.fail("the engine closed the stream before finishing"))

    def _failed(self, code: str, details: str) -> list[EngineEvent]:
        """The call ended with status `code`: raised when nothing went out yet, else the open
        choices' `Finished("error")`."""
        self._done = True
        self._ended = code != "DEADLINE_EXCEEDED"  # an engine error ended it; ours did not
        if self._norm.all_finished:
            return []
        if not self._started:
            raise classify_code(code, details, self._url, self._timeout_s)
        return list(self._norm.fail(f"{code}: {details or 'no details'}"))

    # --- the pipe ------------------------------------------------------------------------------
    @property
    def pipeable(self) -> bool:
        """Started, and not over: `pipe` would hand over the rest."""
        return self._call is not None and not self._done and not self._closed

    def pipe(self, sink: EventSink) -> None:
        """From now on `sink` gets the events (see the module doc); what already arrived is
        handed over now. Only once `pipeable`."""
        call = self._call
        assert call is not None and self.pipeable, "pipe a started stream"
        self._sink = sink
        if self._watch is not None:
            self._watch.busy = False
        call.pipe(self)

    def hold(self) -> None:
        """The sink takes nothing for now (its client is slow: not the engine's silence)."""
        if self._watch is not None:
            self._watch.busy = True
        if self._call is not None:
            self._call.hold()

    def release(self) -> None:
        """The sink takes events again; what was kept is handed over now."""
        if self._watch is not None:
            self._watch.busy = False
        if self._call is not None:
            self._call.release()

    # the call's callbacks (`CallSink`)
    def messages(self, messages: list[bytes], size: int) -> None:
        sink = self._sink
        if self._done or sink is None:
            return
        try:
            batch = self._take(messages, size)
        except Exception as exc:  # e.g. a message that does not parse: the sink's failure
            self._done = True
            sink.fail(exc)
            return
        if batch:
            sink.events(batch)
        if self._done:
            sink.end()

    def ended(self, status: str, details: str) -> None:
        sink = self._sink
        if self._done or sink is None:
            return
        try:
            batch = self._closed_early() if status == "OK" else self._failed(status, details)
        except Exception as exc:  # only before any output, which a piped stream is past
            sink.fail(exc)
            return
        if batch:
            sink.events(batch)
        sink.end()

    # --- the end ---------------------------------------------------------------------------
    async def aclose(self) -> None:
        """End the call if the engine did not (see the module doc); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._sink = None
        call = self._call
        if call is None:
            return  # never started
        if self._watch is not None and self._idle is not None:
            self._idle.release(self._watch)
        ended = self._ended
        if ended is None:
            ended = self._norm.all_finished
        if not call.done():
            if ended:
                call.detach()  # finished: the trailers are on their way
            else:
                call.cancel()
        if not ended:
            self._abort(self._request_id)
