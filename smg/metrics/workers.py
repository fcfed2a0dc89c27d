"""Series read at scrape time: nothing on the request path writes them.

Per-worker gauges and tallies come from the registry snapshot (each worker's `LoadCounter`, which
its actor and the request path keep); the admission ones from the admission queue and the
in-flight table; the tokenizer caches from their stats. Label values are the registry's own
(worker URLs and models of registered workers, fixed vocabularies), never request fields.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, WorkerSnapshot

Family = GaugeMetricFamily | CounterMetricFamily
# smg_http_inflight_request_age_count: the Rust gateway's bucket bounds (seconds), non-cumulative
INFLIGHT_AGE_BOUNDS = (30, 60, 180, 300, 600, 1200, 3600, 7200, 14400, 28800, 86400)


def connection_mode(url: str) -> str:
    return "grpc" if url.startswith("grpc") else "http"


def _family(
    kind: type[Family], name: str, doc: str, labels: list[str], values: Tally[Any]
) -> Family:
    fam = kind(name, doc, labels=labels)
    for key, n in values.items():
        fam.add_metric(list(key), n)
    return fam


class WorkerCollector(Collector):
    def __init__(
        self,
        snapshot: Callable[[], RegistrySnapshot],
        admission: Callable[[], Any],
        tokenizers: Callable[[], dict[str, Any]],
        inflight_ages: Callable[[], list[float]] = list,
    ):
        self.snapshot = snapshot
        self.admission = admission
        self.tokenizers = tokenizers
        self.inflight_ages = inflight_ages

    def collect(self) -> Iterator[Family]:
        workers = self.snapshot().workers
        yield from self._workers(workers)
        yield from self._pools(workers)
        yield from self._admission()
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

    def _workers(self, workers: tuple[WorkerSnapshot, ...]) -> Iterator[Family]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["worker"])

        active = gauge("smg_worker_requests_active", "Requests in flight per worker")
        health = gauge("smg_worker_health", "Worker health (1 ready, 0 otherwise)")
        cb = gauge("smg_worker_cb_state", "Circuit breaker state (0 closed, 1 open, 2 half-open)")
        fails = gauge("smg_worker_cb_consecutive_failures", "Failures in the breaker's streak")
        wins = gauge(
            "smg_worker_cb_consecutive_successes", "Successes since the breaker went half-open"
        )
        outcomes = CounterMetricFamily(
            "smg_worker_cb_outcomes",
            "Outcomes the circuit breaker recorded",
            labels=["worker", "outcome"],
        )
        for w in workers:
            c, url = w.counter, w.url
            active.add_metric([url], c.active)
            health.add_metric([url], 1.0 if w.health is HealthStatus.READY else 0.0)
            cb.add_metric([url], float(w.breaker.state.value))
            fails.add_metric([url], c.cb_failure_streak)
            wins.add_metric([url], c.cb_success_streak)
            outcomes.add_metric([url, "success"], c.cb_successes)
            outcomes.add_metric([url, "failure"], c.cb_failures)
        yield from (active, health, cb, fails, wins, outcomes)

    def _pools(self, workers: tuple[WorkerSnapshot, ...]) -> Iterator[Family]:
        sizes: Tally[tuple[str, str, str]] = Tally()
        conns: Tally[tuple[str, str]] = Tally()
        checks: Tally[tuple[str, str]] = Tally()
        for w in workers:
            mode = connection_mode(w.url)
            sizes[(w.worker_type, mode, w.model_id or "unknown")] += 1
            conns[(w.worker_type, mode)] += w.counter.active
            checks[(w.worker_type, "success")] += w.counter.probes_ok
            checks[(w.worker_type, "failure")] += w.counter.probes_failed
            # failed checks not counted: the worker answered real traffic since the last one
            checks[(w.worker_type, "excused")] += w.counter.probes_excused
        yield _family(
            GaugeMetricFamily, "smg_worker_pool_size",
            "Registered workers by type, connection mode and model",
            ["worker_type", "connection_mode", "model"], sizes,
        )  # fmt: skip
        yield _family(
            GaugeMetricFamily, "smg_worker_connections_active",
            "Requests in flight to workers, by type and connection mode",
            ["worker_type", "connection_mode"], conns,
        )  # fmt: skip
        yield _family(
            CounterMetricFamily, "smg_worker_health_checks",
            "Health checks by worker type and result", ["worker_type", "result"], checks,
        )  # fmt: skip

    def _admission(self) -> Iterator[Family]:
        adm = self.admission()
        if adm is not None:
            g = GaugeMetricFamily("smg_http_requests_queued", "Requests waiting for admission")
            g.add_metric([], adm.queued)
            yield g
            g = GaugeMetricFamily("smg_http_requests_in_flight", "Requests holding a permit")
            g.add_metric([], adm.active)
            yield g
            limit = CounterMetricFamily(
                "smg_http_rate_limit",
                "Admission decisions (rejected: the queue was full or the wait timed out)",
                labels=["result"],
            )
            limit.add_metric(["allowed"], adm.admitted)
            limit.add_metric(["rejected"], adm.rejected)
            yield limit
        ages = GaugeMetricFamily(
            "smg_http_inflight_request_age_count",
            "Requests in flight by age, non-cumulative buckets (gt, le] in seconds",
            labels=["gt", "le"],
        )
        counts = [0] * (len(INFLIGHT_AGE_BOUNDS) + 1)
        for age in self.inflight_ages():
            i = 0
            while i < len(INFLIGHT_AGE_BOUNDS) and age > INFLIGHT_AGE_BOUNDS[i]:
                i += 1
            counts[i] += 1
        lower = "0"
        for bound, n in zip((*INFLIGHT_AGE_BOUNDS, "+Inf"), counts, strict=True):
            ages.add_metric([lower, str(bound)], n)
            lower = str(bound)
        yield ages


class EngineLoadCollector(Collector):
    """`smg_engine_*`: the workers' last load reports (polled by the load monitor, or pushed
    with KV events), summed over DP ranks by the poll: `dp_rank` is "all"."""

    def __init__(self, snapshot: Callable[[], RegistrySnapshot], loads: Callable[[], Any]) -> None:
        self.snapshot = snapshot
        self.loads = loads

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["worker", "model", "dp_rank"]
        fams = {
            name: GaugeMetricFamily(name, doc, labels=labels)
            for name, doc in (
                ("smg_engine_running_requests", "Requests the engine is running"),
                ("smg_engine_waiting_requests", "Requests waiting in the engine's queue"),
                ("smg_engine_token_usage", "KV-cache usage reported by the engine, 0-1"),
                ("smg_engine_gen_throughput", "Generation throughput reported, tokens/s"),
            )
        }
        board = self.loads()  # a LoadBoard (smg.pipeline is a sibling layer: not imported)
        for w in self.snapshot().workers:
            load = board.loads.get(w.worker_id)
            if load is None:
                continue
            key = [w.url, w.model_id or "unknown", "all"]
            fams["smg_engine_running_requests"].add_metric(key, load.running)
            fams["smg_engine_waiting_requests"].add_metric(key, load.waiting)
            if load.kv_usage is not None:
                fams["smg_engine_token_usage"].add_metric(key, load.kv_usage)
            fams["smg_engine_gen_throughput"].add_metric(key, load.throughput)
        yield from fams.values()


# a policy's name -> the Rust gateway's branch counter for it
BRANCH_SERIES = {
    "manual": "smg_manual_policy_branch",
    "consistent_hashing": "smg_consistent_hashing_policy_branch",
}


class PolicyCollector(Collector):
    """How the routing policies chose (their `branches` tallies) and the manual policy's table
    size, read at scrape time from the policies the gateway routes with."""

    def __init__(
        self,
        policies: Callable[[], list[Any]],
        snapshot: Callable[[], RegistrySnapshot] = RegistrySnapshot,
    ) -> None:
        self.policies = policies
        self.snapshot = snapshot

    def collect(self) -> Iterator[Family]:
        fams = {
            name: CounterMetricFamily(series, "Routing decisions by branch", labels=["branch"])
            for name, series in BRANCH_SERIES.items()
        }
        entries = GaugeMetricFamily(
            "smg_manual_policy_cache_entries", "Routing keys the manual policy holds"
        )
        held = 0
        keys = GaugeMetricFamily(
            "smg_worker_routing_keys_active",
            "Routing keys the manual policy sends to each worker",
            labels=["worker"],
        )
        urls = {w.worker_id: w.url for w in self.snapshot().workers}
        for p in self.policies():
            fam = fams.get(getattr(p, "name", ""))
            if fam is None:
                continue
            for branch, n in p.branches.items():
                fam.add_metric([branch], n)
            if p.name == "manual":
                held += len(p)
                for wid, n in p.keys_by_worker().items():
                    if wid in urls:
                        keys.add_metric([urls[wid]], n)
        entries.add_metric([], held)
        yield from fams.values()
        yield entries
        yield keys
