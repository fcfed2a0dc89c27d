"""gRPC workers as the gateway sees them: one `EngineClient` per worker URL, its health probe,
and the started stream the runner retries on.

`EnginePool.client(url)` is a dict lookup on the hot path: a worker is routable only after a
probe connected its client. `EngineStream` is what one attempt returns: the engine's first event
is already in, so a worker that cannot be reached fails the attempt (and the runner moves on)
before anything is sent to the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
import structlog

from smg import errors
from smg.core.dp import engine_url, rank_of
from smg.core.health import ProbeResult
from smg.core.idle import IdleSweeper
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.grpc import EngineClient, EngineError
from smg.pipeline.backends.grpc_generate import EventBatches
from smg.pipeline.backends.grpc_lean_stream import EventSink, LeanStream
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineEvent, EngineRequest
from smg.tls import WorkerTls

log = structlog.get_logger("smg.grpc")


def is_grpc_url(url: str) -> bool:
    return url.startswith(("grpc://", "grpcs://"))


class EnginePool:
    """The engine clients by URL. A URL is checked against the worker address policy before
    its first connect (its name resolved: every address must be allowed), and the lean data
    path checks again at every connect; streamed Generate calls run under the idle limit, and
    every Generate call's answer under the size cap (`max_response_bytes` of messages)."""

    def __init__(
        self,
        *,
        rpc_timeout_s: float = 5.0,
        tls: WorkerTls | None = None,
        address_guard: AddressGuard | None = None,
        idle: IdleSweeper | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        self.rpc_timeout_s = rpc_timeout_s
        self.tls = tls  # for grpcs:// engines (None: the system's trust store)
        self.address_guard = address_guard or AddressGuard()
        self.idle = idle
        self.max_response_bytes = max_response_bytes
        self._clients: dict[str, EngineClient] = {}
        self._lock = asyncio.Lock()

    def client(self, url: str) -> EngineClient:
        """The connected engine of a worker URL (a rank worker's `url@rank`: its engine's)."""
        url = engine_url(url)
        try:
            return self._clients[url]
        except KeyError:
            raise UpstreamError("connect", f"{url}: not connected yet") from None

    async def connect(self, url: str) -> EngineClient:
        url = engine_url(url)
        client = self._clients.get(url)
        if client is not None:
            return client
        async with self._lock:
            client = self._clients.get(url)
            if client is None:
                try:
                    await self.address_guard.check(url)
                except ValueError as exc:  # InvalidWorkerUrl: never connect there
                    raise UpstreamError("connect", f"{url}: {exc}") from None
                client = await EngineClient.connect(
                    url,
                    rpc_timeout_s=self.rpc_timeout_s,
                    tls=self.tls,
                    address_guard=self.address_guard,
                    idle=self.idle,
                    max_response_bytes=self.max_response_bytes,
                )
                self._clients[url] = client
            return client

    async def forget(self, url: str) -> None:
        """Close the connection to the engine of a worker URL (when its last worker is gone)."""
        client = self._clients.pop(engine_url(url), None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close()


class GrpcProber:
    """Health of a gRPC worker: the standard health service (or the engine's HealthCheck); on
    first success the model is learned from GetModelInfo and its tokenizer made ready. Every
    check reads the engine's LoRA adapters where it lists them (SGLang): each is routable by its
    name, as an HTTP worker's /v1/models entries are."""

    def __init__(
        self,
        pool: EnginePool,
        ensure_tokenizer: Callable[[str, EngineClient, Mapping[str, str]], Awaitable[Any]],
        timeout_s: float,
        dp_aware: bool = False,
    ) -> None:
        self.pool = pool
        self.ensure_tokenizer = ensure_tokenizer
        self.timeout_s = timeout_s
        self.dp_aware = dp_aware  # ask each new engine its data-parallel size

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        # Once GetModelInfo named the model, a failure after it (the tokenizer bundle fails its
        # sha256 check, say) still reports the model: the gateway then knows the model and
        # answers its requests 503 `no_available_workers`, not 404 `model_not_found`.
        model_id = worker.model_id
        try:
            client = await self.pool.connect(worker.url)
            if not await client.health(self.timeout_s):
                return ProbeResult(ok=False, detail="engine reports not serving")
            dp_size = None
            if model_id is None:
                model_id = (await client.model_info()).model_id
                if self.dp_aware:
                    dp_size = await client.dp_size(self.timeout_s)
            loras = await client.lora_adapters(self.timeout_s)  # adapters come and go
        except (UpstreamError, EngineError, grpc.aio.AioRpcError, OSError) as exc:
            return ProbeResult(ok=False, model_id=model_id, detail=f"{type(exc).__name__}: {exc}")
        try:
            await self.ensure_tokenizer(model_id, client, dict(worker.labels))
        except Exception as exc:  # a refused bundle, a load timeout, an unreadable tokenizer
            return ProbeResult(ok=False, model_id=model_id, detail=f"{type(exc).__name__}: {exc}")
        adapters = None if loras is None else tuple(n for n in loras if n != model_id)
        return ProbeResult(
            ok=True, model_id=model_id, adapters=adapters, runtime=client.runtime, dp_size=dp_size
        )


class DispatchProber:
    """One prober for a mixed fleet: gRPC workers by URL scheme, provider workers by their
    model listing, the rest over HTTP."""

    def __init__(
        self,
        http: Callable[[WorkerSnapshot], Awaitable[ProbeResult]],
        grpc_prober: Callable[[WorkerSnapshot], Awaitable[ProbeResult]] | None,
        provider_prober: Callable[[WorkerSnapshot], Awaitable[ProbeResult]] | None = None,
    ) -> None:
        self.http = http
        self.grpc = grpc_prober
        self.provider = provider_prober

    def __call__(self, worker: WorkerSnapshot) -> Awaitable[ProbeResult]:
        if self.provider is not None and worker.provider is not None:
            return self.provider(worker)
        if self.grpc is not None and is_grpc_url(worker.url):
            return self.grpc(worker)
        return self.http(worker)


class EngineStream:
    """A started engine call: status 200 once the first events arrived."""

    __slots__ = ("_agen", "_first", "status")

    def __init__(self, agen: EventBatches, first: list[EngineEvent]) -> None:
        self._agen = agen
        self._first: list[EngineEvent] | None = first
        self.status = 200

    def release(self) -> None:
        """Nothing to return to a pool; `aclose` ends the call."""

    def batches(self) -> AsyncIterator[list[EngineEvent]]:
        """The events a list at a time: those that arrived together (write them together)."""
        return self

    def events(self) -> AsyncIterator[EngineEvent]:
        """The events one at a time. A plain iterator, not an async generator: a caller that
        stops early (`break` once every choice is done) leaves nothing for the event loop's
        async-generator finalizer, which would schedule a task (and a cross-thread wakeup: an
        eventfd write and read) per request to close it."""
        return _Events(self)

    def __aiter__(self) -> AsyncIterator[list[EngineEvent]]:
        return self

    def __anext__(self) -> Awaitable[list[EngineEvent]]:
        first = self._first
        if first is not None:
            self._first = None
            if first:
                return _ready(first)
        return self._agen.__anext__()

    async def aclose(self) -> None:
        """End the engine call (cancels it and sends Abort if it was still running)."""
        await self._agen.aclose()

    @property
    def pipeable(self) -> bool:
        """The rest can be piped (a lean call, not over): see `pipe`."""
        agen = self._agen
        return isinstance(agen, LeanStream) and agen.pipeable

    def pipe(self, sink: EventSink) -> None:
        """Hand the events to `sink` from the engine connection's callbacks from now on (the
        first batch now, if no one took it), instead of being read. Only when `pipeable`."""
        agen = self._agen
        assert isinstance(agen, LeanStream)
        first, self._first = self._first, None
        if first:
            sink.events(first)
        agen.pipe(sink)

    def pause_source(self) -> None:
        """(piped) The sink takes nothing for now: the engine is held back (flow control)."""
        assert isinstance(self._agen, LeanStream)
        self._agen.hold()

    def resume_source(self) -> None:
        """(piped) The sink takes events again."""
        assert isinstance(self._agen, LeanStream)
        self._agen.release()


async def _ready(batch: list[EngineEvent]) -> list[EngineEvent]:
    return batch


class _Events:
    """`EngineStream.events`: the events of its batches, in order."""

    __slots__ = ("_at", "_batch", "_stream")

    def __init__(self, stream: EngineStream) -> None:
        self._stream = stream
        self._batch: list[EngineEvent] = stream._first or []  # the first batch taken as it is
        stream._first = None
        self._at = 0

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> EngineEvent:
        batch, at = self._batch, self._at
        while at >= len(batch):
            batch = await self._stream._agen.__anext__()  # StopAsyncIteration at the end
            self._batch, at = batch, 0
        self._at = at + 1
        return batch[at]


async def start_stream(
    client: EngineClient, request: EngineRequest, timeout_s: float | None
) -> EngineStream:
    agen = client.generate_batches(request, timeout_s=timeout_s)
    try:
        first = await anext(agen)
    except StopAsyncIteration:
        first = []
    except EngineError as exc:
        await agen.aclose()
        raise refusal(exc, client.url, request.request_id) from exc
    return EngineStream(agen, first)


def refusal(exc: EngineError, url: str, engine_id: str) -> Exception:
    """What the runner gets when an engine refused a request before answering: an
    `UpstreamError` (try another engine, a breaker failure) when it is unavailable or
    overloaded, else the client's `ApiError` (the engine's word on the request: no failure of
    the engine's, so its breaker is not told). An engine out of room (RESOURCE_EXHAUSTED, the
    gRPC word for HTTP's 429) is tried elsewhere too, but as `busy`: back-pressure from a
    serving engine, not a failure that may open its breaker under load."""
    if exc.status == "RESOURCE_EXHAUSTED":
        return UpstreamError("busy", str(exc))
    if exc.http_status in (502, 503):
        return UpstreamError("connect", str(exc))
    if exc.http_status < 500:
        code = "engine_invalid_request" if exc.http_status == 400 else "engine_error"
        return errors.ApiError(exc.http_status, code, f"The engine refused: {exc}")
    log.warning("engine_refused", url=url, engine_id=engine_id, error=str(exc))
    return errors.ApiError(exc.http_status, "engine_error", "The engine refused this request")


def request_for(
    request: EngineRequest, model: str, worker: WorkerSnapshot, client: EngineClient
) -> EngineRequest:
    """`request` as `worker`'s engine (`client`) takes it: a request for one of its LoRA
    adapters (a model that is not the worker's own) names the engine's id of it (`lora_id`, as
    its last adapter list gave it); a rank worker's (`url@rank`, `--dp-aware`) names its rank."""
    rank = rank_of(worker.url)
    if model == worker.model_id and rank is None:
        return request
    lora = None if model == worker.model_id else client.lora_ids.get(model, model)
    return dataclasses.replace(request, lora_id=lora, dp_rank=rank)
