"""Prometheus series, named as the Rust gateway names them (label names too; the series it
has that smg serves, and why the others are not, are in `smg.metrics.parity`).

Per-request counters are updated on the request path through cached label children: the HTTP
edge's once per request (here), the router's once per answer (`router.py`). Per-worker gauges
(active requests, health, breaker state and tallies) are not touched per request at all: a
collector reads the registry snapshot at scrape time (`workers.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    disable_created_metrics,
    generate_latest,
)

from smg.core.snapshots import RegistrySnapshot, WorkerSnapshot
from smg.metrics.router import CURRENT, Declare, RequestProbe, RouterMetrics
from smg.metrics.workers import WorkerCollector, connection_mode

disable_created_metrics()  # `_created` series double the scrape for no use here

# the Rust gateway's default buckets for every `*duration_seconds`, TTFT and TPOT histogram
# (--prometheus-duration-buckets replaces them)
DURATION_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 45, 60, 90, 120, 180,
    240, 300, 480, 900, 1200, 1800, 2700, 3600, 5400, 7200,
)  # fmt: skip
__all__ = ["CURRENT", "DURATION_BUCKETS", "Metrics", "RequestProbe"]


class Metrics:
    def __init__(
        self,
        snapshot: Callable[[], RegistrySnapshot],
        admission: Callable[[], Any] = lambda: None,
        policy: str = "",
        tokenizers: Callable[[], dict[str, Any]] = dict,
        *,
        buckets: Sequence[float] | None = None,
        inflight_ages: Callable[[], list[float]] = list,
    ) -> None:
        self.policy = policy
        self.snapshot = snapshot
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        d = Declare(r, buckets or DURATION_BUCKETS)
        self.http_requests = d.counter(
            "smg_http_requests_total", "HTTP requests by method and route", ["method", "path"]
        )
        self.http_responses = d.counter(
            "smg_http_responses_total",
            "HTTP responses by route, status and error code ('' for successes)",
            ["path", "status_code", "error_code"],
        )
        self.http_duration = d.histogram(
            "smg_http_request_duration_seconds",
            "HTTP request duration (until the response body ends)",
            ["method", "path"],
        )
        self.router = RouterMetrics(d)
        self.selections = d.counter(
            "smg_worker_selection_total",
            "Worker selections by the routing policy",
            ["worker", "worker_type", "connection_mode", "model", "policy"],
        )
        self.retries = d.counter(
            "smg_worker_retries_total",
            "Retries away from a worker (by the endpoint of the request)",
            ["worker", "worker_type", "endpoint"],
        )
        self.retries_exhausted = d.counter(
            "smg_worker_retries_exhausted_total",
            "Requests that failed after their last attempt had been retried",
            ["worker_type", "endpoint"],
        )
        self.backoff = d.histogram(
            "smg_worker_retry_backoff_seconds",
            "Backoff before a retry, by the attempt it follows",
            ["attempt"],
        )
        self.worker_errors = d.counter(
            "smg_worker_errors_total",
            "Attempts that could not reach a worker or got no answer in time, by error type",
            ["worker_type", "connection_mode", "error_type"],
        )
        self.transitions = d.counter(
            "smg_worker_transitions_total",
            "Health and breaker state changes",
            ["worker", "kind", "to"],
        )
        self.cb_transitions = d.counter(
            "smg_worker_cb_transitions_total",
            "Circuit breaker state changes",
            ["worker", "from", "to"],
        )
        self.mcp_calls = d.counter(
            "smg_mcp_tool_calls_total",
            "MCP tool calls the Responses loop ran, by model, server, tool and result (ok or "
            "the error code); a request-level server's calls count as server 'request', tool "
            "'any'",
            ["model", "server", "tool_name", "result"],
        )
        self.mcp_duration = d.histogram(
            "smg_mcp_tool_duration_seconds",
            "MCP tool call latency",
            ["model", "server", "tool_name"],
        )
        self.mcp_rounds = d.counter(
            "smg_mcp_tool_iterations_total",
            "Model rounds of the Responses tool loop that ended in MCP calls",
            ["model"],
        )
        self.db_operations = d.counter(
            "smg_db_operations_total",
            "History storage calls by record type, operation and result",
            ["storage_type", "operation", "result"],
        )
        self.db_duration = d.histogram(
            "smg_db_operation_duration_seconds",
            "History storage call latency",
            ["storage_type", "operation"],
        )
        self.db_items = d.counter(
            "smg_db_items_stored", "Records written to the history storage", ["storage_type"]
        )
        self.mcp_servers = Gauge(
            "smg_mcp_servers_active",
            "MCP sessions open: configured servers and request-level ones",
            registry=r,
        )
        r.register(WorkerCollector(snapshot, admission, tokenizers, inflight_ages))
        self._req_children: dict[tuple[str, str], Any] = {}
        self._resp_children: dict[tuple[str, int, str], Any] = {}
        self._dur_children: dict[tuple[str, str], Any] = {}
        self._sel_children: dict[tuple[str, str, str], Any] = {}
        self._breaker_states: dict[str, str] = {}  # worker URL -> its breaker's last state

    def request_done(
        self, method: str, path: str, status: int, error_code: str, seconds: float
    ) -> None:
        key = (method, path)
        child = self._req_children.get(key)
        if child is None:
            child = self._req_children[key] = self.http_requests.labels(method, path)
            self._dur_children[key] = self.http_duration.labels(method, path)
        child.value += 1.0  # CounterChild.inc, inline: a call a series a request saved
        self._dur_children[key].observe(seconds)
        rkey = (path, status, error_code)
        rchild = self._resp_children.get(rkey)
        if rchild is None:
            rchild = self._resp_children[rkey] = self.http_responses.labels(
                path, str(status), error_code
            )
        rchild.value += 1.0

    # --- the runner's reports (RunnerMetrics) -------------------------------------------------
    def selected(self, worker: WorkerSnapshot, model: str, policy: str | None = None) -> None:
        """`policy`: the one that chose (a model's own, IGW mode); default: the launch one."""
        policy = policy or self.policy
        key = (worker.url, model, policy)
        child = self._sel_children.get(key)
        if child is None:
            mode = connection_mode(worker.url)
            child = self._sel_children[key] = self.selections.labels(
                worker.url, worker.worker_type, mode, model, policy
            )
        child.value += 1.0

    def retried(self, worker: WorkerSnapshot, attempt: int, delay_s: float) -> None:
        """A retry away from `worker` after `attempt`, waiting `delay_s` first."""
        self.retries.labels(worker.url, worker.worker_type, _endpoint()).inc()
        self.backoff.labels(str(attempt) if attempt <= 5 else "6+").observe(delay_s)

    def exhausted(self, worker: WorkerSnapshot) -> None:
        self.retries_exhausted.labels(worker.worker_type, _endpoint()).inc()

    def upstream_failed(self, worker: WorkerSnapshot, kind: str) -> None:
        """An attempt on `worker` failed before an answer (`kind`: UpstreamError's kind)."""
        mode = connection_mode(worker.url)
        self.worker_errors.labels(worker.worker_type, mode, kind).inc()

    def upstream_answered(self, status: int) -> None:
        self.router.upstream_answered(status)

    # --- the lifecycle events (TransitionSink) ------------------------------------------------
    def transition(self, worker_url: str, kind: str, to: str) -> None:
        self.transitions.labels(worker_url, kind, to).inc()
        if kind == "breaker":
            frm = self._breaker_states.get(worker_url, "closed")
            self._breaker_states[worker_url] = to
            self.cb_transitions.labels(worker_url, frm, to).inc()

    # --- the Responses tool loop ------------------------------------------------------------------
    def model_label(self, model: str) -> str:
        """`model` if the registry serves it, else "unknown" (a client's text never becomes a
        label value)."""
        return model if model in self.snapshot().by_model else "unknown"

    def mcp_call(self, model: str, server: str, tool: str, result: str, seconds: float) -> None:
        model = self.model_label(model)
        self.mcp_calls.labels(model, server, tool, result).inc()
        self.mcp_duration.labels(model, server, tool).observe(seconds)

    def mcp_round(self, model: str) -> None:
        self.mcp_rounds.labels(self.model_label(model)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _endpoint() -> str:
    probe = CURRENT.get()
    return probe.endpoint if probe is not None else "other"
