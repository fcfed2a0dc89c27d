"""Finding 13: stop strings cost quadratic memory (one 24 KiB request with n=10 added 720 MB).

Now one Aho-Corasick automaton per request, shared by its choices, and a 1024-character cap per
stop string checked at request time. The unit test drives the finding's shape (24 KiB of stop
strings, n=10, a long output that keeps partial matches alive) straight through the output
stage, past the request-time cap; the process test shows the request itself is refused with the
OpenAI error, and that a request at the caps streams through a real gateway in gRPC mode without
adding memory.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import psutil
import pytest
from integration.conftest import Launcher, assert_openai_error

from smg.pipeline.output import ChoiceState, OutputSpec

pytestmark = pytest.mark.serial  # measures a gateway's memory growth

MB = 1 << 20
# 4 x 6 KiB stop strings (the count OpenAI allows): each a run that the output keeps matching,
# with a last character that never comes, so every choice holds a partial match all along
FINDING_STOPS = ("a" * 6143 + "Z", "a" * 6143 + "Y", "b" * 6143 + "X", "ab" * 3071 + "W")


def chars(ids: Any, skip_special_tokens: bool = True) -> str:
    """A decode function where a token id is a code point."""
    return "".join(map(chr, ids))


@pytest.mark.chaos  # hostile load: 10 x 100 K characters under tracemalloc (6-12 s)
def test_finding_13_request_shape_adds_under_20_mb_in_the_output_stage() -> None:
    output = "a" * 50_000 + "ab" * 25_000  # 100 K characters of near-misses
    ids = [ord(c) for c in output]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        spec = OutputSpec("id", "m", 0, chat=True, n=10, stop=FINDING_STOPS)
        choices = [ChoiceState(i, chars, spec) for i in range(spec.n)]
        emitted = ["" for _ in choices]
        for pos in range(0, len(ids), 3):  # a few characters per token, as models emit
            for i, choice in enumerate(choices):
                emitted[i] += choice.feed(ids[pos : pos + 3])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Each choice holds at most the longest stop string - 1 characters back; the rest is out.
    for choice, text in zip(choices, emitted, strict=True):
        assert not choice.done
        assert len(output) - len(text) <= 6143
        assert output.startswith(text)
    # The emitted text itself (10 x ~100 K characters) is counted too; the old code needed
    # ~75 MB per choice for the prefix set alone.
    assert peak - before < 20 * MB, f"{(peak - before) / MB:.1f} MB"


def reply(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"SIM_REPLY: {text}"}]


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def test_finding_13_through_a_grpc_gateway(launch: Launcher) -> None:
    engine = launch.engine("grpc-model", "vllm")
    gw = launch.gateway([engine])
    body: dict[str, Any] = {"model": "grpc-model", "messages": reply("hi"), "n": 10}

    # the finding's request: refused up front, in the OpenAI shape
    refused = gw.request("POST", "/v1/chat/completions", {**body, "stop": list(FINDING_STOPS)})
    err = assert_openai_error(refused, 400, "string_above_max_length", "stop")
    assert "1024" in err["message"]

    # at the caps: 4 stop strings of 1024 characters, n=10, an output that keeps every stop
    # string partially matched; the gateway's memory does not move
    stops = ["a" * 1023 + "Z", "a" * 1023 + "Y", "b" * 1024, "ab" * 511 + "WW"]
    long_reply = "a" * 12_000 + " and " + "ab" * 3_000
    at_caps = {**body, "messages": reply(long_reply), "stop": stops, "max_tokens": 8192}
    warm = gw.request("POST", "/v1/chat/completions", {**at_caps, "n": 1}, timeout_s=60)
    assert warm.status == 200, warm.body[:300]
    before = rss(gw.proc.popen.pid)
    for _ in range(3):
        r = gw.request("POST", "/v1/chat/completions", at_caps, timeout_s=120)
        assert r.status == 200, r.body[:300]
        choices = r.json()["choices"]
        assert len(choices) == 10
        assert all(c["message"]["content"] == long_reply for c in choices)
    grown = rss(gw.proc.popen.pid) - before
    assert grown < 20 * MB, f"the gateway grew by {grown / MB:.1f} MB"

    # and a stop string still stops, in the middle of a long partial match
    cut = {**at_caps, "messages": reply("x" * 500 + "a" * 2000 + "Z tail"), "n": 2}
    r = gw.request("POST", "/v1/chat/completions", cut, timeout_s=60)
    assert r.status == 200, r.body[:300]
    for c in r.json()["choices"]:
        assert c["message"]["content"] == "x" * 500 + "a" * 977
        assert c["finish_reason"] == "stop"
