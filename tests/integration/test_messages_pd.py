"""`POST /v1/messages` in gRPC PD mode (the `anthropic` SDK): the decode leg's events rendered
as a message, whole and streamed alike."""

from __future__ import annotations

from typing import Any

import anthropic

from .conftest import Launcher


def test_messages_run_through_pd(launch: Launcher) -> None:
    prefill = launch.engine(runtime="vllm", role="prefill")
    decode = launch.engine(runtime="vllm", role="decode")
    gw = launch.gateway(prefill=[(prefill, None)], decode=[decode])
    args: dict[str, Any] = {
        "model": "sim-model",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "SIM_REPLY: hello 世界"}],
    }
    with anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=20.0) as client:
        whole = client.messages.create(**args)
        with client.messages.stream(**args) as stream:
            final = stream.get_final_message()
    assert [(b.type, getattr(b, "text", None)) for b in whole.content] == [("text", "hello 世界")]
    assert whole.stop_reason == "end_turn" and whole.usage.output_tokens > 0
    assert [b.model_dump(exclude_none=True) for b in final.content] == [
        b.model_dump(exclude_none=True) for b in whole.content
    ]
    assert final.stop_reason == whole.stop_reason
    assert decode.stats()["pd_requests"] == 2 and prefill.stats()["pd_requests"] == 2
