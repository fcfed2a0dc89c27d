"""Prometheus series, named as the Rust gateway names them.

Per-request counters are updated on the request path through cached label children. Per-worker
gauges (active requests, health, breaker state) are not touched per request at all: a collector
reads the registry snapshot at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, WorkerSnapshot

disable_created_metrics()  # `_created` series double the scrape for no use here

DURATION_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 45, 60, 90, 120, 180,
    240, 300, 480, 900, 1200, 1800,
)  # fmt: skip


class _WorkerCollector(Collector):
    def __init__(
        self,
        snapshot: Callable[[], RegistrySnapshot],
        admission: Callable[[], Any],
        tokenizers: Callable[[], dict[str, Any]],
    ):
        self.snapshot = snapshot
        self.admission = admission
        self.tokenizers = tokenizers

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._workers()
        yield from self._token_caches()

    def _token_caches(self) -> Iterator[CounterMetricFamily]:
        lookups = CounterMetricFamily(
            "smg_tokenizer_cache_lookups",
            "Tokenizer cache lookups by model, layer and result",
            labels=["model", "layer", "result"],
        )
        saved = CounterMetricFamily(
            "smg_tokenizer_cache_saved_tokens",
            "Token ids served from the L0/L1 caches instead of being tokenized again",
            labels=["model"],
        )
        for model, tok in self.tokenizers().items():
            cache = getattr(tok, "cache", None)
            if cache is None:
                continue
            st = cache.stats()
            lookups.add_metric([model, "l0", "hit"], st.l0_hits)
            lookups.add_metric([model, "l0", "miss"], st.l1_hits + st.misses)
            lookups.add_metric([model, "l1", "hit"], st.l1_hits)
            lookups.add_metric([model, "l1", "miss"], st.misses)
            saved.add_metric([model], st.saved_tokens)
        yield lookups
        yield saved

    def _workers(self) -> Iterator[GaugeMetricFamily]:
        snap = self.snapshot()
        active = GaugeMetricFamily(
            "smg_worker_requests_active", "Requests in flight per worker", labels=["worker"]
        )
        health = GaugeMetricFamily(
            "smg_worker_health", "Worker health (1 ready, 0 otherwise)", labels=["worker"]
        )
        cb = GaugeMetricFamily(
            "smg_worker_cb_state",
            "Circuit breaker state (0 closed, 1 open, 2 half-open)",
            labels=["worker"],
        )
        for w in snap.workers:
            active.add_metric([w.url], w.counter.active)
            health.add_metric([w.url], 1.0 if w.health is HealthStatus.READY else 0.0)
            cb.add_metric([w.url], float(w.breaker.state.value))
        yield active
        yield health
        yield cb
        adm = self.admission()
        if adm is not None:
            g = GaugeMetricFamily("smg_http_requests_queued", "Requests waiting for admission")
            g.add_metric([], adm.queued)
            yield g
            g = GaugeMetricFamily("smg_http_requests_in_flight", "Requests holding a permit")
            g.add_metric([], adm.active)
            yield g


class Metrics:
    def __init__(
        self,
        snapshot: Callable[[], RegistrySnapshot],
        admission: Callable[[], Any] = lambda: None,
        policy: str = "",
        tokenizers: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self.policy = policy
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.http_requests = Counter(
            "smg_http_requests_total",
            "HTTP requests by method and route",
            ["method", "path"],
            registry=r,
        )
        self.http_responses = Counter(
            "smg_http_responses_total",
            "HTTP responses by route, status and error code ('' for successes)",
            ["path", "status_code", "error_code"],
            registry=r,
        )
        self.http_duration = Histogram(
            "smg_http_request_duration_seconds",
            "HTTP request duration (until the response body ends)",
            ["method", "path"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.selections = Counter(
            "smg_worker_selection_total",
            "Worker selections by the routing policy",
            ["worker", "worker_type", "connection_mode", "model", "policy"],
            registry=r,
        )
        self.retries = Counter(
            "smg_worker_retries_total", "Retries away from a worker", ["worker"], registry=r
        )
        self.transitions = Counter(
            "smg_worker_transitions_total",
            "Health and breaker state changes",
            ["worker", "kind", "to"],
            registry=r,
        )
        self.mcp_calls = Counter(
            "smg_mcp_tool_calls_total",
            "MCP tool calls the Responses loop ran, by server, tool and outcome (ok or the "
            "error code); a request-level server's calls count as server 'request', tool 'any'",
            ["server", "tool", "outcome"],
            registry=r,
        )
        self.mcp_duration = Histogram(
            "smg_mcp_tool_call_duration_seconds",
            "MCP tool call latency by server",
            ["server"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.mcp_rounds = Counter(
            "smg_mcp_loop_iterations_total",
            "Model rounds of the Responses tool loop that ended in MCP calls",
            registry=r,
        )
        r.register(_WorkerCollector(snapshot, admission, tokenizers))
        self._req_children: dict[tuple[str, str], Any] = {}
        self._resp_children: dict[tuple[str, int, str], Any] = {}
        self._dur_children: dict[tuple[str, str], Any] = {}
        self._sel_children: dict[tuple[str, str, str], Any] = {}

    def request_done(
        self, method: str, path: str, status: int, error_code: str, seconds: float
    ) -> None:
        key = (method, path)
        child = self._req_children.get(key)
        if child is None:
            child = self._req_children[key] = self.http_requests.labels(method, path)
            self._dur_children[key] = self.http_duration.labels(method, path)
        child.inc()
        self._dur_children[key].observe(seconds)
        rkey = (path, status, error_code)
        rchild = self._resp_children.get(rkey)
        if rchild is None:
            rchild = self._resp_children[rkey] = self.http_responses.labels(
                path, str(status), error_code
            )
        rchild.inc()

    def selected(self, worker: WorkerSnapshot, model: str, policy: str | None = None) -> None:
        """`policy`: the one that chose (a model's own, IGW mode); default: the launch one."""
        policy = policy or self.policy
        key = (worker.url, model, policy)
        child = self._sel_children.get(key)
        if child is None:
            mode = "grpc" if worker.url.startswith("grpc") else "http"
            child = self._sel_children[key] = self.selections.labels(
                worker.url, worker.worker_type, mode, model, policy
            )
        child.inc()

    def retried(self, worker: WorkerSnapshot) -> None:
        self.retries.labels(worker.url).inc()

    def transition(self, worker_url: str, kind: str, to: str) -> None:
        self.transitions.labels(worker_url, kind, to).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
