"""gRPC transport adapter: one engine (vLLM or SGLang) behind the smg-grpc-proto contract.

It moves messages only. `grpc_requests` builds requests and `grpc_replies` normalises replies;
the runner decides which worker, whether to retry and what to count. Errors are classified like
the HTTP adapter's: the engine could not be reached (`UpstreamError("connect")`), did not answer
in time (`UpstreamError("timeout")`), or refused the request (`EngineError`, with the gRPC
status). A failure after output started is not raised: it ends each open choice with
`Finished("error")`.

Generate runs on the lean data path (`grpc_lean`: our own HTTP/2 connection, a fraction of
grpc.aio's CPU per streamed message) unless the client is made with `lean_generate=False`; it
yields the events of each batch of messages that arrived together (`generate_batches`), so the
caller can write them to its client at once.

Two grpc.aio channels per engine, each on its own TCP connection (`use_local_subchannel_pool`):
* data: Generate when not lean, and SubscribeKvEvents, with HTTP/2 keepalive so a dead engine
  is found during a long prefill or a silent stream (the lean path pings the same way). The
  engine's server must accept a ping every 30 s without calls
  (`grpc.http2.min_ping_interval_without_data_ms` <= 30000 and `max_ping_strikes` 0 on the
  server), or it answers GOAWAY "too_many_pings" and the connection is re-made.
* probe: health, model info, loads, tokenizer download and Abort; no keepalive (short unary
  calls), so a probe never shares the fate of a data connection a server closed for pinging.

A `grpcs://` engine gets all three connections (lean, data, probe) over TLS, verified and with
the client certificate of `WorkerTls`; `grpc://` stays plaintext.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import grpc
import structlog
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto.generated import (
    common_pb2,
    sglang_scheduler_pb2,
    sglang_scheduler_pb2_grpc,
    vllm_engine_pb2,
    vllm_engine_pb2_grpc,
)

from smg import tracing
from smg.core.idle import IdleSweeper
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.grpc_contract import (
    DETECTION_ORDER,
    PROTO_MODULES,
    SERVICE_NAMES,
    SGLANG,
    VLLM,
)
from smg.pipeline.backends.grpc_errors import (
    DATA_CHANNEL_OPTIONS,
    MAX_MESSAGE_BYTES,
    PROBE_CHANNEL_OPTIONS,
    CallError,
    EngineError,
    classify,
    classify_code,
    describe,
    grpc_target,
    open_channel,
    tls_for,
)
from smg.pipeline.backends.grpc_lean import LeanChannel
from smg.pipeline.backends.grpc_replies import ResponseNormaliser, loads_from, model_info_from
from smg.pipeline.backends.grpc_requests import build_aborts, build_embed, build_generate
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineEvent, EngineModelInfo, EngineRequest
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


class EngineClient:
    """One engine: generate, health, model info, loads, abort, tokenizer chunks."""

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
        if runtime not in SERVICE_NAMES:
            raise ValueError(f"unknown runtime {runtime!r}: expected 'vllm' or 'sglang'")
        self.url = url
        self.runtime = runtime
        self.rpc_timeout_s = rpc_timeout_s  # each control-plane call's deadline
        self.abort_timeout_s = abort_timeout_s
        self._data_channel = data
        self._probe_channel = probe
        self._pb = PROTO_MODULES[runtime]
        stub_class = (
            vllm_engine_pb2_grpc.VllmEngineStub
            if runtime == VLLM
            else sglang_scheduler_pb2_grpc.SglangSchedulerStub
        )
        self._data: Any = stub_class(data)
        self._probe: Any = stub_class(probe)
        self._health: Any = health_pb2_grpc.HealthStub(probe)
        self._standard_health: bool | None = None  # None: not asked yet
        self._aborts: set[Any] = set()  # in-flight fire-and-forget Abort calls
        self._closed = False
        self._lean = lean  # None: Generate on the grpc.aio data channel
        self._idle = idle  # the idle limit of streamed lean Generate calls (None: none)
        self._max_response_bytes = max_response_bytes  # per lean Generate call (None: none)
        self._generate_path = f"/{SERVICE_NAMES[runtime]}/Generate"
        self._parse_response = self._pb.GenerateResponse.FromString
        self.lora_ids: dict[str, str] = {}  # adapter name -> its engine id (lora_adapters)

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
    ) -> AsyncGenerator[list[EngineEvent], None]:
        """`generate`, a list of events at a time: those of the engine messages that arrived
        together (never empty)."""
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
                self._fire_abort(req.request_id)

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
                        raise self._error(exc, timeout_s) from exc
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
                self._fire_abort(req.request_id)

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

    async def abort(
        self, request_ids: Sequence[str], reason: str = "aborted by the gateway"
    ) -> None:
        for message in build_aborts(self.runtime, list(request_ids), reason):
            await self._unary(self._probe.Abort, message, self.abort_timeout_s)

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

    # --- control plane -------------------------------------------------------------------------

    async def health(self, timeout_s: float | None = None) -> bool:
        """`grpc.health.v1.Health/Check` for the engine's service (then the server as a whole if
        that name is unknown); the engine's own HealthCheck RPC when the standard service is not
        there (SGLang's generates one token: give it a few seconds)."""
        timeout = timeout_s or self.rpc_timeout_s
        if self._standard_health is not False:
            for service in (SERVICE_NAMES[self.runtime], ""):
                try:
                    answer = await self._health.Check(
                        health_pb2.HealthCheckRequest(service=service), timeout=timeout
                    )
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.NOT_FOUND:
                        continue
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        self._standard_health = False
                        break
                    return False
                self._standard_health = True
                return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
        try:
            reply = await self._probe.HealthCheck(self._pb.HealthCheckRequest(), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.healthy)

    async def model_info(self) -> EngineModelInfo:
        info = await self._unary(self._probe.GetModelInfo, self._pb.GetModelInfoRequest())
        server = None
        if not info.max_context_length:  # SGLang may carry it in its server args only
            try:
                server = await self._unary(
                    self._probe.GetServerInfo, self._pb.GetServerInfoRequest()
                )
            except (UpstreamError, EngineError) as exc:
                log.debug("server_info_unavailable", url=self.url, error=str(exc))
        return model_info_from(self.runtime, info, server)

    async def dp_size(self, timeout_s: float | None = None) -> int:
        """The engine's data-parallel ranks: vLLM's `data_parallel_size`, SGLang's server arg
        `dp_size` (1 when it reports none)."""
        reply = await self._unary(
            self._probe.GetServerInfo, self._pb.GetServerInfoRequest(), timeout_s
        )
        if self.runtime == VLLM:
            return max(1, int(reply.data_parallel_size))
        size = json_format.MessageToDict(reply.server_args).get("dp_size")
        return max(1, int(size)) if isinstance(size, int | float) else 1

    async def lora_adapters(self, timeout_s: float | None = None) -> dict[str, str] | None:
        """The engine's loaded LoRA adapters, name -> the id requests name them by (SGLang's
        ListLoadedLoRAAdapters); None when the runtime has no such call (vLLM's contract) or the
        engine does not implement it. Kept as `lora_ids` for the requests that follow."""
        if self.runtime != SGLANG:
            return None
        try:
            reply = await self._unary(
                self._probe.ListLoadedLoRAAdapters,
                sglang_scheduler_pb2.ListLoadedLoRAAdaptersRequest(),
                timeout_s,
            )
        except EngineError as exc:
            if exc.status == "UNIMPLEMENTED":
                return None
            raise
        found = {a.lora_name or a.lora_id: a.lora_id or a.lora_name for a in reply.loaded_adapters}
        self.lora_ids = found
        return found

    async def server_args(self, timeout_s: float | None = None) -> dict[str, Any]:
        """An SGLang engine's `GetServerInfo().server_args` as a dict (PD mode reads a prefill's
        KV bootstrap port there). Struct numbers come back as floats."""
        reply = await self._unary(
            self._probe.GetServerInfo, self._pb.GetServerInfoRequest(), timeout_s
        )
        return json_format.MessageToDict(reply.server_args)

    async def loads(self) -> dict[str, Any]:
        """Running/waiting requests and token usage, summed over the engine's DP ranks."""
        if self.runtime == SGLANG:
            request = sglang_scheduler_pb2.GetLoadsRequest(include=["core"])
        else:
            request = vllm_engine_pb2.GetLoadsRequest()
        return loads_from(await self._unary(self._probe.GetLoads, request))

    async def flush_cache(self, timeout_s: float) -> tuple[bool, str]:
        """FlushCache (both runtimes): the engine drops its prefix cache now (`timeout_s` 0 of
        the engine: it refuses while requests run); (success, the engine's message)."""
        reply = await self._unary(
            self._probe.FlushCache, common_pb2.FlushCacheRequest(timeout_s=0.0), timeout_s
        )
        return bool(reply.success), str(reply.message)

    async def tokenizer_chunks(self, timeout_s: float = 120.0) -> AsyncIterator[tuple[bytes, str]]:
        """The GetTokenizer stream as (data, sha256) pairs; sha256 is set on the last only."""
        call = self._probe.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=timeout_s)
        try:
            while True:
                try:
                    chunk = await call.read()
                except grpc.aio.AioRpcError as exc:
                    raise self._error(exc, timeout_s) from exc
                if chunk is grpc.aio.EOF:
                    return
                yield chunk.data, chunk.sha256
        finally:
            if not call.done():
                call.cancel()

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

    # --- helpers -------------------------------------------------------------------------------

    async def _unary(self, method: Any, message: Any, timeout_s: float | None = None) -> Any:
        timeout = timeout_s or self.rpc_timeout_s
        try:
            return await method(message, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, timeout) from exc

    def _error(self, exc: grpc.aio.AioRpcError, timeout_s: float | None) -> Exception:
        return classify(exc, self.url, timeout_s)


async def _detect_runtime(probe: grpc.aio.Channel, url: str, timeout_s: float) -> str:
    for runtime in DETECTION_ORDER:
        stub_class = (
            vllm_engine_pb2_grpc.VllmEngineStub
            if runtime == VLLM
            else sglang_scheduler_pb2_grpc.SglangSchedulerStub
        )
        request = PROTO_MODULES[runtime].GetModelInfoRequest()
        try:
            await stub_class(probe).GetModelInfo(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                continue
            raise classify(exc, url, timeout_s) from exc
        return runtime
    raise EngineError(
        "UNIMPLEMENTED", f"{url} serves neither {SERVICE_NAMES[SGLANG]} nor {SERVICE_NAMES[VLLM]}"
    )
