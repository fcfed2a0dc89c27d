"""`/v1/embeddings` over gRPC engines: the `openai` SDK -> gateway (tokenize with the engine's
tokenizer, one Embed call per input) -> simulated vLLM and SGLang engines.

The sim's vector depends only on its seed and the token ids, so the gateway's tokenization is
checked by comparing a string's vector with the vector of its token ids (from /v1/tokenize).
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from .conftest import Engine, Gateway, Launcher, assert_openai_error

RUNTIMES = ("vllm", "sglang")
CONTEXT = 256  # the engines' context: an input longer than this is refused by the engine


@dataclass
class Fleet:
    gw: Gateway
    engines: dict[str, Engine]
    client: openai.OpenAI

    def tokens(self, model: str, text: str) -> list[int]:
        r = self.gw.request(
            "POST", "/v1/tokenize", {"model": model, "prompt": text, "add_special_tokens": True}
        )
        assert r.status == 200, r
        return r.json()["tokens"]


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    started = [
        module_launch.start_engine(f"embed-{rt}", rt, context_length=CONTEXT) for rt in RUNTIMES
    ]
    engines = {e.runtime: module_launch.wait_engine(e, context_length=CONTEXT) for e in started}
    gw = module_launch.gateway(list(engines.values()))
    with gw.client() as client:
        yield Fleet(gw, engines, client)


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _unit(vec: list[float]) -> None:
    assert len(vec) == 8
    assert math.isclose(math.sqrt(sum(v * v for v in vec)), 1.0, rel_tol=1e-5)


def test_sdk_strings_arrays_and_token_ids(fleet: Fleet, runtime: str) -> None:
    model = f"embed-{runtime}"
    before = fleet.engines[runtime].stats()["embed_requests"]
    texts = ["the first text", "a second, longer text to embed", "the first text"]
    res = fleet.client.embeddings.create(model=model, input=texts)  # the SDK asks base64
    assert res.object == "list" and res.model == model
    assert [d.index for d in res.data] == [0, 1, 2]
    vectors = [d.embedding for d in res.data]
    for vec in vectors:
        _unit(vec)
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]
    ids = [fleet.tokens(model, t) for t in texts]
    assert res.usage.prompt_tokens == res.usage.total_tokens == sum(len(i) for i in ids)
    assert fleet.engines[runtime].stats()["embed_requests"] == before + 3

    # token ids as they are: the same vector as the string they encode
    by_ids = fleet.client.embeddings.create(model=model, input=ids[1], encoding_format="float")
    assert by_ids.data[0].embedding == pytest.approx(vectors[1], rel=1e-6)
    assert by_ids.usage.prompt_tokens == len(ids[1])
    both = fleet.client.embeddings.create(model=model, input=[ids[0], ids[1]])
    for got, want in zip([d.embedding for d in both.data], vectors[:2], strict=True):
        assert got == pytest.approx(want, rel=1e-6)
    one = fleet.client.embeddings.create(model=model, input=texts[1])
    assert one.data[0].embedding == pytest.approx(vectors[1], rel=1e-6)


def test_float_and_base64_wire_shapes(fleet: Fleet, runtime: str) -> None:
    model = f"embed-{runtime}"
    floats = fleet.gw.request(
        "POST", "/v1/embeddings", {"model": model, "input": "hello", "encoding_format": "float"}
    )
    assert floats.status == 200, floats
    body = floats.json()
    assert set(body) == {"object", "data", "model", "usage"}
    assert body["data"][0]["object"] == "embedding"
    vec = body["data"][0]["embedding"]
    b64 = fleet.gw.request(
        "POST", "/v1/embeddings", {"model": model, "input": "hello", "encoding_format": "base64"}
    )
    raw = base64.b64decode(b64.json()["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(vec, rel=1e-6)


BAD = [
    ({"input": ""}, "empty_input", "input"),
    ({"input": []}, "empty_array", "input"),
    ({"input": [[]]}, "empty_input", "input[0]"),
    ({"input": [{"text": "x"}]}, "invalid_type", "input[0]"),
    ({"input": 5}, "invalid_type", "input"),
    ({"input": [1, -2]}, "invalid_value", "input"),
    ({"input": "x", "encoding_format": "hex"}, "invalid_value", "encoding_format"),
    ({"input": "x", "dimensions": 4}, "unsupported_parameter", "dimensions"),
    ({}, "missing_required_parameter", "input"),
]


def test_client_mistakes_are_400_and_never_trip_the_breaker(fleet: Fleet, runtime: str) -> None:
    model = f"embed-{runtime}"
    for _ in range(2):  # 2 x 9 + 12 refusals: more than the breaker's 10 consecutive failures
        for body, code, param in BAD:
            r = fleet.gw.request("POST", "/v1/embeddings", {"model": model, **body})
            assert_openai_error(r, 400, code, param)
    for _ in range(12):  # the engine's own refusal: longer than its context
        r = fleet.gw.request("POST", "/v1/embeddings", {"model": model, "input": [7] * 300})
        assert_openai_error(r, 400, "engine_invalid_request")
    worker = fleet.gw.worker_by_url(fleet.engines[runtime].url)
    assert worker is not None
    assert worker["is_healthy"] is True and worker["circuit_breaker"] == "closed", worker
    res = fleet.client.embeddings.create(model=model, input="still served")
    _unit(res.data[0].embedding)
