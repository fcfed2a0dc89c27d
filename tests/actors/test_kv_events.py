"""KvEventsActor against the simulated gRPC engine in-process (loopback, both runtimes)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc
import pytest
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sgl
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as sgl_grpc
from smg_grpc_proto.generated import vllm_engine_pb2 as vll
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as vll_grpc
from support.event_log import EventLog, worker_snapshot

from smg.actors.event_bus import EventBus
from smg.actors.kv_events import KvEventsActor, KvEventsConfig, KvStatus, Unwatch, Watch, backoff_s
from smg.actors.messages import (
    EngineLoadReported,
    Resync,
    WorkerHealthChanged,
    WorkerRemoved,
)
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock
from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.pipeline.backends.grpc import EngineClient
from smg.pipeline.kv_index import KvIndexes
from smg.sim.grpc_engine import GrpcSimConfig, SimEngine, start_server
from smg.sim.tokenizer_files import Vocab, load_vocab, qwen3_tokenizer_dir

MODEL = "m"
PROMPTS = [list(range(base, base + 40)) for base in (1000, 2000, 3000)]  # two full blocks each


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return load_vocab(qwen3_tokenizer_dir())


@dataclass
class Engine:
    engine: SimEngine
    server: Any
    client: EngineClient
    stub: Any
    runtime: str

    async def generate(self, ids: list[int]) -> None:
        if self.runtime == "vllm":
            req: Any = vll.GenerateRequest(
                request_id=f"r{ids[0]}",
                tokenized=vll.TokenizedInput(input_ids=ids),
                sampling_params=vll.SamplingParams(max_tokens=2),
            )
        else:
            req = sgl.GenerateRequest(
                request_id=f"r{ids[0]}",
                tokenized=sgl.TokenizedInput(input_ids=ids),
                sampling_params=sgl.SamplingParams(
                    max_new_tokens=2, temperature=1.0, top_p=1.0, top_k=-1
                ),
            )
        async for _ in self.stub.Generate(req):
            pass


@contextlib.asynccontextmanager
async def engine(vocab: Vocab, runtime: str = "vllm") -> AsyncIterator[Engine]:
    sim = SimEngine(GrpcSimConfig(runtime=runtime, kv_heartbeat_s=0.05), vocab)
    server, _health, port = await start_server(sim, "127.0.0.1", 0)
    client = await EngineClient.connect(f"grpc://127.0.0.1:{port}", runtime=runtime)
    stub_type = vll_grpc.VllmEngineStub if runtime == "vllm" else sgl_grpc.SglangSchedulerStub
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Engine(sim, server, client, stub_type(channel), runtime)
    finally:
        await channel.close()
        await client.close()
        await server.stop(None)
        sim.close()


@contextlib.asynccontextmanager
async def actor(
    clock: FakeClock, loads: list[Any] | None = None
) -> AsyncIterator[tuple[ActorRef, KvIndexes]]:
    """The actor, publishing on a bus; `loads` collects its `EngineLoadReported` events."""
    indexes = KvIndexes()
    cfg = KvEventsConfig(backoff_initial_s=0.5, backoff_max_s=4.0)
    bus = EventBus()
    async with Supervisor(clock=clock) as sup:
        if loads is not None:
            log = await sup.start_child(ChildSpec("loads", lambda: EventLog(loads)))
            bus.subscribe(log, (EngineLoadReported,))
        ref = await sup.start_child(
            ChildSpec("kv", lambda: KvEventsActor(cfg, indexes=indexes, events=bus))
        )
        yield ref, indexes
        ref.stop()


async def until(pred: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def status(ref: ActorRef, worker: str = "w1") -> dict[str, Any]:
    answer = await ref.ask(KvStatus(), 5.0)
    return dict(answer.get(MODEL, {}).get(worker, {}))


def test_backoff_doubles_to_the_cap() -> None:
    cfg = KvEventsConfig(backoff_initial_s=0.5, backoff_max_s=4.0)
    assert [backoff_s(cfg, a) for a in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


@pytest.mark.parametrize("runtime", ["vllm", "sglang"])
async def test_prompt_blocks_show_up_in_the_index(vocab: Vocab, runtime: str) -> None:
    loads: list[Any] = []
    async with (
        engine(vocab, runtime) as eng,
        actor(FakeClock(), loads) as (ref, indexes),
    ):
        ref.tell(Watch("w1", MODEL, eng.client.subscribe_kv_events))
        index = indexes.for_model(MODEL)
        await until(lambda: bool(loads))  # the load record sent before the first batch
        assert loads[0].worker_id == "w1" and loads[0].load.load_only
        assert index.match(["w1"], PROMPTS[0]) == {}  # no event batch yet: not authoritative
        await eng.generate(PROMPTS[0])
        await until(lambda: index.match(["w1"], PROMPTS[0]).get("w1", 0) >= 2)
        assert index.block_size == 16
        assert index.match(["w1"], PROMPTS[1]) == {"w1": 0}
        st = await status(ref)
        assert st["authoritative"] and st["last_seq"] >= 1 and st["subscribes"] == 1
        ref.tell(Unwatch("w1"))
        await until(lambda: index.size("w1") == 0)


async def test_cleared_empties_the_worker(vocab: Vocab) -> None:
    async with engine(vocab) as eng, actor(FakeClock()) as (ref, indexes):
        ref.tell(Watch("w1", MODEL, eng.client.subscribe_kv_events))
        index = indexes.for_model(MODEL)
        await eng.generate(PROMPTS[0])
        await until(lambda: index.size("w1") >= 2)
        flushed = await eng.stub.FlushCache(common_pb2.FlushCacheRequest())
        assert flushed.success
        await until(lambda: index.size("w1") == 0)
        assert index.match(["w1"], PROMPTS[0]) == {"w1": 0}  # still authoritative: known empty


async def test_dropped_batch_is_a_gap_and_the_resubscription_replays_it(vocab: Vocab) -> None:
    async with engine(vocab) as eng, actor(FakeClock()) as (ref, indexes):
        starts: list[int] = []

        async def lossy(start: int) -> AsyncIterator[Any]:
            starts.append(start)
            async for batch in eng.client.subscribe_kv_events(start):
                if len(starts) == 1 and batch.sequence_number == 2 and batch.events:
                    continue  # the test hook: the first stream loses batch 2
                yield batch

        ref.tell(Watch("w1", MODEL, lossy))
        index = indexes.for_model(MODEL)
        for ids in PROMPTS:
            await eng.generate(ids)
        await until(lambda: all(index.match(["w1"], ids).get("w1", 0) >= 2 for ids in PROMPTS))
        st = await status(ref)
        assert st["gaps"] == 1 and st["resets"] == 0 and st["subscribes"] == 2
        assert starts == [1, 1]  # a rebuild from the history at once, no backoff for a gap
        assert st["complete"] and st["last_seq"] == 3


async def test_restarted_engine_resets_after_backoff_on_the_clock(vocab: Vocab) -> None:
    clock = FakeClock()
    async with actor(clock) as (ref, indexes):
        index = indexes.for_model(MODEL)
        current: list[Engine] = []

        def subscribe(start: int) -> AsyncIterator[Any]:
            return current[-1].client.subscribe_kv_events(start)

        async with engine(vocab) as first:
            current.append(first)
            ref.tell(Watch("w1", MODEL, subscribe))
            await first.generate(PROMPTS[0])
            await until(lambda: index.size("w1") >= 2)
        # the engine is gone: the stream fails, the worker's entries are dropped
        await until(lambda: not index.authoritative("w1"))
        assert index.size("w1") == 0
        assert (await status(ref))["subscribes"] == 1
        async with engine(vocab) as second:  # "restarted": a fresh engine, sequence from 1
            current.append(second)
            await asyncio.sleep(0.05)
            assert (await status(ref))["subscribes"] == 1  # waits for the backoff timer
            await clock.advance(0.5)
            await second.generate(PROMPTS[1])
            await until(lambda: index.match(["w1"], PROMPTS[1]).get("w1", 0) >= 2)
            assert index.match(["w1"], PROMPTS[0]) == {"w1": 0}  # the old engine's blocks went
            st = await status(ref)
            assert st["failures"] == 1 and st["subscribes"] == 2 and st["last_seq"] == 1


async def test_the_lifecycle_on_the_bus_decides_which_workers_are_followed(vocab: Vocab) -> None:
    """Ready -> watched, removed -> unwatched, a stale event for a worker the registry no longer
    has -> ignored, and at start or on Resync: every ready worker the registry has."""
    ready = {w: replace(worker_snapshot(w), health=HealthStatus.READY) for w in ("w1", "w2", "w9")}
    registry = SnapshotCell(RegistrySnapshot.build((worker_snapshot("w1"),)))  # w1 pending
    bus = EventBus()
    indexes = KvIndexes()
    async with engine(vocab) as eng, Supervisor(clock=FakeClock()) as sup:
        ref = await sup.start_child(
            ChildSpec(
                "kv",
                lambda: KvEventsActor(
                    KvEventsConfig(),
                    indexes=indexes,
                    events=bus,
                    source=lambda w: eng.client.subscribe_kv_events,
                    registry=registry,
                ),
            )
        )
        assert await ref.ask(KvStatus(), 5.0) == {}  # nothing ready at start
        registry.publish(RegistrySnapshot.build((ready["w1"],)))
        bus.publish(WorkerHealthChanged(ready["w1"], HealthStatus.READY))
        bus.publish(WorkerHealthChanged(ready["w9"], HealthStatus.READY))  # not registered
        watched = (await ref.ask(KvStatus(), 5.0)).get(MODEL, {})  # asked after the events
        assert set(watched) == {"w1"}
        await eng.generate(PROMPTS[0])
        index = indexes.for_model(MODEL)
        await until(lambda: index.size("w1") > 0)
        bus.publish(WorkerRemoved(ready["w1"], imported=False))
        await until(lambda: index.size("w1") == 0)
        registry.publish(RegistrySnapshot.build((ready["w2"],)))
        ref.tell_control(Resync())  # what the bus sends after dropping events for it
        assert set((await ref.ask(KvStatus(), 5.0)).get(MODEL, {})) == {"w2"}
        ref.stop()
