"""External providers as workers: the `openai` SDK -> gateway -> a provider stand-in
(`smg sim --provider openai|anthropic|gemini`, each speaking its vendor's documented wire
format), the worker registered with `--backend` or `POST /workers` (`runtime_type: external`)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from .conftest import Gateway, Launcher, Sim, http, wait_until

KEY = "sk-worker"
CLIENT_KEY = "sk-client-own"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = 'SIM_REPLY: <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'


def keys_seen(sim: Sim, path: str | None = None) -> list[str | None]:
    """The keys the stand-in was sent (on `path` only, when given), oldest first."""
    r = http("GET", sim.url + "/sim/keys")
    assert r.status == 200, r
    return [k["key"] for k in r.json()["keys"] if path is None or k["path"] == path]


def last_request(sim: Sim) -> dict[str, Any]:
    return http("GET", sim.url + "/sim/requests").json()["requests"][-1]


def chat_path(vendor: str, model: str, stream: bool) -> str:
    """Where the vendor's stand-in is sent a chat request."""
    if vendor == "gemini":
        return f"/v1beta/models/{model}:{'streamGenerateContent' if stream else 'generateContent'}"
    return "/v1/messages" if vendor == "anthropic" else "/v1/chat/completions"


@pytest.fixture(scope="module", params=["openai", "anthropic", "gemini"])
def fleet(request: pytest.FixtureRequest, module_launch: Launcher) -> tuple[str, Sim, Gateway]:
    """A stand-in of the vendor and a gateway in front of it: with `--backend` (the Rust
    gateway's flag: openai and anthropic), else registered (`runtime_type: external`)."""
    vendor = request.param
    sim = module_launch.provider(vendor, f"{vendor}-model", provider_keys=[KEY, CLIENT_KEY])
    if vendor == "gemini":
        gw = module_launch.gateway([], ready=0)
        body = {"url": sim.url, "runtime_type": "external", "provider": vendor, "api_key": KEY}
        r = gw.request("POST", "/workers", body)
        assert r.status == 202, r
        gw.wait_ready(1)
    else:
        gw = module_launch.gateway([sim], backend=vendor, worker_api_key=KEY)
    return vendor, sim, gw


def test_the_worker_record_shows_external_and_its_provider(fleet: tuple[str, Sim, Gateway]) -> None:
    vendor, sim, gw = fleet
    worker = gw.worker_by_url(sim.url)
    assert worker is not None
    assert (worker["runtime_type"], worker["provider"]) == ("external", vendor)
    assert worker["model_id"] == f"{vendor}-model" and worker["status"] == "ready"
    assert KEY not in json.dumps(worker)


def test_whole_and_streamed_answers(fleet: tuple[str, Sim, Gateway]) -> None:
    vendor, sim, gw = fleet
    client, model = gw.client(), f"{vendor}-model"
    messages = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "SIM_REPLY: Hello there, friend."},
    ]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=50)
    assert whole.choices[0].message.content == "Hello there, friend."
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None and whole.usage.completion_tokens == 3
    sent = last_request(sim)
    if vendor == "anthropic":  # translated: the system prompt and max_tokens as Messages has them
        assert sent["system"] == "Be kind." and sent["max_tokens"] == 50
    elif vendor == "gemini":  # translated: Gemini's systemInstruction and generationConfig
        assert sent["systemInstruction"]["parts"] == [{"text": "Be kind."}]
        assert sent["generationConfig"]["maxOutputTokens"] == 50
    else:  # passed through
        assert sent["messages"] == messages
    chunks = list(
        client.chat.completions.create(model=model, messages=messages, max_tokens=50, stream=True)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, friend."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    path = chat_path(vendor, model, stream=True)
    assert keys_seen(sim, path)[-1] == KEY  # the worker's key; BYOK is off


def test_a_tool_call_round_trip_whole_and_streamed(fleet: tuple[str, Sim, Gateway]) -> None:
    vendor, sim, gw = fleet
    client, model = gw.client(), f"{vendor}-model"
    ask = [{"role": "user", "content": CALL}]
    whole = client.chat.completions.create(model=model, messages=ask, tools=[WEATHER])
    assert whole.choices[0].finish_reason == "tool_calls"
    call = whole.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}

    chunks = list(
        client.chat.completions.create(model=model, messages=ask, tools=[WEATHER], stream=True)
    )
    parts = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert parts[0].function.name == "get_weather" and parts[0].id
    assert json.loads("".join(p.function.arguments or "" for p in parts)) == {"city": "Oslo"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"

    follow = [
        *ask,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"},
        {"role": "user", "content": "SIM_REPLY: It is 18C in Oslo."},
    ]
    done = client.chat.completions.create(model=model, messages=follow, tools=[WEATHER])
    assert done.choices[0].message.content == "It is 18C in Oslo."
    if vendor == "anthropic":
        sent = last_request(sim)["messages"]
        assert sent[1]["content"][0]["type"] == "tool_use"
        assert sent[1]["content"][0]["input"] == {"city": "Oslo"}
        result = sent[2]["content"][0]
        assert result == {"type": "tool_result", "tool_use_id": call.id, "content": "18C and sunny"}


def test_the_upstream_429_reaches_the_client_as_429_in_openai_shape(
    fleet: tuple[str, Sim, Gateway],
) -> None:
    vendor, _, gw = fleet
    r = gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": f"{vendor}-model", "messages": [{"role": "user", "content": "SIM_STATUS: 429"}]},
    )
    assert r.status == 429, r
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    if vendor == "gemini":  # Gemini says when in the body (RetryInfo), not in a header
        assert "retry after 7s" in r.json()["error"]["message"]
    else:
        assert r.header("retry-after") == "1"
    with pytest.raises(openai.RateLimitError) as info:
        gw.client().chat.completions.create(
            model=f"{vendor}-model",
            messages=[{"role": "user", "content": "SIM_STATUS: 429"}],
            stream=True,
        )
    assert info.value.status_code == 429 and info.value.code == "rate_limit_exceeded"


def test_anthropic_listed_ids_overload_and_a_stream_error_event(module_launch: Launcher) -> None:
    sim = module_launch.provider(
        "anthropic", "claude-x", provider_keys=[KEY], adapters=["claude-b"]
    )
    gw = module_launch.gateway(
        [sim], backend="anthropic", worker_api_key=KEY, retry_max_retries=1, enable_igw=True
    )
    client = gw.client()
    # every id the provider lists is routable (IGW): the request goes out under that id
    other = client.chat.completions.create(
        model="claude-b", messages=[{"role": "user", "content": "SIM_REPLY: b here"}]
    )
    assert other.choices[0].message.content == "b here"
    assert last_request(sim)["model"] == "claude-b"
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(
            model="claude-x", messages=[{"role": "user", "content": "SIM_STATUS: 529"}]
        )
    assert info.value.status_code == 529 and info.value.code == "overloaded"
    chunks = client.chat.completions.create(
        model="claude-x",
        messages=[{"role": "user", "content": "SIM_STATUS: 299 then it breaks"}],
        stream=True,
    )
    with pytest.raises(openai.APIError, match="Overloaded"):
        for _ in chunks:
            pass


def test_a_wrong_worker_key_is_unhealthy_and_never_logged(module_launch: Launcher) -> None:
    sim = module_launch.provider("anthropic", "claude-x", provider_keys=[KEY])
    gw = module_launch.gateway(ready=0)
    wrong = "sk-wrong-key-123"
    body = {"url": sim.url, "runtime_type": "external", "provider": "anthropic", "api_key": wrong}
    r = gw.request("POST", "/workers", body)
    assert r.status in (200, 201, 202), r
    wait_until(lambda: wrong in keys_seen(sim), 10.0, "the listing to be read")
    wait_until(
        lambda: "refused the worker's key" in gw.proc.log_tail(400), 10.0, "the refusal logged"
    )
    worker = gw.worker_by_url(sim.url)
    assert worker is not None and worker["status"] != "ready"
    assert (worker["runtime_type"], worker["provider"]) == ("external", "anthropic")
    assert wrong not in gw.proc.log_tail(2000)
    bad = gw.request("POST", "/workers", {"url": sim.url + "/x", "provider": "cohere"})
    assert bad.status == 400 and "provider" in bad.body.decode()


@pytest.mark.parametrize("byok", [True, False])
def test_bring_your_own_key(module_launch: Launcher, byok: bool) -> None:
    sim = module_launch.provider("openai", "gpt-x", provider_keys=[KEY, CLIENT_KEY])
    gw = module_launch.gateway(
        [sim],
        backend="openai",
        worker_api_key=KEY,
        provider_byok=byok,
        max_upstream_response_bytes=4000,
        retry_max_retries=1,
    )
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    got = client.chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": "SIM_REPLY: ok"}]
    )
    assert got.choices[0].message.content == "ok"
    assert keys_seen(sim, "/v1/chat/completions")[-1] == (CLIENT_KEY if byok else KEY)
    assert set(keys_seen(sim, "/v1/models")) == {KEY}  # the health check: the worker's own
    # an answer past the gateway's cap is the worker's failure, in OpenAI's shape
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model="gpt-x", messages=[{"role": "user", "content": "SIM_REPLY: " + "word " * 1000}]
        )
    assert info.value.status_code == 502 and info.value.code == "upstream_response_too_large"


def test_messages_over_an_openai_provider_worker(module_launch: Launcher) -> None:
    sim = module_launch.provider("openai", "gpt-x", provider_keys=[KEY])
    gw = module_launch.gateway([sim], backend="openai", worker_api_key=KEY)
    with anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=20.0) as c:
        msg = c.messages.create(
            model="gpt-x",
            max_tokens=64,
            system="Be brief.",
            messages=[{"role": "user", "content": "SIM_REPLY: Bonjour."}],
        )
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "Bonjour."
    assert msg.stop_reason == "end_turn"
    sent = last_request(sim)
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert keys_seen(sim, "/v1/chat/completions")[-1] == KEY


def test_what_the_vendor_cannot_do_is_a_400(fleet: tuple[str, Sim, Gateway]) -> None:
    vendor, _, gw = fleet
    r = gw.request("POST", "/v1/completions", {"model": f"{vendor}-model", "prompt": "hi"})
    assert r.status == 400, r
    assert r.json()["error"]["code"] == "unsupported_endpoint"
    if vendor == "anthropic":
        body = {"model": "anthropic-model", "n": 2, "messages": [{"role": "user", "content": "x"}]}
        r = gw.request("POST", "/v1/chat/completions", body)
        assert r.status == 400, r
        assert (r.json()["error"]["code"], r.json()["error"]["param"]) == (
            "unsupported_parameter",
            "n",
        )


@pytest.mark.parametrize("fleet", ["anthropic"], indirect=True)
def test_responses_over_an_anthropic_provider_worker(fleet: tuple[str, Sim, Gateway]) -> None:
    """Responses reaches a provider worker as chat completions, so an Anthropic upstream serves
    it through the same translation, whole and streamed."""
    _, sim, gw = fleet
    client = gw.client()
    resp = client.responses.create(
        model="anthropic-model", input="SIM_REPLY: Hej hej.", instructions="Be Swedish."
    )
    assert resp.status == "completed" and resp.output_text == "Hej hej."
    assert last_request(sim)["system"] == "Be Swedish."
    events = list(
        client.responses.create(model="anthropic-model", input="SIM_REPLY: Hej igen.", stream=True)
    )
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Hej igen."
