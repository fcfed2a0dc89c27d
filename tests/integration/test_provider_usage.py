"""A provider worker's stream counts tokens only when the client asks, as OpenAI's API does:
`stream_options.include_usage` brings one last chunk of counts (`choices: []`); without it no
chunk carries usage, whatever the vendor (the Anthropic and Gemini translations always count).
The Messages and Responses surfaces ask for the counts themselves: theirs still arrive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import openai
import pytest

from .conftest import Gateway, Launcher

KEY = "sk-worker"
VENDORS = ["openai", "anthropic", "gemini"]
SAY = [{"role": "user", "content": "SIM_REPLY: Hello there, friend."}]  # 3 completion tokens


@dataclass
class Setup:
    gw: Gateway
    client: openai.OpenAI


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    gw = module_launch.gateway([], ready=0, enable_igw=True)
    for vendor in VENDORS:
        sim = module_launch.provider(vendor, f"{vendor}-model", provider_keys=[KEY])
        body = {"url": sim.url, "runtime_type": "external", "provider": vendor, "api_key": KEY}
        r = gw.request("POST", "/workers", body)
        assert r.status == 202, r
    gw.wait_ready(len(VENDORS))
    with gw.client() as client:
        yield Setup(gw, client)


@pytest.mark.parametrize("vendor", VENDORS)
def test_no_usage_chunk_unless_asked(setup: Setup, vendor: str) -> None:
    chunks = list(
        setup.client.chat.completions.create(model=f"{vendor}-model", messages=SAY, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Hello there, friend."
    )
    assert [c for c in chunks if not c.choices] == []
    assert [c.usage for c in chunks if c.usage is not None] == []


@pytest.mark.parametrize("vendor", VENDORS)
def test_one_last_usage_chunk_when_asked(setup: Setup, vendor: str) -> None:
    chunks = list(
        setup.client.chat.completions.create(
            model=f"{vendor}-model",
            messages=SAY,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    counted = [c for c in chunks if c.usage is not None]
    assert len(counted) == 1 and counted[0] is chunks[-1] and chunks[-1].choices == []
    assert counted[0].usage is not None and counted[0].usage.completion_tokens == 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_messages_stream_still_counts(setup: Setup, vendor: str) -> None:
    with anthropic.Anthropic(base_url=setup.gw.url, api_key="x", max_retries=0) as c:
        with c.messages.stream(model=f"{vendor}-model", max_tokens=64, messages=SAY) as stream:
            final = stream.get_final_message()
    assert final.content[0].text == "Hello there, friend." and final.usage.output_tokens == 3


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_responses_stream_still_counts(setup: Setup, vendor: str) -> None:
    events = list(setup.client.responses.create(model=f"{vendor}-model", input=SAY, stream=True))
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.usage is not None and done.response.usage.output_tokens == 3
