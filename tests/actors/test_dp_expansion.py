"""`--dp-aware` in the registry: a worker whose probe reports N > 1 data-parallel ranks becomes N
workers `url@rank` (registered as it was); without the flag, or with one rank, nothing changes.
Simulated time, a scripted prober, no sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from smg.actors.messages import AddWorker, RemoveWorker
from smg.actors.registry import DuplicateWorker, RegistryActor
from smg.actors.runtime import ActorRef
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


@dataclass
class Rig:
    registry: ActorRef
    cell: SnapshotCell[RegistrySnapshot]
    clock: FakeClock


@asynccontextmanager
async def rig(
    prober: DpProber,
    dp_aware: bool,
    release: Callable[[str], Awaitable[None]] | None = None,
    grace_s: float = 0.0,
) -> AsyncIterator[Rig]:
    """A registry under its supervisors, in simulated time."""
    clock = FakeClock()
    cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())
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
                release_engine=release,
                release_grace_s=grace_s,
            ),
        )
        yield Rig(await core.start_child(spec), cell, clock)
    finally:
        for sup in (core, wsup):
            await sup.__aexit__(None, None, None)


async def run(dp_size: int, dp_aware: bool) -> tuple[RegistrySnapshot, DpProber]:
    prober = DpProber(dp_size)
    async with rig(prober, dp_aware) as r:
        await r.registry.ask(AddWorker("grpc://e:1", priority=7, labels=(("k", "v"),)), 1.0)
        await settle()
        await r.clock.advance(2.0)
        return r.cell.value, prober


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


class Releases:
    """The registry's `release_engine`: the engine URLs it was called with."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    async def __call__(self, url: str) -> None:
        self.urls.append(url)


async def test_rank_bookkeeping_duplicates_and_release() -> None:
    """After the expansion, the engine's plain URL is a duplicate; removing rank workers releases
    the engine's connection with the last of them only (not when the plain worker makes way for
    its ranks); a plain worker's removal releases its engine at once."""
    releases = Releases()
    async with rig(DpProber(2), True, releases) as r:
        registry, cell, clock = r.registry, r.cell, r.clock
        await registry.ask(AddWorker("grpc://e:1"), 1.0)
        await settle()
        await clock.advance(2.0)
        ranks = {w.url: w.worker_id for w in cell.value.workers}
        assert sorted(ranks) == ["grpc://e:1@0", "grpc://e:1@1"]
        assert releases.urls == []  # the plain worker made way for its ranks: kept
        for again in ("grpc://e:1", "grpc://e:1/", "grpc://e:1@1"):
            with pytest.raises(DuplicateWorker) as dup:
                await registry.ask(AddWorker(again), 1.0)
            assert dup.value.worker_id in ranks.values()
        assert len(cell.value.workers) == 2
        await registry.ask(RemoveWorker(ranks["grpc://e:1@0"]), 1.0)
        assert releases.urls == []  # rank 1 still uses the connection
        await registry.ask(RemoveWorker(ranks["grpc://e:1@1"]), 1.0)
        assert releases.urls == ["grpc://e:1"]
        assert cell.value.workers == ()
        other = await registry.ask(AddWorker("http://h:2"), 1.0)
        await registry.ask(RemoveWorker(other.worker_id), 1.0)  # before its first check
        assert releases.urls == ["grpc://e:1", "http://h:2"]


async def test_the_pool_forgets_an_engine_by_a_rank_url() -> None:
    from smg.pipeline.backends.grpc_pool import EnginePool

    class Client:
        closed = False

        async def close(self) -> None:
            self.closed = True

    pool, client = EnginePool(), Client()
    pool._clients["grpc://e:1"] = client  # type: ignore[assignment]
    await pool.forget("grpc://e:1@3")
    assert client.closed and pool._clients == {}


async def test_the_release_waits_out_the_grace_and_skips_an_engine_back_in_use() -> None:
    """With a grace (the gateway's request deadline), the connection of a removed engine is
    closed that much later, so requests still running on it finish; an engine registered again
    within the grace keeps its connection."""
    releases = Releases()
    async with rig(DpProber(1), True, releases, grace_s=30.0) as r:
        first = await r.registry.ask(AddWorker("grpc://e:1"), 1.0)
        await r.registry.ask(RemoveWorker(first.worker_id), 1.0)
        await r.clock.advance(29.0)
        assert releases.urls == []
        await r.clock.advance(2.0)
        await settle()
        assert releases.urls == ["grpc://e:1"]
        again = await r.registry.ask(AddWorker("grpc://e:2"), 1.0)
        await r.registry.ask(RemoveWorker(again.worker_id), 1.0)
        await r.registry.ask(AddWorker("grpc://e:2"), 1.0)  # back within the grace
        await r.clock.advance(31.0)
        await settle()
        assert releases.urls == ["grpc://e:1"]
