"""One engine's Generate calls, read into our events: the lean data path or grpc.aio.

The lean path (`grpc_lean`: our own HTTP/2 connection, a fraction of grpc.aio's CPU per streamed
message) gives the events of each batch of messages that arrived together, so the caller can
write them to its client at once (`grpc_lean_stream.LeanStream`, which can also be piped); the
grpc.aio path yields batches of one. Both classify a
failure before output like the other calls (`UpstreamError`, `EngineError`); one after output
started ends each open choice with `Finished("error")`. A call the engine did not end (the
consumer stopped early, was cancelled, or our deadline passed) is cancelled and an Abort for
its request id is sent without waiting (`abort`, the client's fire-and-forget Abort).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import grpc

from smg import tracing
from smg.core.idle import IdleSweeper
from smg.pipeline.backends.grpc_call import LeanCall
from smg.pipeline.backends.grpc_contract import PROTO_MODULES, SERVICE_NAMES
from smg.pipeline.backends.grpc_errors import classify, describe
from smg.pipeline.backends.grpc_lean import LeanChannel
from smg.pipeline.backends.grpc_lean_stream import LeanStream
from smg.pipeline.backends.grpc_replies import ResponseNormaliser
from smg.pipeline.backends.grpc_requests import build_generate
from smg.pipeline.engine_types import EngineEvent, EngineRequest


class EventBatches(Protocol):
    """A Generate call's events a batch at a time (an async generator, or a `LeanStream`)."""

    def __aiter__(self) -> AsyncIterator[list[EngineEvent]]: ...
    def __anext__(self) -> Awaitable[list[EngineEvent]]: ...
    def aclose(self) -> Awaitable[None]: ...


class GenerateCalls:
    """The Generate calls of one engine client, on its lean channel when it has one."""

    def __init__(
        self,
        url: str,
        runtime: str,
        data: Any,
        abort: Callable[[str], None],
        *,
        lean: LeanChannel | None = None,
        idle: IdleSweeper | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        self.url = url
        self.runtime = runtime
        self._data = data  # the grpc.aio stub on the data channel
        self._abort = abort
        self._lean = lean  # None: Generate on the grpc.aio data channel
        self._idle = idle  # the idle limit of streamed lean Generate calls (None: none)
        self._max_response_bytes = max_response_bytes  # per lean Generate call (None: none)
        self._generate_path = f"/{SERVICE_NAMES[runtime]}/Generate"
        self._parse_response = PROTO_MODULES[runtime].GenerateResponse.FromString

    def batches(self, req: EngineRequest, timeout_s: float | None) -> EventBatches:
        """A list of events at a time: those of the engine messages that arrived together
        (never empty)."""
        if self._lean is None:
            return self._batches_of_one(req, timeout_s)
        lean = self._lean
        return LeanStream(
            lambda: self._start_lean(lean, req, timeout_s),
            ResponseNormaliser(
                self.runtime,
                stream=req.stream,
                n=req.sampling.n,
                logprobs=req.sampling.logprobs is not None,
            ),
            self._parse_response,
            url=self.url,
            request_id=req.request_id,
            timeout_s=timeout_s,
            abort=self._abort,
            # a streamed call is cut when the engine stays silent past the idle limit (a
            # non-streamed one sends nothing until it is done: only its deadline applies)
            idle=self._idle if req.stream else None,
            max_response_bytes=self._max_response_bytes,
        )

    async def _batches_of_one(
        self, req: EngineRequest, timeout_s: float | None
    ) -> AsyncGenerator[list[EngineEvent], None]:
        events = self._generate_grpcio(req, timeout_s)
        try:
            async for event in events:
                yield [event]
        finally:
            await events.aclose()

    async def _start_lean(
        self, lean: LeanChannel, req: EngineRequest, timeout_s: float | None
    ) -> LeanCall:
        message = build_generate(self.runtime, req).SerializeToString()
        return await lean.start(self._generate_path, message, timeout_s, tracing.grpc_metadata())

    async def _generate_grpcio(
        self, req: EngineRequest, timeout_s: float | None
    ) -> AsyncGenerator[EngineEvent, None]:
        norm = ResponseNormaliser(
            self.runtime,
            stream=req.stream,
            n=req.sampling.n,
            logprobs=req.sampling.logprobs is not None,
        )
        call = self._data.Generate(
            build_generate(self.runtime, req), timeout=timeout_s, metadata=tracing.grpc_metadata()
        )
        started = False
        ended = False  # the engine is done with the request: no Abort needed
        try:
            while True:
                try:
                    response = await call.read()
                except grpc.aio.AioRpcError as exc:
                    deadline = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                    ended = not deadline  # an engine error ended it; our deadline did not
                    if norm.all_finished:
                        return
                    if not started:
                        raise classify(exc, self.url, timeout_s) from exc
                    for failed in norm.fail(describe(exc)):
                        yield failed
                    return
                if response is grpc.aio.EOF:
                    ended = True
                    for failed in norm.fail("the engine closed the stream before finishing"):
                        yield failed
                    return
                event = norm.feed(response)
                if event is None:
                    continue
                started = True
                ended = norm.all_finished
                yield event
        finally:
            if not call.done():
                call.cancel()
            if not ended:
                self._abort(req.request_id)
