"""Client mistakes over the wire: each gets its status and a stable code in the OpenAI error
shape, never a 500. Raw HTTP (urllib), so the bodies can be as broken as needed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Gateway, Launcher, assert_openai_error, wait_until

KEY = "sekret-key"
MAX_PAYLOAD = 4096
MSGS = [{"role": "user", "content": "hi"}]
CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"


@pytest.fixture(scope="module")
def gw(module_launch: Launcher) -> Iterator[Gateway]:
    sim = module_launch.sim("m")
    yield module_launch.gateway([sim], api_key=KEY, max_payload_size=MAX_PAYLOAD)


CASES: list[tuple[str, str, Any, int, str, str | None]] = [
    ("not json", CHAT, b'{"model": "m",', 400, "invalid_json", None),
    ("empty body", CHAT, b"", 400, "invalid_json", None),
    ("array body", CHAT, b"[1,2]", 400, "invalid_type", None),
    ("string body", COMPLETIONS, b'"text"', 400, "invalid_type", None),
    ("no model", CHAT, {"messages": MSGS}, 400, "missing_required_parameter", "model"),
    ("no messages", CHAT, {"model": "m"}, 400, "missing_required_parameter", "messages"),
    ("no prompt", COMPLETIONS, {"model": "m"}, 400, "missing_required_parameter", "prompt"),
    ("no input", EMBEDDINGS, {"model": "m"}, 400, "missing_required_parameter", "input"),
    ("empty messages", CHAT, {"model": "m", "messages": []}, 400, "empty_array", "messages"),
    (
        "temperature 5",
        CHAT,
        {"model": "m", "messages": MSGS, "temperature": 5},
        400,
        "decimal_above_max_value",
        "temperature",
    ),
    (
        "max_tokens -1",
        CHAT,
        {"model": "m", "messages": MSGS, "max_tokens": -1},
        400,
        "integer_below_min_value",
        "max_tokens",
    ),
    (
        "max_tokens not int",
        COMPLETIONS,
        {"model": "m", "prompt": "x", "max_tokens": "10"},
        400,
        "invalid_type",
        "max_tokens",
    ),
    ("unknown model", CHAT, {"model": "nope", "messages": MSGS}, 404, "model_not_found", None),
    (
        "unknown model (embeddings)",
        EMBEDDINGS,
        {"model": "nope", "input": "x"},
        404,
        "model_not_found",
        None,
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "param"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_request_bodies(
    gw: Gateway, path: str, body: Any, status: int, code: str, param: str | None
) -> None:
    r = gw.request("POST", path, body, headers={"Content-Type": "application/json"})
    assert_openai_error(r, status, code, param)
    assert r.header("x-request-id")


def test_valid_request_still_passes(gw: Gateway) -> None:
    r = gw.request("POST", CHAT, {"model": "m", "messages": MSGS, "max_tokens": 3})
    assert r.status == 200, r.body
    assert r.json()["choices"][0]["message"]["content"]


def test_body_over_the_payload_limit_is_413(gw: Gateway) -> None:
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * (MAX_PAYLOAD * 2)}]}
    assert_openai_error(gw.request("POST", CHAT, big), 413, "request_body_too_large")

    # Without a Content-Length (chunked): the limit is enforced while reading.
    chunks = iter([b'{"model": "m", "prompt": "', b"y" * MAX_PAYLOAD, b"y" * MAX_PAYLOAD, b'"}'])
    r = gw.request("POST", COMPLETIONS, chunks)
    assert_openai_error(r, 413, "request_body_too_large")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": KEY}, 401),  # no "Bearer " scheme
        ({"Authorization": f"Bearer {KEY}"}, 200),
    ],
    ids=["missing", "wrong", "no-scheme", "right"],
)
def test_api_key(gw: Gateway, headers: dict[str, str], status: int) -> None:
    body = {"model": "m", "messages": MSGS, "max_tokens": 2}
    r = gw.request("POST", CHAT, body, headers=headers, auth=False)
    if status == 200:
        assert r.status == 200, r.body
    else:
        assert_openai_error(r, 401, "invalid_api_key")
        assert (r.header("www-authenticate") or "").startswith("Bearer")
    emb = gw.request("POST", EMBEDDINGS, {"model": "m", "input": "x"}, headers=headers, auth=False)
    assert emb.status == status


@pytest.mark.parametrize("path", ["/health", "/liveness", "/readiness"])
def test_probes_need_no_key(gw: Gateway, path: str) -> None:
    assert gw.request("GET", path, auth=False).status == 200


def test_unknown_route_and_wrong_method(gw: Gateway) -> None:
    assert_openai_error(gw.request("GET", "/v1/nothing-here"), 404, "unknown_url")
    assert_openai_error(gw.request("POST", "/v2/chat/completions", {}), 404, "unknown_url")
    assert_openai_error(gw.request("GET", CHAT), 405, "method_not_allowed")
    assert_openai_error(gw.request("DELETE", "/v1/models"), 405, "method_not_allowed")


def test_no_healthy_worker_is_503(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim], health_failure_threshold=1, health_check_interval_secs=0.5)
    sim.set_healthy(False)
    wait_until(lambda: gw.request("GET", "/readiness").status == 503, 5.0, "readiness 503")
    r = gw.request("POST", CHAT, {"model": "m", "messages": MSGS})
    assert_openai_error(r, 503, "no_available_workers")
    assert r.header("retry-after") == "1"
    # It comes back once the worker does.
    sim.set_healthy(True)
    wait_until(lambda: gw.request("GET", "/readiness").status == 200, 5.0, "readiness 200")
    assert gw.request("POST", CHAT, {"model": "m", "messages": MSGS}).status == 200
