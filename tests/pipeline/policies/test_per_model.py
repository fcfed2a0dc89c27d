"""Per-model policies (IGW mode): the launch policy by default, a model's first worker's `policy`
label otherwise; one instance per model while it is served; the runner picks with it."""

from __future__ import annotations

import random
from dataclasses import replace

from support.event_log import worker_snapshot
from support.runner_metrics import RecordingMetrics

from smg.config import RetryConfig, RoutingConfig
from smg.core.health import HealthStatus
from smg.core.retry import RetryPolicy
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.flow.runner import Runner
from smg.pipeline.policies import RouteRequest, make_policy
from smg.pipeline.policies.per_model import ModelPolicies, policy_hint
from smg.pipeline.policies.round_robin import RoundRobinPolicy


def worker(wid: str, model: str, policy: str | None = None) -> WorkerSnapshot:
    labels = (("policy", policy),) if policy else ()
    return replace(worker_snapshot(wid, model), health=HealthStatus.READY, labels=labels)


def maker(log: list[str]):  # type: ignore[no-untyped-def]
    def make(name: str):  # type: ignore[no-untyped-def]
        log.append(name)
        return make_policy(name, RoutingConfig(), random.Random(1), lambda: 0.0)

    return make


def test_the_first_worker_of_a_model_decides() -> None:
    assert policy_hint([worker("a", "m", "random"), worker("b", "m", "cache_aware")]) == "random"
    assert policy_hint([worker("a", "m"), worker("b", "m", "cache_aware")]) is None
    assert policy_hint([]) is None


def test_default_unless_a_hint_and_one_instance_per_model() -> None:
    default, made = RoundRobinPolicy(), []
    table = ModelPolicies(default, maker(made))
    plain, hinted = (worker("a", "m"),), (worker("b", "h", "consistent_hashing"),)
    assert table.for_model("m", plain) is default
    assert table.for_model("x", (worker("c", "x", "round_robin"),)) is default  # same as default
    own = table.for_model("h", hinted)
    assert own.name == "consistent_hashing" and table.for_model("h", hinted) is own
    assert made == ["consistent_hashing"] and table.models() == {"h": "consistent_hashing"}
    assert ModelPolicies(default).for_model("h", hinted) is default  # no maker: default only


def test_the_decision_sticks_until_the_model_is_gone() -> None:
    table = ModelPolicies(RoundRobinPolicy(), maker([]))
    hinted, plain = worker("a", "h", "consistent_hashing"), worker("b", "h")
    own = table.for_model("h", (hinted, plain))
    table.sync({"h": (plain,)})  # the worker that brought the hint left; the model stays
    assert table.for_model("h", (plain,)) is own
    default = table.for_model("d", (worker("c", "d"), worker("e", "d", "random")))
    table.sync({"h": (plain,), "d": (worker("e", "d", "random"),)})
    assert table.for_model("d", (worker("e", "d", "random"),)) is default is table.default
    table.sync({"h": (plain,)})  # d is gone: decided afresh when it comes back
    assert table.for_model("d", (worker("e", "d", "random"),)).name == "random"


class Spy(RoundRobinPolicy):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.removed: list[str] = []

    def on_worker_removed(self, worker_id: str) -> None:
        self.removed.append(worker_id)


def test_sync_drops_a_model_no_longer_served_and_forgets_workers_that_left() -> None:
    table = ModelPolicies(RoundRobinPolicy(), Spy)
    both = (worker("a", "h", "cache_aware"), worker("b", "h"))
    own = table.for_model("h", both)
    assert isinstance(own, Spy) and own.name == "cache_aware"
    table.sync({"h": both, "m": (worker("c", "m"),)})
    assert own.removed == []
    table.sync({"h": both[:1]})  # b left
    assert own.removed == ["b"]
    table.sync({"h": both[:1]})  # nothing new
    assert own.removed == ["b"] and table.models() == {"h": "cache_aware"}
    table.sync({})  # the model is gone: its policy (and its state) too
    assert table.models() == {}
    again = table.for_model("h", both)
    assert again is not own and again.name == "cache_aware"


class Clock:
    def now(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        pass

    def call_later(self, delay: float, callback: object) -> None:
        pass


def test_the_runner_picks_each_model_with_its_own_policy() -> None:
    fleet = (
        worker("r1", "rr"),
        worker("r2", "rr"),
        worker("h1", "ch", "consistent_hashing"),
        worker("h2", "ch"),
        worker("h3", "ch"),
    )
    cell = SnapshotCell(RegistrySnapshot.build(fleet))
    runner = Runner(
        registry=cell,
        policy=RoundRobinPolicy(),
        retry=RetryPolicy.from_config(RetryConfig()),
        clock=Clock(),  # type: ignore[arg-type]
        rng=random.Random(1),
        metrics=RecordingMetrics(),
        make_policy=maker([]),
    )
    same = RouteRequest(text="one conversation", model="rr")
    picked = [runner.select("rr", same) for _ in range(4)]
    assert [w.worker_id for w, _ in picked] == ["r1", "r2", "r1", "r2"]
    assert {name for _, name in picked} == {"round_robin"}
    same = RouteRequest(text="one conversation", model="ch")
    picked = [runner.select("ch", same) for _ in range(6)]
    assert len({w.worker_id for w, _ in picked}) == 1  # a key sticks to one worker
    assert {name for _, name in picked} == {"consistent_hashing"}
