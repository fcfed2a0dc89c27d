"""`--dp-aware`: an engine reporting N data-parallel ranks (vLLM's data_parallel_size, SGLang's
server arg dp_size) is served as N workers `url@0..url@N-1`, each request carrying its rank
(`data_parallel_rank`), which the sim engine counts per rank; an engine of one rank stays one
worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from .conftest import Engine, Gateway, Launcher


@dataclass
class Fleet:
    gw: Gateway
    vllm: Engine
    sglang: Engine
    single: Engine
    client: openai.OpenAI


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    started = [
        module_launch.start_engine("dp-vllm", "vllm", dp_size=3),
        module_launch.start_engine("dp-sglang", "sglang", dp_size=2),
        module_launch.start_engine("no-dp", "vllm"),
    ]
    vllm, sglang, single = (module_launch.wait_engine(e) for e in started)
    gw = module_launch.gateway(
        [vllm, sglang, single], ready=1, dp_aware=True, enable_igw=True, policy="round_robin"
    )
    gw.wait_ready(6, timeout_s=60.0)  # the expansion follows each engine's first check
    with gw.client() as client:
        yield Fleet(gw, vllm, sglang, single, client)


def test_workers_are_ranks(fleet: Fleet) -> None:
    urls = sorted(w["url"] for w in fleet.gw.workers())
    expected = [f"{fleet.vllm.url}@{r}" for r in range(3)]
    expected += [f"{fleet.sglang.url}@{r}" for r in range(2)]
    assert urls == sorted([*expected, fleet.single.url])
    ranks = [w for w in fleet.gw.workers() if w["url"] != fleet.single.url]
    assert all(w["status"] == "ready" for w in ranks), ranks
    assert {w["model_id"] for w in ranks} == {"dp-vllm", "dp-sglang"}


@pytest.mark.parametrize(("model", "size"), [("dp-vllm", 3), ("dp-sglang", 2)])
def test_every_rank_used_and_named(fleet: Fleet, model: str, size: int) -> None:
    engine = fleet.vllm if model == "dp-vllm" else fleet.sglang
    before = dict(engine.stats()["dp_ranks"])
    for _ in range(3 * size):
        fleet.client.completions.create(model=model, prompt="hello", max_tokens=2)
    after = engine.stats()["dp_ranks"]
    gained = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert {k: v for k, v in gained.items() if v} == {str(r): 3 for r in range(size)}


def test_sglang_embed_carries_the_rank(fleet: Fleet) -> None:
    before = dict(fleet.sglang.stats()["dp_ranks"])
    for _ in range(4):
        fleet.client.embeddings.create(model="dp-sglang", input="rank me")
    after = fleet.sglang.stats()["dp_ranks"]
    assert {k: after.get(k, 0) - before.get(k, 0) for k in after} == {"0": 2, "1": 2}


def test_single_rank_engine_gets_no_rank(fleet: Fleet) -> None:
    before = dict(fleet.single.stats()["dp_ranks"])
    fleet.client.completions.create(model="no-dp", prompt="hello", max_tokens=2)
    after = fleet.single.stats()["dp_ranks"]
    assert after.get("-1", 0) == before.get("-1", 0) + 1
