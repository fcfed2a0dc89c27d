"""smg.metrics.router: one request's probe becomes one observation set (TTFT, TPOT, tokens),
with bounded labels; --prometheus-duration-buckets is checked before anything starts."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from smg.config import ConfigError, ObservabilityConfig, duration_buckets
from smg.metrics.router import Declare, RequestProbe, RouterMetrics, answered, error_type

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def router() -> tuple[RouterMetrics, CollectorRegistry]:
    reg = CollectorRegistry()
    return RouterMetrics(Declare(reg, (0.01, 0.1, 1, 10))), reg


def value(reg: CollectorRegistry, name: str, **labels: str) -> float:
    got = reg.get_sample_value(name, labels)
    return 0.0 if got is None else got


GEN = {"router_type": "grpc", "backend_type": "regular", "model": "m", "endpoint": "chat"}


def streamed(clock: Clock, ttft: float, total: float, out: int) -> RequestProbe:
    p = RequestProbe(clock, "chat", True)
    p.router_type = p.connection_mode = "grpc"
    p.model = "m"
    p.first_at = clock.t + ttft
    p.tokens_in, p.tokens_out = 7, out
    clock.t += total
    return p


def test_tpot_is_the_time_after_the_first_token_over_the_tokens_after_it() -> None:
    m, reg = router()
    clock = Clock()
    m.done(streamed(clock, ttft=0.5, total=2.5, out=5), clock(), None)
    assert value(reg, "smg_router_ttft_seconds_sum", **GEN) == pytest.approx(0.5)
    assert value(reg, "smg_router_tpot_seconds_sum", **GEN) == pytest.approx(2.0 / 4)
    assert value(reg, "smg_router_generation_duration_seconds_sum", **GEN) == pytest.approx(2.5)
    assert value(reg, "smg_router_tokens_total", token_type="output", **GEN) == 5
    assert value(reg, "smg_router_tokens_total", token_type="input", **GEN) == 7


def test_one_output_token_has_a_ttft_and_no_tpot() -> None:
    m, reg = router()
    clock = Clock()
    m.done(streamed(clock, ttft=0.2, total=0.3, out=1), clock(), None)
    assert value(reg, "smg_router_ttft_seconds_count", **GEN) == 1
    assert value(reg, "smg_router_tpot_seconds_count", **GEN) == 0


def test_a_pass_through_answer_counts_the_request_but_no_tokens() -> None:
    m, reg = router()
    clock = Clock()
    p = RequestProbe(clock, "chat", False)  # HTTP worker: the gateway reads no usage
    p.model = "m"
    clock.t += 1
    m.done(p, clock(), None)
    labels = {**GEN, "router_type": "http", "connection_mode": "http"}
    assert value(reg, "smg_router_requests_total", streaming="false", **labels) == 1
    assert value(reg, "smg_router_generation_duration_seconds_count", **GEN) == 0


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "validation_error"), (404, "no_workers"), (504, "timeout"), (408, "timeout"),
     (503, "backend_error"), (429, "internal_error")],
)  # fmt: skip
def test_error_types_follow_the_rust_mapping(status: int, kind: str) -> None:
    assert error_type(status) == kind


def test_a_failure_is_counted_under_its_error_type_and_model_unknown() -> None:
    m, reg = router()
    clock = Clock()
    m.done(RequestProbe(clock, "chat", False), clock(), 404)
    assert (
        value(
            reg, "smg_router_request_errors_total", router_type="http", backend_type="regular",
            connection_mode="http", model="unknown", endpoint="chat", error_type="no_workers",
        )
        == 1
    )  # fmt: skip


def test_token_counts_come_from_the_renderers_usage() -> None:
    class Choice:
        def __init__(self, n: int) -> None:
            self.completion_tokens = n

    class Chat:
        prompt_tokens = 11
        choices = [Choice(3), Choice(4)]

    class Messages:
        prompt_tokens = 5
        state = Choice(9)

    p = RequestProbe(Clock(), "chat", True)
    answered(p, Chat())
    assert (p.tokens_in, p.tokens_out) == (11, 7)
    answered(p, Messages())
    assert (p.tokens_in, p.tokens_out) == (5, 9)


def test_duration_buckets_are_parsed_and_checked() -> None:
    assert duration_buckets(ObservabilityConfig()) is None
    cfg = ObservabilityConfig(prometheus_duration_buckets=("0.1", "1", "10"))
    assert duration_buckets(cfg) == (0.1, 1.0, 10.0)
    for bad in (("1", "0.5"), ("abc",), ("-1",), ("nan",), ("1", "1")):
        with pytest.raises(ConfigError, match="--prometheus-duration-buckets"):
            duration_buckets(ObservabilityConfig(prometheus_duration_buckets=bad))


def test_the_policies_branches_follow_the_rust_names() -> None:
    import random

    from smg.metrics.workers import PolicyCollector
    from smg.pipeline.policies.base import RouteRequest
    from smg.pipeline.policies.manual import ManualPolicy

    policy = ManualPolicy(random.Random(0))
    workers = [type("W", (), {"worker_id": w})() for w in ("a", "b")]
    for key in (None, "k1", "k1", "k2"):
        policy.select(workers, RouteRequest(routing_key=key))  # type: ignore[arg-type]
    policy.select([], RouteRequest(routing_key="k1"))
    reg = CollectorRegistry()
    snap = type("Snap", (), {"workers": [type("S", (), {"worker_id": "a", "url": "http://a"})()]})
    reg.register(PolicyCollector(lambda: [policy], lambda: snap))  # type: ignore[arg-type,return-value]

    def branch(name: str) -> float | None:
        return reg.get_sample_value("smg_manual_policy_branch_total", {"branch": name})

    assert (branch("no_routing_id"), branch("vacant"), branch("occupied_hit")) == (1, 2, 1)
    assert branch("no_healthy_workers") == 1
    assert reg.get_sample_value("smg_manual_policy_cache_entries") == 2
    held = policy.keys_by_worker()
    assert sum(held.values()) == 2
    shown = reg.get_sample_value("smg_worker_routing_keys_active", {"worker": "http://a"})
    assert shown == held.get("a")  # a worker holding no key has no sample
