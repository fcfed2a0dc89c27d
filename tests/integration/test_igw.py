"""IGW mode (`--enable-igw`) end to end: one gateway, workers of several models side by side.

Two HTTP `smg sim` workers serve `alpha`, one serves `beta`, and a simulated vLLM engine serves
`gamma` over gRPC (its tokenizer from GetTokenizer). The `openai` SDK reaches each model by id and
each answer comes from a worker of that model; an unknown model is 404 `model_not_found`, a
native request without a model is 400 `missing_model` (the Rust gateway's code and message), and
/v1/models lists every model once in OpenAI's list shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from .conftest import Gateway, Launcher, assert_openai_error

ROUTED = "X-SMG-Routed-Worker-Id"
MSGS = [{"role": "user", "content": "Which model are you?"}]


@dataclass
class Igw:
    gw: Gateway
    client: openai.OpenAI
    model_of: dict[str, str]  # worker id -> its model

    def workers_of(self, model: str) -> set[str]:
        return {wid for wid, m in self.model_of.items() if m == model}


@pytest.fixture(scope="module")
def igw(module_launch: Launcher) -> Iterator[Igw]:
    engine = module_launch.start_engine("gamma")
    sims = module_launch.sims("alpha", "alpha", "beta")
    module_launch.wait_engine(engine)
    gw = module_launch.gateway([*sims, engine], enable_igw=True)
    model_of = {w["id"]: w["model_id"] for w in gw.workers()}
    assert sorted(model_of.values()) == ["alpha", "alpha", "beta", "gamma"]
    with gw.client() as client:
        yield Igw(gw, client, model_of)


@pytest.mark.parametrize("model", ["alpha", "beta", "gamma"])
def test_each_model_is_served_by_its_own_workers(igw: Igw, model: str) -> None:
    seen: set[str] = set()
    for _ in range(4):
        raw = igw.client.chat.completions.with_raw_response.create(
            model=model, messages=MSGS, max_tokens=4
        )
        out = raw.parse()
        assert out.model == model
        assert out.choices[0].message.content
        seen.add(raw.headers[ROUTED])
    # every answer came from a worker of the model asked for; alpha's two take turns
    assert seen == igw.workers_of(model)


def test_streaming_and_completions_reach_each_model(igw: Igw) -> None:
    for model in ("beta", "gamma"):
        chunks = list(
            igw.client.chat.completions.create(
                model=model, messages=MSGS, max_tokens=3, stream=True
            )
        )
        assert chunks and {c.model for c in chunks} == {model}
        done = igw.client.completions.create(model=model, prompt="Say hi", max_tokens=3)
        assert done.model == model and done.usage is not None
        assert done.usage.completion_tokens == 3


def test_an_unknown_model_is_404_model_not_found(igw: Igw) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        igw.client.chat.completions.create(model="delta", messages=MSGS, max_tokens=2)
    assert info.value.code == "model_not_found"
    assert "delta" in info.value.message
    r = igw.gw.request("POST", "/generate", {"model": "delta", "text": "hi"})
    assert_openai_error(r, 404, "model_not_found")


@pytest.mark.parametrize("body", [{"text": "hi"}, {"text": "hi", "model": ""}])
def test_a_native_request_without_a_model_is_400_missing_model(igw: Igw, body: dict) -> None:
    r = igw.gw.request("POST", "/generate", body)
    err = assert_openai_error(r, 400, "missing_model", param="model")
    assert err["message"] == "/generate requests must include a model when IGW routing is enabled"
    assert r.header("X-SMG-Error-Code") == "missing_model"
    r = igw.gw.request("POST", "/v1/tokenize", {"prompt": "hi"})
    assert_openai_error(r, 400, "missing_model", param="model")


def test_a_native_request_naming_its_model_is_routed_by_it(igw: Igw) -> None:
    body = {"model": "beta", "text": "hi", "sampling_params": {"max_new_tokens": 2}}
    r = igw.gw.request("POST", "/generate", body)
    assert r.status == 200, r.body[:300]
    assert r.header(ROUTED) in igw.workers_of("beta")


def test_models_lists_every_model_once(igw: Igw) -> None:
    listed = igw.client.models.list()
    assert sorted(m.id for m in listed.data) == ["alpha", "beta", "gamma"]
    for m in listed.data:
        assert m.object == "model" and m.owned_by and isinstance(m.created, int)
    raw = igw.gw.request("GET", "/v1/models").json()
    assert raw["object"] == "list"
    assert all(set(m) == {"id", "object", "created", "owned_by"} for m in raw["data"])
