"""LoRA adapters of gRPC engines (`--enable-igw`): an SGLang engine's ListLoadedLoRAAdapters is
read at each health check; every adapter is routable by its name, and a request for one reaches
that engine naming the adapter by the engine's id (`lora_id`), with the base model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from .conftest import Engine, Gateway, Launcher, assert_openai_error, wait_until

ADAPTERS = ["sql-lora", "chat-lora"]


@dataclass
class Fleet:
    gw: Gateway
    base: Engine
    other: Engine
    client: openai.OpenAI


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    started = [
        module_launch.start_engine("base", "sglang", adapters=ADAPTERS),
        module_launch.start_engine("other", "vllm"),
    ]
    base, other = (module_launch.wait_engine(e) for e in started)
    gw = module_launch.gateway([base, other], enable_igw=True)
    with gw.client() as client:
        yield Fleet(gw, base, other, client)


def test_adapters_listed_and_shown(fleet: Fleet) -> None:
    def listed() -> bool:
        ids = {m.id for m in fleet.client.models.list()}
        return {"base", "other", *ADAPTERS} <= ids

    wait_until(listed, 10.0, "the engine's adapters in /v1/models")
    worker = fleet.gw.worker_by_url(fleet.base.url)
    assert worker is not None
    assert [m["id"] for m in worker["models"]] == ["base", *ADAPTERS]
    other = fleet.gw.worker_by_url(fleet.other.url)
    assert other is not None and [m["id"] for m in other["models"]] == ["other"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapter_request_reaches_the_engine_with_its_lora_id(fleet: Fleet, adapter: str) -> None:
    wait_until(
        lambda: adapter in {m.id for m in fleet.client.models.list()}, 10.0, "adapters listed"
    )
    before = fleet.base.stats()
    res = fleet.client.chat.completions.create(
        model=adapter, messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    assert res.model == adapter
    assert res.choices[0].message.content
    # the engine counts a call completed after its last message is sent, which the client may
    # read first (a full run saw completed 2 of 3): wait for the count, do not read it at once
    wait_until(
        lambda: fleet.base.stats()["completed"] == before["completed"] + 1, 5.0, "call completed"
    )
    after = fleet.base.stats()
    # the sim refuses a lora_id it did not load (the name, say): this one was its id
    assert after["lora_requests"] == before["lora_requests"] + 1

    # the base model: no adapter named
    fleet.client.completions.create(model="base", prompt="hi", max_tokens=2)
    assert fleet.base.stats()["lora_requests"] == after["lora_requests"]


def test_unknown_adapter_is_404(fleet: Fleet) -> None:
    r = fleet.gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": "sql-lora-x", "messages": [{"role": "user", "content": "x"}]},
    )
    assert_openai_error(r, 404, "model_not_found")
