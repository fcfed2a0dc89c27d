"""/metrics against the Rust gateway's series (smg.metrics.parity): a real mesh node in front of a
simulated gRPC engine answers one streamed chat and one request for a model nobody serves; every
Rust series the table says smg serves is then in the scrape, with the Rust type and label names,
and no label carries the client's text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from smg.metrics.parity import EXTRA_LABELS, NOT_SERVED, RUST_SERIES, markdown, served

from .conftest import Engine, Gateway, Launcher, free_port, wait_until

pytestmark = pytest.mark.integration

MODEL = "parity-model"
BOGUS = "no-such-model-7f3a"  # a model the client makes up: it must never become a label value
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
# served series a streamed chat on a gRPC engine and one failed request must show samples of
MUST_HAVE_SAMPLES = {
    "smg_http_requests_total",
    "smg_http_responses_total",
    "smg_http_request_duration_seconds",
    "smg_http_connections_active",
    "smg_http_rate_limit_total",
    "smg_http_inflight_request_age_count",
    "smg_router_requests_total",
    "smg_router_request_duration_seconds",
    "smg_router_request_errors_total",
    "smg_router_stage_duration_seconds",
    "smg_router_upstream_responses_total",
    "smg_router_ttft_seconds",
    "smg_router_tpot_seconds",
    "smg_router_tokens_total",
    "smg_router_generation_duration_seconds",
    "smg_worker_pool_size",
    "smg_worker_connections_active",
    "smg_worker_requests_active",
    "smg_worker_health",
    "smg_worker_health_checks_total",
    "smg_worker_selection_total",
    "smg_worker_cb_state",
    "smg_worker_cb_outcomes_total",
    "smg_worker_cb_consecutive_failures",
    "smg_worker_cb_consecutive_successes",
    "smg_engine_running_requests",
    "smg_engine_waiting_requests",
    "smg_engine_gen_throughput",
    "smg_mcp_servers_active",
    "router_mesh_store_cardinality",
    "router_mesh_store_hash",
}


@dataclass
class Scrape:
    types: dict[str, str]  # family -> type
    samples: list[tuple[str, dict[str, str], float]]
    completion_tokens: int = 0  # of the streamed chat, as its usage said

    def of(self, name: str) -> list[dict[str, str]]:
        """The label sets of `name`'s samples (a histogram's without `le`)."""
        kind, _ = RUST_SERIES[name]
        family = name.removesuffix("_total") if kind == "counter" else name
        names = {family + s for s in SUFFIXES[kind]}
        out = []
        for n, labels, _ in self.samples:
            if n in names:
                out.append({k: v for k, v in labels.items() if k != "le" or kind != "histogram"})
        return out

    def value(self, name: str, **want: str) -> float:
        return sum(v for n, lab, v in self.samples if n == name and want.items() <= lab.items())


def scrape(gw: Gateway) -> Scrape:
    from .conftest import http

    r = http("GET", f"http://127.0.0.1:{gw.metrics_port}/metrics")
    assert r.status == 200, r
    types: dict[str, str] = {}
    samples = []
    for line in r.body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            types[family] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, line
            labels = dict(LABEL.findall(m[2] or ""))
            samples.append((m[1], labels, float(line.rsplit(" ", 1)[1])))
    return Scrape(types, samples)


@pytest.fixture(scope="module")
def node(module_launch: Launcher) -> Iterator[tuple[Gateway, Engine]]:
    engine = module_launch.engine(MODEL, chunk_tokens=1)
    gw = module_launch.gateway(
        [engine],
        command="node",
        mesh_host="127.0.0.1",
        mesh_port=free_port(),
        mesh_profile="test",
        cluster_key="parity-cluster-key",
        prometheus_duration_buckets=["0.0005", "0.005", "0.05", "0.5", "5", "50"],
    )
    yield gw, engine


@pytest.fixture(scope="module")
def after_traffic(node: tuple[Gateway, Engine]) -> Scrape:
    gw, _ = node
    with gw.client() as client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "SIM_REPLY: one two three four five"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = [c.usage for c in stream if c.usage is not None]
    assert usage and usage[-1].completion_tokens >= 2, usage
    body = {"model": BOGUS, "messages": [{"role": "user", "content": "hi"}]}
    bad = gw.request("POST", "/v1/chat/completions", body)
    assert bad.status == 404, bad
    wait_until(lambda: scrape(gw).of("smg_engine_running_requests"), 15, "a load report")
    got = scrape(gw)
    got.completion_tokens = usage[-1].completion_tokens or 0
    return got


def test_every_served_rust_series_is_exposed_with_the_rust_type_and_labels(
    after_traffic: Scrape,
) -> None:
    missing, wrong_type, wrong_labels = [], [], []
    for name, (kind, labels) in served().items():
        # the text format names a counter's family with or without `_total`
        family = name.removesuffix("_total") if kind == "counter" else name
        shown = after_traffic.types.get(family) or after_traffic.types.get(family + "_total")
        if shown is None:
            missing.append(name)
            continue
        if shown != kind:
            wrong_type.append((name, shown, kind))
        want = {*labels, *EXTRA_LABELS.get(name, ())}
        for got in after_traffic.of(name):
            if set(got) != want:
                wrong_labels.append((name, sorted(got), sorted(want)))
                break
    assert not missing, f"served by the table, absent from /metrics: {missing}"
    assert not wrong_type, wrong_type
    assert not wrong_labels, wrong_labels
    silent = sorted(n for n in MUST_HAVE_SAMPLES if not after_traffic.of(n))
    assert not silent, f"no samples after a chat and an error: {silent}"


def test_a_streamed_chat_is_one_request_with_its_tokens_ttft_and_tpot(
    after_traffic: Scrape,
) -> None:
    labels = {"model": MODEL, "endpoint": "chat", "router_type": "grpc"}
    s = after_traffic
    assert s.value("smg_router_requests_total", streaming="true", **labels) == 1
    assert s.value("smg_router_ttft_seconds_count", **labels) == 1
    assert s.value("smg_router_tpot_seconds_count", **labels) == 1
    assert s.value("smg_router_generation_duration_seconds_count", **labels) == 1
    out = s.value("smg_router_tokens_total", token_type="output", **labels)
    assert out == s.completion_tokens
    assert s.value("smg_router_tokens_total", token_type="input", **labels) > 0
    # --prometheus-duration-buckets: the histograms carry exactly the given bounds
    bounds = {
        lab["le"]
        for n, lab, _ in s.samples
        if n == "smg_router_ttft_seconds_bucket" and lab.get("model") == MODEL
    }
    assert bounds == {"0.0005", "0.005", "0.05", "0.5", "5.0", "50.0", "+Inf"}


def test_a_made_up_model_is_counted_as_unknown_never_by_its_name(after_traffic: Scrape) -> None:
    s = after_traffic
    assert s.value("smg_router_request_errors_total", model="unknown", endpoint="chat") >= 1
    leaked = [(n, lab) for n, lab, _ in s.samples if BOGUS in "".join(lab.values())]
    assert not leaked, leaked


def test_the_table_accounts_for_every_rust_series() -> None:
    assert set(NOT_SERVED) <= set(RUST_SERIES)
    assert all(reason.strip() for reason in NOT_SERVED.values())
    text = markdown()
    assert f"{len(RUST_SERIES)} Rust series: {len(served())} served" in text
    assert text.count("\n| `") == len(RUST_SERIES)
