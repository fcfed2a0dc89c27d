"""gRPC transport adapter: one engine (vLLM or SGLang) behind the smg-grpc-proto contract.

It moves messages only. `grpc_requests` builds requests and `grpc_replies` normalises replies;
the runner decides which worker, whether to retry and what to count. Errors are classified like
the HTTP adapter's: the engine could not be reached (`UpstreamError("connect")`), did not answer
in time (`UpstreamError("timeout")`), or refused the request (`EngineError`, with the gRPC
status). A failure after output started is not raised: it ends each open choice with
`Finished("error")`.

Generate runs on the lean data path (`grpc_lean`) unless the client is made with
`lean_generate=False`; `grpc_generate` reads its calls into our events (`generate_batches`: those
of each batch of messages that arrived together).

Two grpc.aio channels per engine, each on its own TCP connection (`use_local_subchannel_pool`):
* data: Generate when not lean, and SubscribeKvEvents, with HTTP/2 keepalive so a dead engine
  is found during a long prefill or a silent stream (the lean path pings the same way). The
  engine's server must accept a ping every 30 s without calls
  (`grpc.http2.min_ping_interval_without_data_ms` <= 30000 and `max_ping_strikes` 0 on the
  server), or it answers GOAWAY "too_many_pings" and the connection is re-made.
* probe: health, model info, loads, tokenizer download and Abort (`grpc_control`); no keepalive
  (short unary calls), so a probe never shares the fate of a data connection a server closed
  for pinging.

A `grpcs://` engine gets all three connections (lean, data, probe) over TLS, verified and with
the client certificate of `WorkerTls`; `grpc://` stays plaintext.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import grpc
import structlog
from smg_grpc_proto.generated import common_pb2

from smg.core.idle import IdleSweeper
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.grpc_contract import (
    DETECTION_ORDER,
    PROTO_MODULES,
    SERVICE_NAMES,
    SGLANG,
    VLLM,
)
from smg.pipeline.backends.grpc_control import EngineControl, stub_for
from smg.pipeline.backends.grpc_errors import (
    DATA_CHANNEL_OPTIONS,
    MAX_MESSAGE_BYTES,
    PROBE_CHANNEL_OPTIONS,
    EngineError,
    classify,
    describe,
    grpc_target,
    open_channel,
    tls_for,
)
from smg.pipeline.backends.grpc_generate import EventBatches, GenerateCalls
from smg.pipeline.backends.grpc_lean import LeanChannel
from smg.pipeline.backends.grpc_requests import build_aborts, build_embed
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineEvent, EngineRequest
from smg.tls import WorkerTls

log = structlog.get_logger("smg.grpc")

__all__ = [
    "DATA_CHANNEL_OPTIONS",
    "MAX_MESSAGE_BYTES",
    "PROBE_CHANNEL_OPTIONS",
    "EngineClient",
    "EngineError",
    "grpc_target",
]


class EngineClient(EngineControl):
    """One engine: generate, embed and KV events on the data plane, with the control calls of
    `EngineControl` (health, model info, loads, abort, tokenizer chunks)."""

    def __init__(
        self,
        url: str,
        runtime: str,
        data: grpc.aio.Channel,
        probe: grpc.aio.Channel,
        *,
        rpc_timeout_s: float = 5.0,
        abort_timeout_s: float = 1.0,
        lean: LeanChannel | None = None,
        idle: IdleSweeper | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        super().__init__(
            url, runtime, probe, rpc_timeout_s=rpc_timeout_s, abort_timeout_s=abort_timeout_s
        )
        self._data_channel = data
        self._data: Any = stub_for(runtime, data)
        self._aborts: set[Any] = set()  # in-flight fire-and-forget Abort calls
        self._closed = False
        self._lean = lean  # None: Generate on the grpc.aio data channel
        self._generate = GenerateCalls(
            url,
            runtime,
            self._data,
            self._fire_abort,
            lean=lean,
            idle=idle,
            max_response_bytes=max_response_bytes,
        )

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        runtime: str | None = None,
        rpc_timeout_s: float = 5.0,
        abort_timeout_s: float = 1.0,
        lean_generate: bool = True,
        tls: WorkerTls | None = None,
        address_guard: AddressGuard | None = None,
        idle: IdleSweeper | None = None,
        max_response_bytes: int | None = None,
    ) -> EngineClient:
        """Open the channels; when `runtime` is None, ask GetModelInfo of the SGLang service and
        then the vLLM one (the other answers UNIMPLEMENTED). With a runtime given nothing is sent:
        the first call connects. A `grpcs://` URL connects over TLS with `tls` (default: the
        system's trust store, no client certificate); `grpc://` is plaintext."""
        target, tls = grpc_target(url), tls_for(url, tls)
        data = open_channel(target, DATA_CHANNEL_OPTIONS, tls)
        probe = open_channel(target, PROBE_CHANNEL_OPTIONS, tls)
        ok = False
        try:
            if runtime is None:
                runtime = await _detect_runtime(probe, url, rpc_timeout_s)
            client = cls(
                url,
                runtime,
                data,
                probe,
                rpc_timeout_s=rpc_timeout_s,
                abort_timeout_s=abort_timeout_s,
                lean=LeanChannel(
                    target,
                    max_message_bytes=MAX_MESSAGE_BYTES,
                    ssl_context=None if tls is None else tls.h2,
                    address_guard=address_guard,
                )
                if lean_generate
                else None,
                idle=idle,
                max_response_bytes=max_response_bytes,
            )
            ok = True
            return client
        finally:
            if not ok:
                await data.close()
                await probe.close()

    # --- data plane ----------------------------------------------------------------------------

    async def generate(
        self, req: EngineRequest, *, timeout_s: float | None = None
    ) -> AsyncGenerator[EngineEvent, None]:
        """Stream our events for one request. If the consumer stops early or is cancelled, the
        call is cancelled and an Abort for `req.request_id` is sent without waiting for it."""
        batches = self.generate_batches(req, timeout_s=timeout_s)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()

    def generate_batches(
        self, req: EngineRequest, *, timeout_s: float | None = None
    ) -> EventBatches:
        """`generate`, a list of events at a time: those of the engine messages that arrived
        together (never empty)."""
        return self._generate.batches(req, timeout_s)

    def _fire_abort(self, request_id: str) -> None:
        """Send Abort and return at once: grpc.aio runs a unary call by itself; the client keeps
        a reference until it is done and `close()` waits for the stragglers."""
        if self._closed:
            return
        try:
            messages = build_aborts(self.runtime, [request_id], "cancelled by the gateway")
            calls = [self._probe.Abort(m, timeout=self.abort_timeout_s) for m in messages]
        except Exception as exc:  # never let the abort path break the caller's cancellation
            log.warning("abort_not_sent", url=self.url, request_id=request_id, error=repr(exc))
            return
        for call in calls:
            self._aborts.add(call)
            call.add_done_callback(self._abort_done)

    def _abort_done(self, call: Any) -> None:
        # best effort: an Abort that fails (engine gone, request already over) changes nothing
        self._aborts.discard(call)

    async def embed(
        self,
        request_id: str,
        input_ids: Sequence[int],
        text: str,
        timeout_s: float,
        dp_rank: int | None = None,
    ) -> tuple[list[float], int]:
        """One Embed call on the data channel: (the vector, the prompt tokens the engine
        counted). Raises like the control calls (`UpstreamError`, `EngineError`)."""
        message = build_embed(self.runtime, request_id, input_ids, text, dp_rank)
        reply = await self._unary(self._data.Embed, message, timeout_s)
        return list(reply.embedding), int(reply.prompt_tokens) or len(input_ids)

    async def subscribe_kv_events(
        self, start_sequence_number: int = 0
    ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """The SubscribeKvEvents stream (both runtimes serve the common messages), from
        `start_sequence_number` (0: live only), with load records before the first batch. Runs
        on the data channel, whose keepalive finds a dead engine on a silent stream. Ends when
        the engine ends the stream; a failure raises `UpstreamError`; closing or cancelling the
        consumer cancels the call. A call cancelled under us (the channel was closed) is an
        `UpstreamError` too, not a `CancelledError` that would end the consumer's task."""
        request = common_pb2.SubscribeKvEventsRequest(
            start_sequence_number=start_sequence_number, load_records_before_first_batch=True
        )
        call = self._data.SubscribeKvEvents(request)
        try:
            while True:
                try:
                    batch = await call.read()
                except grpc.aio.AioRpcError as exc:
                    err = self._error(exc, None)
                    if isinstance(err, EngineError):
                        err = UpstreamError("stream", f"{self.url}: {err}")
                    raise err from exc
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
                    raise UpstreamError("connect", f"{self.url}: the channel was closed") from None
                if batch is grpc.aio.EOF:
                    return
                yield batch
        finally:
            if not call.done():
                call.cancel()

    async def close(self) -> None:
        """Wait for in-flight Aborts (each has a short deadline), then close both channels."""
        self._closed = True
        for call in list(self._aborts):
            try:
                await call
            except grpc.aio.AioRpcError as exc:
                log.debug("abort_failed", url=self.url, error=describe(exc))
        if self._lean is not None:
            await self._lean.close()
        await self._data_channel.close()
        await self._probe_channel.close()


async def _detect_runtime(probe: grpc.aio.Channel, url: str, timeout_s: float) -> str:
    for runtime in DETECTION_ORDER:
        request = PROTO_MODULES[runtime].GetModelInfoRequest()
        try:
            await stub_for(runtime, probe).GetModelInfo(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                continue
            raise classify(exc, url, timeout_s) from exc
        return runtime
    raise EngineError(
        "UNIMPLEMENTED", f"{url} serves neither {SERVICE_NAMES[SGLANG]} nor {SERVICE_NAMES[VLLM]}"
    )
