"""`--dp-aware` in the registry: a worker whose probe reports N > 1 data-parallel ranks becomes N
workers `url@rank` (registered as it was); without the flag, or with one rank, nothing changes.
Simulated time, a scripted prober, no sockets."""

from __future__ import annotations

import pytest

from smg.actors.messages import AddWorker
from smg.actors.registry import RegistryActor
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock, settle
from smg.config import CircuitBreakerConfig, HealthConfig
from smg.core import dp
from smg.core.health import HealthStatus, ProbeResult
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot

HEALTH = HealthConfig(health_success_threshold=1, health_check_interval_secs=10.0)


class DpProber:
    def __init__(self, dp_size: int) -> None:
        self.dp_size = dp_size
        self.urls: list[str] = []

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        self.urls.append(worker.url)
        return ProbeResult(ok=True, model_id="m", dp_size=self.dp_size)


async def run(dp_size: int, dp_aware: bool) -> tuple[RegistrySnapshot, DpProber]:
    clock = FakeClock()
    cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())
    prober = DpProber(dp_size)
    wsup, core = Supervisor("workers", clock=clock), Supervisor("core", clock=clock)
    await wsup.__aenter__()
    await core.__aenter__()
    try:
        spec = ChildSpec(
            "registry",
            lambda: RegistryActor(
                cell=cell,
                workers_sup=wsup,
                prober=prober,
                health_cfg=HEALTH,
                breaker_cfg=CircuitBreakerConfig(),
                dp_aware=dp_aware,
            ),
        )
        registry = await core.start_child(spec)
        await registry.ask(AddWorker("grpc://e:1", priority=7, labels=(("k", "v"),)), 1.0)
        await settle()
        await clock.advance(2.0)
        return cell.value, prober
    finally:
        for sup in (core, wsup):
            await sup.__aexit__(None, None, None)


async def test_an_engine_of_three_ranks_becomes_three_workers() -> None:
    snap, prober = await run(3, dp_aware=True)
    assert sorted(w.url for w in snap.workers) == ["grpc://e:1@0", "grpc://e:1@1", "grpc://e:1@2"]
    for w in snap.workers:
        assert (w.model_id, w.priority, w.labels) == ("m", 7, (("k", "v"),))
        assert w.health is HealthStatus.READY
    assert set(prober.urls) == {"grpc://e:1", "grpc://e:1@0", "grpc://e:1@1", "grpc://e:1@2"}


@pytest.mark.parametrize(("size", "aware"), [(3, False), (1, True)])
async def test_no_expansion(size: int, aware: bool) -> None:
    snap, _ = await run(size, dp_aware=aware)
    assert [w.url for w in snap.workers] == ["grpc://e:1"]
    assert snap.workers[0].dp_size == size


def test_rank_urls() -> None:
    assert dp.rank_urls("grpc://h:1", 2) == ("grpc://h:1@0", "grpc://h:1@1")
    assert (dp.engine_url("grpc://h:1@12"), dp.rank_of("grpc://h:1@12")) == ("grpc://h:1", 12)
    assert (dp.engine_url("grpc://u@h:1"), dp.rank_of("grpc://u@h:1")) == ("grpc://u@h:1", None)
    assert dp.rank_of("grpc://h:1@") is None
    assert dp.expands("grpc://h:1", 2) and not dp.expands("grpc://h:1@0", 2)
    assert not dp.expands("grpc://h:1", None) and not dp.expands("grpc://h:1", 1)


def test_a_rank_workers_bootstrap_host_is_its_engines() -> None:
    from smg.pipeline.pd import bootstrap_host

    assert bootstrap_host("grpc://10.0.0.5:30001@3") == "10.0.0.5"
    assert bootstrap_host("grpc://[::1]:30001@0") == "::1"
