"""One engine's Generate calls, read into our events: the lean data path or grpc.aio.

The lean path (`grpc_lean`: our own HTTP/2 connection, a fraction of grpc.aio's CPU per streamed
message) yields the events of each batch of messages that arrived together, so the caller can
write them to its client at once; the grpc.aio path yields batches of one. Both classify a
failure before output like the other calls (`UpstreamError`, `EngineError`); one after output
started ends each open choice with `Finished("error")`. A call the engine did not end (the
consumer stopped early, was cancelled, or our deadline passed) is cancelled and an Abort for
its request id is sent without waiting (`abort`, the client's fire-and-forget Abort).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import grpc

from smg import tracing
from smg.core.idle import IdleSweeper
from smg.pipeline.backends.grpc_contract import PROTO_MODULES, SERVICE_NAMES
from smg.pipeline.backends.grpc_errors import CallError, classify, classify_code, describe
from smg.pipeline.backends.grpc_lean import LeanChannel
from smg.pipeline.backends.grpc_replies import ResponseNormaliser
from smg.pipeline.backends.grpc_requests import build_generate
from smg.pipeline.engine_types import EngineEvent, EngineRequest


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

    def batches(
        self, req: EngineRequest, timeout_s: float | None
    ) -> AsyncGenerator[list[EngineEvent], None]:
        """A list of events at a time: those of the engine messages that arrived together
        (never empty)."""
        if self._lean is None:
            return self._batches_of_one(req, timeout_s)
        return self._generate_lean(self._lean, req, timeout_s)

    async def _batches_of_one(
        self, req: EngineRequest, timeout_s: float | None
    ) -> AsyncGenerator[list[EngineEvent], None]:
        events = self._generate_grpcio(req, timeout_s)
        try:
            async for event in events:
                yield [event]
        finally:
            await events.aclose()

    async def _generate_lean(
        self, lean: LeanChannel, req: EngineRequest, timeout_s: float | None
    ) -> AsyncGenerator[list[EngineEvent], None]:
        norm = ResponseNormaliser(self.runtime, stream=req.stream, n=req.sampling.n)
        message = build_generate(self.runtime, req).SerializeToString()
        try:
            call = await lean.start(
                self._generate_path, message, timeout_s, tracing.grpc_metadata()
            )
        except CallError as exc:
            raise classify_code(exc.code, exc.details, self.url, timeout_s) from exc
        parse, feed = self._parse_response, norm.feed
        started = False
        ended = False  # the engine is done with the request: no Abort needed
        # a streamed call is cut when the engine stays silent past the idle limit (a
        # non-streamed one sends nothing until it is done: only its deadline applies)
        idle = self._idle if req.stream else None
        watch = idle.watch(call.expire_idle) if idle is not None else None
        left = self._max_response_bytes  # what the call may still send us (None: no cap)
        try:
            while True:
                try:
                    messages = await call.read_batch()
                except CallError as exc:
                    ended = exc.code != "DEADLINE_EXCEEDED"  # an engine error ended it
                    if norm.all_finished:
                        return
                    if not started:
                        raise classify_code(exc.code, exc.details, self.url, timeout_s) from exc
                    failed = norm.fail(f"{exc.code}: {exc.details or 'no details'}")
                    if failed:
                        yield list(failed)
                    return
                if not messages:
                    ended = True
                    failed = norm.fail("the engine closed the stream before finishing")
                    if failed:
                        yield list(failed)
                    return
                if watch is not None:
                    watch.progress += 1
                if left is not None:
                    left -= sum(map(len, messages))
                    if left < 0:  # a hostile engine's endless answer: cut it, as HTTP does
                        failed = norm.fail(
                            f"the engine's answer exceeded {self._max_response_bytes} bytes"
                        )
                        if failed:
                            yield list(failed)
                        return
                batch: list[EngineEvent] = []
                for m in messages:
                    event = feed(parse(m))
                    if event is not None:
                        batch.append(event)
                if batch:
                    started = True
                    ended = norm.all_finished
                    if watch is None:
                        yield batch
                    else:  # while the consumer has the batch, the engine is not the one idle
                        watch.busy = True
                        yield batch
                        watch.busy = False
        finally:
            if idle is not None and watch is not None:
                idle.release(watch)
            if not call.done():
                if ended:
                    call.detach()  # finished: the trailers are on their way
                else:
                    call.cancel()
            if not ended:
                self._abort(req.request_id)

    async def _generate_grpcio(
        self, req: EngineRequest, timeout_s: float | None
    ) -> AsyncGenerator[EngineEvent, None]:
        norm = ResponseNormaliser(self.runtime, stream=req.stream, n=req.sampling.n)
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
