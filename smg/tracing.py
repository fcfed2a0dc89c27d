"""OpenTelemetry tracing: one server span per request, a child span per stage, W3C propagation.

The one seam the request path uses. Off (the default, no `--enable-trace`) every entry returns
at once: `stage()` hands back one shared no-op context manager, `inject_*` add nothing, and
`server_span()` is not entered at all, so a request builds no span object. On, `start()`
installs an SDK tracer provider (service name `smg`) whose BatchSpanProcessor exports to the
OTLP gRPC collector (`--otlp-traces-endpoint`, the Rust gateway's default `localhost:4317`) on
its own thread through a bounded queue, so a collector that is down costs dropped spans, never a
blocked or failed request. Sampling follows the standard `OTEL_TRACES_SAMPLER` /
`OTEL_TRACES_SAMPLER_ARG` variables (parent-based always-on by default), and an incoming W3C
`traceparent` continues the client's trace.

Spans carry low-cardinality attributes only (route, model, status, worker url): never prompts,
keys or headers. The current span travels in the request's context (contextvars), which the
request's tasks and the engine call's generator share.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

SERVICE_NAME = "smg"
# The Rust gateway's batch settings (500 ms delay, 64 spans a batch); the queue bounds what a
# collector that is down can hold back (then spans are dropped), the timeout each export.
SCHEDULE_DELAY_MS = 500
MAX_EXPORT_BATCH = 64
MAX_QUEUE = 2048
EXPORT_TIMEOUT_S = 5.0
FLUSH_AT_STOP_S = 1.0  # what a stopping gateway waits for its last spans to leave


class _Untraced:
    """The stage of a request that is not traced. Entering and leaving it runs no Python (a
    `nullcontext` costs two Python calls a stage): both are C callables that ignore what they
    are given, `NoneType()` (None) and `"".format(exc_type, exc, tb)` ("", falsy: an exception
    goes on)."""

    __slots__ = ()
    if TYPE_CHECKING:

        def __enter__(self) -> None: ...
        def __exit__(self, *exc: object) -> None: ...

    else:
        __enter__ = type(None)
        __exit__ = "".format


_NOOP: AbstractContextManager[None] = _Untraced()
# `enabled()` as a module attribute: per-request callers read `tracing.on` (no call) before
# `annotate` or `inject_headers`
on = False
_tracer: Any = None  # the SDK tracer while tracing is on
_provider: Any = None
_exporter: Any = None
_root: ContextVar[Any] = ContextVar("smg_trace_root", default=None)  # the request's span
_propagator: Any = None


def enabled() -> bool:
    return _tracer is not None


def endpoint_url(endpoint: str) -> str:
    """`host:port` as the exporter takes it (the Rust gateway adds `http://` the same way)."""
    if endpoint.startswith(("http://", "https://")):
        return endpoint
    return f"http://{endpoint}"


def start(endpoint: str) -> None:
    """Turn tracing on for this process (idempotent)."""
    global _tracer, _provider, _propagator, _exporter, on
    if _tracer is not None:
        return
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    exporter = OTLPSpanExporter(
        endpoint=endpoint_url(endpoint),
        insecure=not endpoint.startswith("https://"),
        timeout=EXPORT_TIMEOUT_S,
    )
    # no sampler given: the SDK reads OTEL_TRACES_SAMPLER(_ARG), default parentbased_always_on
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=MAX_QUEUE,
            schedule_delay_millis=SCHEDULE_DELAY_MS,
            max_export_batch_size=MAX_EXPORT_BATCH,
            export_timeout_millis=int(EXPORT_TIMEOUT_S * 1000),
        )
    )
    _provider, _exporter, _propagator = provider, exporter, TraceContextTextMapPropagator()
    _tracer = provider.get_tracer("smg")
    on = True


def stop(flush_s: float = FLUSH_AT_STOP_S) -> None:
    """Turn tracing off, flushing what is queued for at most `flush_s`: past it (a collector
    that is down) the exporter is shut, which abandons its retries and the spans."""
    global _tracer, _provider, _exporter, on
    provider, exporter = _provider, _exporter
    _tracer = _provider = _exporter = None
    on = False
    if provider is None:
        return
    flush = threading.Thread(target=provider.shutdown, name="smg-trace-flush", daemon=True)
    flush.start()
    flush.join(flush_s)
    if flush.is_alive():
        exporter.shutdown()
        flush.join(flush_s)


@contextmanager
def server_span(
    name: str, headers: Mapping[str, str], attributes: Mapping[str, str]
) -> Iterator[Any]:
    """The request's root span (call only when `enabled()`): it continues the trace of an
    incoming `traceparent`/`tracestate`, and is current for everything the request does."""
    from opentelemetry.trace import SpanKind

    parent = _propagator.extract(headers)
    with _tracer.start_as_current_span(
        name, context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        token = _root.set(span)
        try:
            yield span
        finally:
            _root.reset(token)


def ids(span: Any) -> tuple[str, str]:
    """(trace id, span id) of `span` in W3C hex, for log lines."""
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def stage(name: str, key: str = "", value: str = "") -> AbstractContextManager[Any]:
    """A child span of the current one for one stage of the request (queueing, prepare,
    select, dispatch, stream), with one attribute if `key`; the shared no-op when tracing is
    off (a key and value, not a dict, so the off path builds nothing)."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes={key: value} if key else None)


def annotate(key: str, value: str | int) -> None:
    """Set one attribute on the current span (the request's model, a worker url, a status)."""
    if _tracer is None:
        return
    from opentelemetry.trace import get_current_span

    get_current_span().set_attribute(key, value)


def inject_headers(headers: MutableMapping[str, str]) -> None:
    """Add `traceparent` (and `tracestate`) of the current span to an outgoing HTTP request."""
    if _tracer is not None:
        _propagator.inject(headers)


def grpc_metadata() -> tuple[tuple[str, str], ...]:
    """The current span's `traceparent`/`tracestate` as gRPC metadata (empty when off)."""
    if _tracer is None:
        return ()
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return tuple(carrier.items())


def first_token() -> None:
    """Record `time_to_first_token`: a child of the request's span from its start until now
    (the engine's first events are in hand, or the worker's first bytes are being relayed)."""
    if _tracer is None:
        return
    from opentelemetry.trace import set_span_in_context

    root = _root.get()
    start = getattr(root, "start_time", None)
    if start is not None:
        parent = set_span_in_context(root)
        _tracer.start_span("time_to_first_token", context=parent, start_time=start).end()


def on_first_write(
    write: Callable[[bytes], Awaitable[None]],
) -> Callable[[bytes], Awaitable[None]]:
    """`write` that records `first_token` at its first call (a relayed stream; tracing on)."""
    pending = [True]

    async def first(chunk: bytes) -> None:
        if pending:
            pending.clear()
            first_token()
        await write(chunk)

    return first
