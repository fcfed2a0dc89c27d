"""The proxy path end to end: the `openai` SDK -> gateway -> simulated workers, and back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from .conftest import Gateway, Launcher, Sim

MSGS = [{"role": "user", "content": "Tell me about gateways."}]


@dataclass
class Cluster:
    gw: Gateway
    alpha: list[Sim]  # two workers serving "alpha"
    beta: Sim  # one worker serving "beta"
    client: openai.OpenAI


@pytest.fixture(scope="module")
def cluster(module_launch: Launcher) -> Iterator[Cluster]:
    a1, a2, b = module_launch.sims("alpha", "alpha", "beta")
    gw = module_launch.gateway([a1, a2, b])
    with gw.client() as client:
        yield Cluster(gw, [a1, a2], b, client)


def test_chat_unary_and_stream_give_the_same_answer(cluster: Cluster) -> None:
    c = cluster.client
    whole = c.chat.completions.create(model="alpha", messages=MSGS, max_tokens=12, seed=7)
    assert whole.id.startswith("chatcmpl")
    assert whole.model == "alpha"
    assert len(whole.choices) == 1
    choice = whole.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason == "length"  # max_tokens set: the sim always reaches it
    assert whole.usage is not None
    assert whole.usage.completion_tokens == 12
    assert whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12

    stream = c.chat.completions.create(
        model="alpha",
        messages=MSGS,
        max_tokens=12,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    finish: list[str] = []
    usage = None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish.append(ch.finish_reason)
        if chunk.usage is not None:
            usage = chunk.usage
    # Both workers share the sim's default seed: the same prompt and seed give the same text.
    assert "".join(parts) == choice.message.content
    assert finish == ["length"]
    assert usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_stream_without_limit_finishes_with_stop(cluster: Cluster) -> None:
    chunks = list(cluster.client.chat.completions.create(model="beta", messages=MSGS, stream=True))
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    assert text.strip()
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["stop"]
    assert all(c.model == "beta" for c in chunks)


def test_completions_unary_and_stream(cluster: Cluster) -> None:
    c = cluster.client
    whole = c.completions.create(model="alpha", prompt="Once upon a time", max_tokens=9, seed=3)
    assert whole.object == "text_completion"
    assert whole.choices[0].text.strip()
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 9

    stream = c.completions.create(
        model="alpha", prompt="Once upon a time", max_tokens=9, seed=3, stream=True
    )
    chunks = list(stream)
    assert "".join(ch.text for c in chunks for ch in c.choices) == whole.choices[0].text
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["length"]


def test_embeddings(cluster: Cluster) -> None:
    res = cluster.client.embeddings.create(model="beta", input=["first text", "second text"])
    assert res.model == "beta"
    assert [d.index for d in res.data] == [0, 1]
    dims = {len(d.embedding) for d in res.data}
    assert len(dims) == 1 and dims.pop() > 0
    assert res.data[0].embedding != res.data[1].embedding
    again = cluster.client.embeddings.create(model="beta", input="first text")
    assert again.data[0].embedding == res.data[0].embedding  # deterministic per input
    assert res.usage.prompt_tokens > 0


def test_models_lists_the_union_of_the_workers_models(cluster: Cluster) -> None:
    models = cluster.client.models.list()
    ids = sorted(m.id for m in models.data)
    assert ids == ["alpha", "beta"]
    assert all(m.object == "model" for m in models.data)


def test_request_id_is_echoed_or_generated(cluster: Cluster) -> None:
    c = cluster.client
    raw = c.chat.completions.with_raw_response.create(
        model="alpha", messages=MSGS, max_tokens=2, extra_headers={"x-request-id": "trace-abc-123"}
    )
    assert raw.headers.get("x-request-id") == "trace-abc-123"
    assert raw.parse().choices[0].message.content

    ids = set()
    for _ in range(2):
        raw = c.chat.completions.with_raw_response.create(
            model="alpha", messages=MSGS, max_tokens=2
        )
        rid = raw.headers.get("x-request-id")
        assert rid and rid.startswith("chatcmpl-"), rid
        ids.add(rid)
    assert len(ids) == 2

    # Errors carry it too.
    resp = cluster.gw.request(
        "POST", "/v1/chat/completions", {"model": "nope", "messages": MSGS},
        headers={"x-request-id": "trace-err-1"},
    )  # fmt: skip
    assert resp.status == 404
    assert resp.header("x-request-id") == "trace-err-1"


def test_round_robin_spreads_over_both_workers(cluster: Cluster) -> None:
    before = [s.stats()["requests"] for s in cluster.alpha]
    beta_before = cluster.beta.stats()["requests"]
    for _ in range(10):
        out = cluster.client.chat.completions.create(model="alpha", messages=MSGS, max_tokens=2)
        assert out.choices[0].message.content
    after = [s.stats()["requests"] for s in cluster.alpha]
    assert [a - b for a, b in zip(after, before, strict=True)] == [5, 5]
    assert cluster.beta.stats()["requests"] == beta_before  # other model's worker untouched
