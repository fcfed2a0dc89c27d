"""`--dp-aware` over HTTP: an SGLang-style server reporting N data-parallel ranks in its
`/server_info` (`dp_size`) is served as N workers `url@0..url@N-1`, each request carrying its rank
as `data_parallel_rank` in the JSON body (the sim worker counts requests per rank named, "-1":
none); a server of one rank stays one worker and gets no rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from .conftest import Gateway, Launcher, Sim, flat_error


@dataclass
class Fleet:
    gw: Gateway
    ranked: Sim
    single: Sim
    client: openai.OpenAI


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    ranked = module_launch.sim("dp-http", dp_size=3)
    single = module_launch.sim("no-dp-http")
    gw = module_launch.gateway(
        [ranked, single], ready=1, dp_aware=True, enable_igw=True, policy="round_robin"
    )
    gw.wait_ready(4, timeout_s=60.0)  # the expansion follows the server's first check
    with gw.client() as client:
        yield Fleet(gw, ranked, single, client)


def gained(sim: Sim, before: dict[str, int]) -> dict[str, int]:
    after = sim.stats()["dp_ranks"]
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: v for k, v in diff.items() if v}


def test_workers_are_ranks(fleet: Fleet) -> None:
    workers = fleet.gw.workers()
    urls = sorted(w["url"] for w in workers)
    assert urls == sorted([*(f"{fleet.ranked.url}@{r}" for r in range(3)), fleet.single.url])
    assert all(w["status"] == "ready" for w in workers), workers
    ranks = [w for w in workers if w["url"] != fleet.single.url]
    assert {w["model_id"] for w in ranks} == {"dp-http"}


def test_every_rank_gets_requests_with_its_rank(fleet: Fleet) -> None:
    before = dict(fleet.ranked.stats()["dp_ranks"])
    for _ in range(3):
        fleet.client.completions.create(model="dp-http", prompt="hello", max_tokens=2)
        answer = fleet.client.chat.completions.create(
            model="dp-http", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert answer.choices[0].message.content
    assert gained(fleet.ranked, before) == {"0": 2, "1": 2, "2": 2}


def test_a_stream_goes_to_a_rank_with_its_rank(fleet: Fleet) -> None:
    before = dict(fleet.ranked.stats()["dp_ranks"])
    for _ in range(3):
        stream = fleet.client.chat.completions.create(
            model="dp-http", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
    assert gained(fleet.ranked, before) == {"0": 1, "1": 1, "2": 1}


def test_a_one_rank_server_gets_no_rank(fleet: Fleet) -> None:
    before = dict(fleet.single.stats()["dp_ranks"])
    fleet.client.completions.create(model="no-dp-http", prompt="hello", max_tokens=2)
    assert gained(fleet.single, before) == {"-1": 1}


def test_the_expanded_server_again_by_its_url_is_409(fleet: Fleet) -> None:
    for url in (fleet.ranked.url, fleet.ranked.url + "/"):
        dup = fleet.gw.request("POST", "/workers", {"url": url})
        flat_error(dup, 409, "WORKER_ALREADY_EXISTS")
    assert len(fleet.gw.workers()) == 4
