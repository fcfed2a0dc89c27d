"""IGW mode (`--enable-igw`) end to end: one gateway, workers of several models side by side.

Two HTTP `smg sim` workers serve `alpha`, one serves `beta`, and simulated vLLM engines serve
`gamma` (Qwen3's tokenizer) and `tiny` (a tiny BPE) over gRPC, each tokenizer from the engine's
GetTokenizer. The `openai` SDK reaches each model by id and
each answer comes from a worker of that model; an unknown model is 404 `model_not_found`, a
native request without a model is 400 `missing_model` (the Rust gateway's code and message), and
/v1/models lists every model once in OpenAI's list shape. A model's first worker may bring its
own policy (`policy` on POST /workers); the launch `--policy` (round_robin) stays the others'.
`--model-alias` names reach the canonical model's workers, and the answer names the canonical
model (as the Rust gateway, which rewrites the request's model). A worker serving LoRA
adapters (every entry of its /v1/models) is reached by each adapter's id. An external
OpenAI-compatible provider (a stand-in, `smg sim --provider openai`) serves `vendor-model`
beside them, by id and by alias, with its own key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from support.tiny_tokenizer import tiny_tokenizer_dir
from tokenizers import Tokenizer

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Gateway, Launcher, assert_openai_error, http, wait_completed, wait_until

ROUTED = "X-SMG-Routed-Worker-Id"
VENDOR_KEY = "sk-vendor"
MSGS = [{"role": "user", "content": "Which model are you?"}]


@dataclass
class Igw:
    gw: Gateway
    client: openai.OpenAI
    model_of: dict[str, str]  # worker id -> its model
    gw_tmp: Path  # where the tiny tokenizer was written

    def workers_of(self, model: str) -> set[str]:
        return {wid for wid, m in self.model_of.items() if m == model}


@pytest.fixture(scope="module")
def igw(module_launch: Launcher) -> Iterator[Igw]:
    engine = module_launch.start_engine("gamma")
    tiny = module_launch.start_engine(
        "tiny", tokenizer_dir=tiny_tokenizer_dir(module_launch.tmp / "tiny-tokenizer")
    )
    sims = module_launch.sims("alpha", "alpha", "beta")
    sims.append(module_launch.sim("base", adapters=["sql-lora", "chat-lora"]))
    module_launch.wait_engine(engine)
    module_launch.wait_engine(tiny)
    vendor = module_launch.provider("openai", "vendor-model", provider_keys=[VENDOR_KEY])
    aliases = [["a1=alpha"], ["g=gamma"], ["t=tiny"], ["beta=gamma"], ["ghost=nowhere"]]
    aliases.append(["v=vendor-model"])
    gw = module_launch.gateway([*sims, engine, tiny], enable_igw=True, model_alias=aliases)
    external = {"url": vendor.url, "runtime_type": "external", "provider": "openai"}
    r = gw.request("POST", "/workers", {**external, "api_key": VENDOR_KEY})
    assert r.status == 202, r
    gw.wait_ready(7)
    model_of = {w["id"]: w["model_id"] for w in gw.workers()}
    assert sorted(model_of.values()) == [
        "alpha", "alpha", "base", "beta", "gamma", "tiny", "vendor-model"
    ]  # fmt: skip
    with gw.client() as client:
        yield Igw(gw, client, model_of, module_launch.tmp)


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
    ids = [m.id for m in listed.data]
    assert len(ids) == len(set(ids)) and {"alpha", "beta", "gamma"} <= set(ids)
    assert ids.count("alpha") == 1  # two workers, one entry
    for m in listed.data:
        assert m.object == "model" and m.owned_by == "self_hosted" and isinstance(m.created, int)
    raw = igw.gw.request("GET", "/v1/models").json()
    assert raw["object"] == "list"
    assert all(set(m) == {"id", "object", "created", "owned_by"} for m in raw["data"])


def test_a_model_routes_with_its_own_policy(igw: Igw, module_launch: Launcher) -> None:
    """`hashed` gets consistent_hashing from its first worker (the top-level `policy` field; the
    second uses the Rust gateway's `labels.policy`); alpha keeps the launch round_robin."""
    gw = igw.gw
    bad = gw.request("POST", "/workers", {"url": "http://127.0.0.1:9", "policy": "fastest"})
    assert bad.status == 400 and bad.json()["code"] == "BAD_REQUEST", bad.body
    first, second = module_launch.sims("hashed", "hashed")
    for body in (
        {"url": first.url, "policy": "consistent_hashing"},
        {"url": second.url, "labels": {"policy": "consistent_hashing"}},
    ):
        r = gw.request("POST", "/workers", body)
        assert r.status == 202, r.body

    def ready() -> bool:
        mine = [w for w in gw.workers() if w["model_id"] == "hashed"]
        return len(mine) == 2 and all(w["status"] == "ready" for w in mine)

    wait_until(ready, 20.0, "the hashed workers to be ready")
    hashed = {w["id"] for w in gw.workers() if w["model_id"] == "hashed"}
    assert {w["labels"].get("policy") for w in gw.workers() if w["id"] in hashed} == {
        "consistent_hashing"
    }

    def routed(model: str, n: int, content: str) -> list[str]:
        msgs = [{"role": "user", "content": content}]
        return [
            igw.client.chat.completions.with_raw_response.create(
                model=model, messages=msgs, max_tokens=2
            ).headers[ROUTED]
            for _ in range(n)
        ]

    for content in ("first conversation", "second conversation", "third one"):
        sticky = routed("hashed", 4, content)
        assert len(set(sticky)) == 1 and sticky[0] in hashed  # one key, one worker
    turns = routed("alpha", 4, "first conversation")
    assert set(turns) == igw.workers_of("alpha") and turns[0] != turns[1]  # round robin
    chosen = gw.metric("smg_worker_selection_total", model="hashed", policy="consistent_hashing")
    assert chosen is not None and chosen >= 1
    assert gw.metric("smg_worker_selection_total", model="hashed", policy="round_robin") is None
    assert gw.metric("smg_worker_selection_total", model="alpha", policy="round_robin")


@pytest.mark.parametrize(("alias", "model"), [("a1", "alpha"), ("g", "gamma")])
def test_an_alias_reaches_its_canonical_model(igw: Igw, alias: str, model: str) -> None:
    raw = igw.client.chat.completions.with_raw_response.create(
        model=alias, messages=MSGS, max_tokens=3
    )
    out = raw.parse()
    assert out.model == model and raw.headers[ROUTED] in igw.workers_of(model)
    chunks = list(
        igw.client.chat.completions.create(model=alias, messages=MSGS, max_tokens=3, stream=True)
    )
    assert {c.model for c in chunks} == {model}
    done = igw.client.completions.create(model=alias, prompt="Say hi", max_tokens=2)
    assert done.model == model
    body = {"model": alias, "text": "hi", "sampling_params": {"max_new_tokens": 2}}
    r = igw.gw.request("POST", "/generate", body)
    assert r.status == 200 and r.header(ROUTED) in igw.workers_of(model), r.body[:300]


def test_a_served_model_shadows_an_alias_and_aliases_are_not_listed(igw: Igw) -> None:
    raw = igw.client.chat.completions.with_raw_response.create(
        model="beta", messages=MSGS, max_tokens=2
    )  # `beta=gamma`, but beta is served: beta it is
    assert raw.parse().model == "beta" and raw.headers[ROUTED] in igw.workers_of("beta")
    with pytest.raises(openai.NotFoundError) as info:  # an alias of a model nobody serves
        igw.client.chat.completions.create(model="ghost", messages=MSGS, max_tokens=2)
    assert info.value.code == "model_not_found"
    ids = {m.id for m in igw.client.models.list().data}
    assert not ids & {"a1", "g", "ghost"}  # /v1/models lists models, as the Rust gateway


def test_every_id_a_worker_lists_is_routable(igw: Igw) -> None:
    """The `base` worker's /v1/models lists two LoRA adapters after its model: each id reaches
    it (the worker sees the id asked for: it picks the adapter), and each is listed once."""
    (lora,) = igw.workers_of("base")
    record = next(w for w in igw.gw.workers() if w["id"] == lora)
    assert [m["id"] for m in record["models"]] == ["base", "sql-lora", "chat-lora"]
    for model in ("base", "sql-lora", "chat-lora"):
        raw = igw.client.chat.completions.with_raw_response.create(
            model=model, messages=MSGS, max_tokens=2
        )
        assert raw.parse().model == model and raw.headers[ROUTED] == lora
    ids = [m.id for m in igw.client.models.list().data]
    assert all(ids.count(m) == 1 for m in ("base", "sql-lora", "chat-lora")), ids


def test_pd_pairs_of_two_models_side_by_side(launch: Launcher) -> None:
    """IGW in PD mode: each model's requests go to a prefill/decode pair of that model."""
    sims = {
        (model, role): launch.sim(
            model, role=role, bootstrap_port=8998 if role == "prefill" else None
        )
        for model in ("left", "right")
        for role in ("prefill", "decode")
    }
    gw = launch.gateway(
        prefill=[(sims["left", "prefill"], 8998), (sims["right", "prefill"], 8998)],
        decode=[sims["left", "decode"], sims["right", "decode"]],
        enable_igw=True,
    )
    ids = {w["url"]: w["id"] for w in gw.workers()}
    with gw.client() as client:
        for model in ("left", "right", "left", "right"):
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=MSGS, max_tokens=3
            )
            assert raw.parse().model == model
            assert raw.headers[ROUTED] == ids[sims[model, "decode"].url]
            assert raw.headers["X-SMG-Prefill-Worker-Id"] == ids[sims[model, "prefill"].url]
    wait_completed(2, *sims.values())  # both legs of each model's two requests
    r = gw.request("POST", "/generate", {"text": "hi"})
    assert_openai_error(r, 400, "missing_model")


def test_each_engine_model_counts_with_its_own_tokenizer(igw: Igw) -> None:
    """The same prompt is a different number of tokens for gamma (Qwen3) and tiny (a BPE of a
    few hundred ids); usage says each model's count, by id and by alias alike."""
    tiny = Tokenizer.from_file(str(igw.gw_tmp / "tiny-tokenizer" / "tokenizer.json"))
    qwen = Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))
    text = "Zebras juggle quantum xylophones"
    counts = {}
    for model, alias, tok in (("gamma", "g", qwen), ("tiny", "t", tiny)):
        for asked in (model, alias):
            done = igw.client.completions.create(model=asked, prompt=text, max_tokens=4)
            assert done.model == model and done.usage is not None
            assert done.usage.prompt_tokens == len(tok.encode(text).ids)
            out = done.choices[0].text
            assert len(tok.encode(out).ids) == done.usage.completion_tokens == 4, out
        counts[model] = len(tok.encode(text).ids)
    assert counts["gamma"] != counts["tiny"], counts


def test_an_external_provider_serves_its_model_beside_the_engines(igw: Igw) -> None:
    """The provider's model by id and by alias: the answer comes from the provider stand-in,
    which was sent the worker's own key (never the client's), and /v1/models lists it once."""
    (vendor,) = igw.workers_of("vendor-model")
    record = next(w for w in igw.gw.workers() if w["id"] == vendor)
    assert (record["runtime_type"], record["provider"]) == ("external", "openai")
    for asked in ("vendor-model", "v"):
        raw = igw.client.chat.completions.with_raw_response.create(
            model=asked, messages=[{"role": "user", "content": "SIM_REPLY: from afar"}]
        )
        done = raw.parse()
        assert done.model == "vendor-model" and raw.headers[ROUTED] == vendor
        assert done.choices[0].message.content == "from afar"
    keys = http("GET", record["url"] + "/sim/keys").json()["keys"]
    assert {k["key"] for k in keys if k["path"] == "/v1/chat/completions"} == {VENDOR_KEY}
    ids = [m.id for m in igw.client.models.list().data]
    assert ids.count("vendor-model") == 1, ids
