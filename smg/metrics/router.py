"""The Rust gateway's `smg_router_*` series: one observation set per request, never per token.

`Flow.serve` opens a `RequestProbe` for each request and makes it the current one (a context
variable: the renderer, the relay and the runner find it without it being passed through every
call); what they learn goes on it as plain attribute writes: the first token's time (once, at
the first batch an engine sends), the token counts (once, from the answer's usage at its end),
the time the token-mode preparation took. `RouterMetrics.done` turns it into the observations
when the answer has ended, through label children cached per label set.

Labels are bounded: `model` is a model the registry serves (the flow sets it after the model
was found; a request for an unknown model counts as "unknown"), `endpoint` comes from a fixed
table of routes, the rest from fixed vocabularies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from prometheus_client import CollectorRegistry

from smg.metrics.fast import FastCounter, FastHistogram

ROUTER_LABELS = ["router_type", "backend_type", "connection_mode", "model", "endpoint"]
GEN_LABELS = ["router_type", "backend_type", "model", "endpoint"]
UNKNOWN_MODEL = "unknown"

# the client-facing route -> the Rust gateway's `endpoint` label (others: "other")
ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/generate": "generate",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v1/classify": "classify",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}


def error_type(status: int) -> str:
    """The Rust gateway's `error_type` for a failed request's status."""
    if status == 400:
        return "validation_error"
    if status == 404:
        return "no_workers"
    if status in (408, 504):
        return "timeout"
    if 500 <= status <= 599:
        return "backend_error"
    return "internal_error"


class RequestProbe:
    """What one request's answer taught the metrics (written by the flow, read once at the end)."""

    __slots__ = (
        "backend_type",
        "connection_mode",
        "endpoint",
        "failed",
        "first_at",
        "model",
        "now",
        "pd",
        "prepare_s",
        "router_type",
        "start",
        "streaming",
        "tokens_in",
        "tokens_out",
    )

    def __init__(self, now: Callable[[], float], endpoint: str, streaming: bool) -> None:
        self.now = now  # the gateway's clock
        self.start = now()
        self.endpoint = endpoint
        self.streaming = streaming
        self.model = UNKNOWN_MODEL
        self.router_type = "http"
        self.backend_type = "regular"
        self.connection_mode = "http"
        self.first_at: float | None = None
        self.tokens_in: int | None = None  # None: the answer's usage was not read (pass-through)
        self.tokens_out = 0
        self.prepare_s: float | None = None
        self.failed = False  # the answer failed after it began (an engine that broke mid-way)
        self.pd: PdLegs | None = None  # gRPC PD: what the legs took (flow/pd_grpc.py)


class PdLegs:
    """A gRPC PD request's legs, as `GrpcPd` saw them."""

    __slots__ = ("failure", "kv_mode", "kv_s", "prefill_s", "runtime")

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime  # the decode engine's ("vllm", "sglang")
        self.kv_mode: str | None = None  # "nixl": vLLM's KV params relayed to the decode
        self.prefill_s: float | None = None  # vLLM: the prefill leg, run to its end
        self.kv_s: float | None = None  # vLLM: prefill end -> the decode stream established
        self.failure: str | None = None  # "bootstrap" | "kv_transfer"


CURRENT: ContextVar[RequestProbe | None] = ContextVar("smg_request_probe", default=None)


def answered(probe: RequestProbe, renderer: object) -> None:
    """An engine's answer has ended: its token counts, from the renderer's usage (once)."""
    probe.tokens_in = getattr(renderer, "prompt_tokens", 0)
    choices = getattr(renderer, "choices", None)  # OpenAI chat/completions, /generate: n choices
    if choices is None:
        state = getattr(renderer, "state", None)  # Messages, Responses: one answer
        choices = () if state is None else (state,)
    probe.tokens_out = sum(getattr(c, "completion_tokens", 0) for c in choices)


class _Children:
    """The label children of one (router, backend, mode, model, endpoint, streaming) set."""

    __slots__ = ("dur", "gen", "req", "tok_in", "tok_out", "tpot", "ttft")

    def __init__(self, m: RouterMetrics, key: tuple[str, str, str, str, str, str]) -> None:
        router, backend, mode, model, endpoint, streaming = key
        self.req = m.requests.labels(router, backend, mode, model, endpoint, streaming)
        self.dur = m.duration.labels(router, backend, mode, model, endpoint)
        self.ttft = m.ttft.labels(router, backend, model, endpoint)
        self.tpot = m.tpot.labels(router, backend, model, endpoint)
        self.gen = m.generation.labels(router, backend, model, endpoint)
        self.tok_in = m.tokens.labels(router, backend, model, endpoint, "input")
        self.tok_out = m.tokens.labels(router, backend, model, endpoint, "output")


class Declare:
    """Series declared in one registry, every histogram with the same buckets (lock-free
    families: smg.metrics.fast)."""

    def __init__(self, registry: CollectorRegistry, buckets: Sequence[float]) -> None:
        self.registry = registry
        self.buckets = tuple(buckets)

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> FastCounter:
        family = FastCounter(name.removesuffix("_total"), doc, labels)
        self.registry.register(family)
        return family

    def histogram(self, name: str, doc: str, labels: Sequence[str] = ()) -> FastHistogram:
        family = FastHistogram(name, doc, labels, self.buckets)
        self.registry.register(family)
        return family


class RouterMetrics:
    def __init__(self, d: Declare) -> None:
        self.requests = d.counter(
            "smg_router_requests_total",
            "Requests the router served, by router, backend, connection, model and endpoint",
            [*ROUTER_LABELS, "streaming"],
        )
        self.duration = d.histogram(
            "smg_router_request_duration_seconds",
            "Request duration at the router (until the answer ends)",
            ROUTER_LABELS,
        )
        self.errors = d.counter(
            "smg_router_request_errors_total",
            "Requests that failed at the router, by error type",
            [*ROUTER_LABELS, "error_type"],
        )
        self.stage = d.histogram(
            "smg_router_stage_duration_seconds",
            "Time of a pipeline stage (prepare: chat template and tokenization in token mode)",
            ["router_type", "stage"],
        )
        self.upstream = d.counter(
            "smg_router_upstream_responses_total",
            "Worker answers by status ('' error code for successes, 'upstream_error' otherwise)",
            ["router_type", "status_code", "error_code"],
        )
        self.ttft = d.histogram(
            "smg_router_ttft_seconds", "Time to the first token of a streamed answer", GEN_LABELS
        )
        self.tpot = d.histogram(
            "smg_router_tpot_seconds",
            "Mean time per output token after the first, per streamed request",
            GEN_LABELS,
        )
        self.tokens = d.counter(
            "smg_router_tokens_total",
            "Tokens by type (input: the prompt; output: generated), from the answer's usage",
            [*GEN_LABELS, "token_type"],
        )
        self.generation = d.histogram(
            "smg_router_generation_duration_seconds",
            "Time from the request to the end of the engine's answer",
            GEN_LABELS,
        )
        self._children: dict[tuple[str, str, str, str, str, str], _Children] = {}
        self._errors: dict[tuple[str, ...], Any] = {}
        self._stages: dict[tuple[str, str], Any] = {}
        self._upstream: dict[tuple[str, int], Any] = {}
        self.pd_prefill = d.histogram(
            "smg_pd_prefill_duration_seconds",
            "PD: the prefill leg, run to its end before the decode (vLLM)",
            ["backend_type", "model", "runtime"],
        )
        self.pd_kv = d.histogram(
            "smg_pd_kv_transfer_duration_seconds",
            "PD: from the prefill's end to the decode stream established (vLLM)",
            ["backend_type", "model", "runtime"],
        )
        self.pd_ttft = d.histogram(
            "smg_pd_ttft_seconds",
            "PD: time to the first token of a streamed answer",
            ["backend_type", "model", "runtime"],
        )
        self.pd_mode = d.counter(
            "smg_pd_kv_connector_mode_total", "PD requests by KV connector", ["mode"]
        )
        self.pd_bootstrap_failures = d.counter(
            "smg_pd_bootstrap_failures_total",
            "PD: a prefill's KV bootstrap port could not be learned",
        )
        self.pd_kv_failures = d.counter(
            "smg_pd_kv_transfer_failures_total", "PD: a vLLM prefill answered no KV params"
        )

    def upstream_answered(self, status: int) -> None:
        """A worker answered the current request with `status` (the attempt that is relayed)."""
        probe = CURRENT.get()
        router = probe.router_type if probe is not None else "http"
        child = self._upstream.get((router, status))
        if child is None:
            code = "" if status < 400 else "upstream_error"
            child = self._upstream[(router, status)] = self.upstream.labels(
                router, str(status), code
            )
        child.value += 1.0  # CounterChild.inc, inline (a call a request saved)

    def done(self, p: RequestProbe, now: float, status: int | None) -> None:
        """The request's answer has ended: `status` is the failure's status (None: answered)."""
        key = (
            p.router_type,
            p.backend_type,
            p.connection_mode,
            p.model,
            p.endpoint,
            "true" if p.streaming else "false",
        )
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = _Children(self, key)
        c.req.value += 1.0  # the children's `inc`, inline (a call each a request saved)
        elapsed = now - p.start
        c.dur.observe(elapsed)
        if status is not None or p.failed:
            self._error(key[:5], error_type(status if status is not None else 502))
        if p.prepare_s is not None:
            self._stage(p.router_type, "prepare").observe(p.prepare_s)
        if p.pd is not None:
            self._pd(p, p.pd)
        if p.tokens_in is None:
            return  # a pass-through answer: the gateway did not read its tokens
        c.gen.observe(elapsed)
        c.tok_in.value += p.tokens_in
        c.tok_out.value += p.tokens_out
        if p.first_at is not None:
            ttft = p.first_at - p.start
            c.ttft.observe(ttft)
            if p.tokens_out > 1:
                c.tpot.observe((elapsed - ttft) / (p.tokens_out - 1))

    def _pd(self, p: RequestProbe, legs: PdLegs) -> None:
        """Once per PD request (not on the hot path's children: PD requests are the rarer)."""
        labels = ("pd", p.model, legs.runtime)
        if legs.failure == "bootstrap":
            self.pd_bootstrap_failures.inc()
        elif legs.failure == "kv_transfer":
            self.pd_kv_failures.inc()
        if legs.kv_mode is not None:
            self.pd_mode.labels(legs.kv_mode).inc()
        if legs.prefill_s is not None:
            self.pd_prefill.labels(*labels).observe(legs.prefill_s)
        if legs.kv_s is not None:
            self.pd_kv.labels(*labels).observe(legs.kv_s)
        if p.first_at is not None and p.streaming:
            self.pd_ttft.labels(*labels).observe(p.first_at - p.start)

    def _error(self, labels: tuple[str, ...], kind: str) -> None:
        key = (*labels, kind)
        child = self._errors.get(key)
        if child is None:
            child = self._errors[key] = self.errors.labels(*key)
        child.inc()

    def _stage(self, router: str, stage: str) -> Any:
        child = self._stages.get((router, stage))
        if child is None:
            child = self._stages[(router, stage)] = self.stage.labels(router, stage)
        return child
