"""gRPC mode when things go wrong or get routed: a tokenizer bundle that fails verification,
cache-aware routing on token prefixes, and an engine killed with work in flight."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from smg.sim.tokenizer_files import qwen3_tokenizer_dir, tokenizer_zip

from .conftest import Engine, Gateway, Launcher, kill_mid_stream, wait_completed, wait_until

MSGS = [{"role": "user", "content": "Tell me a story about a gateway."}]


# --- 6. GetTokenizer with a wrong sha256 ---------------------------------------------------------


def test_tokenizer_with_wrong_sha_keeps_the_worker_out(launch: Launcher, tmp_path: Path) -> None:
    eng = launch.engine("bad-sha", corrupt_tokenizer_sha=True)
    cache = tmp_path / "bad-cache"
    gw = launch.gateway([eng], ready=0, tokenizer_cache_dir=cache)
    _, actual = tokenizer_zip(qwen3_tokenizer_dir())
    announced = actual[::-1]  # what --corrupt-tokenizer-sha sends

    def logged() -> bool:
        return "failed verification" in gw.proc.log_path.read_text(errors="replace")

    wait_until(logged, 15.0, "the gateway to log the failed tokenizer verification")
    log = gw.proc.log_path.read_text(errors="replace")
    line = next(ln for ln in log.splitlines() if "failed verification" in ln)
    assert actual in line and announced in line, line  # both fingerprints, named

    # Over several health intervals the worker stays out and the gateway stays not ready.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert gw.request("GET", "/readiness").status == 503
        [worker] = gw.workers()
        assert worker["status"] != "ready" and not worker["is_healthy"], worker
        time.sleep(0.25)

    # GetModelInfo named the model, so the gateway knows it but cannot serve it now: 503 with
    # the code HTTP mode uses when no worker is routable (not 404 model_not_found), streaming
    # or not, chat or completions.
    for path, body in (
        ("/v1/chat/completions", {"model": "bad-sha", "messages": MSGS}),
        ("/v1/chat/completions", {"model": "bad-sha", "messages": MSGS, "stream": True}),
        ("/v1/completions", {"model": "bad-sha", "prompt": "Hello"}),
    ):
        r = gw.request("POST", path, body)
        assert r.status == 503, (path, r.status, r.body)
        err = r.json()["error"]
        assert err["code"] == "no_available_workers" and err["type"] == "server_error", err
    [worker] = gw.workers()
    assert worker["model_id"] == "bad-sha", worker
    # an unknown model is still 404
    r = gw.request("POST", "/v1/chat/completions", {"model": "nope", "messages": MSGS})
    assert (r.status, r.json()["error"]["code"]) == (404, "model_not_found"), r.body
    assert eng.stats()["requests"] == 0
    leftovers = [p.name for p in cache.iterdir()] if cache.exists() else []
    assert not [n for n in leftovers if not n.startswith(".")], leftovers  # nothing installed


# --- 9. cache-aware routing on token prefixes ----------------------------------------------------


def _words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    pool = ["gateway", "engine", "token", "router", "cache", "prefix", "worker", "stream",
            "model", "policy", "health", "request", "answer", "radix", "tree", "batch"]  # fmt: skip
    return " ".join(rng.choice(pool) for _ in range(n))


def test_cache_aware_pins_a_shared_prefix_and_spreads_others(launch: Launcher) -> None:
    a, b = launch.engines("ca", "ca")
    gw = launch.gateway([a, b], policy="cache_aware")
    shared = _words(1, 300)
    with gw.client() as client:
        n_tokens = len(_tokenize(gw, "ca", shared))
        assert n_tokens >= 300, n_tokens

        def ask(system: str, user: str) -> None:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            out = client.chat.completions.create(model="ca", messages=messages, max_tokens=2)
            assert out.choices[0].message.content

        def counts() -> tuple[int, int]:
            return a.stats()["requests"], b.stats()["requests"]

        start = counts()
        for i in range(6):
            ask(shared, f"question number {i}")
        after_shared = counts()
        got = (after_shared[0] - start[0], after_shared[1] - start[1])
        assert sorted(got) == [0, 6], got  # one engine took every request with that prefix

        for i in range(8):
            ask(_words(100 + i, 300), "question")
        end = counts()
        spread = (end[0] - after_shared[0], end[1] - after_shared[1])
        assert sum(spread) == 8 and min(spread) >= 2, spread


def _tokenize(gw: Gateway, model: str, text: str) -> list[int]:
    r = gw.request("POST", "/v1/tokenize", {"model": model, "prompt": text})
    assert r.status == 200, r
    return r.json()["tokens"]


# --- 10. an engine killed mid-flight -------------------------------------------------------------


@pytest.fixture
def pair(launch: Launcher) -> Iterator[tuple[Gateway, Engine, Engine]]:
    a, b = launch.engines("kill", "kill", decode_ms_per_token=50)
    # Health checks must not hide the dead engine during the test: the retries have to.
    gw = launch.gateway([a, b], health_failure_threshold=100, retry_initial_backoff_ms=10)
    yield gw, a, b


def test_killed_engine_fails_its_stream_fast_and_retries_move_on(
    pair: tuple[Gateway, Engine, Engine],
) -> None:
    gw, a, b = pair
    with gw.client(timeout_s=10.0) as client:
        stream = client.chat.completions.create(
            model="kill",
            messages=MSGS,
            max_tokens=200,
            stream=True,
            extra_body={"ignore_eos": True},  # 10 s of tokens unless something breaks
        )
        it = iter(stream)
        next(it)
        victim, other, received, elapsed, error = kill_mid_stream(it, a, b)
        assert elapsed < 3.0, elapsed
        assert received < 150, received  # it broke off: the stream did not run to its end
        assert error.code == "engine_error", error.body

        # The dead engine is still listed as ready: each request routed to it must be retried.
        assert gw.worker_by_url(victim.url)["status"] == "ready"
        before = other.stats()["completed"]
        for i in range(6):
            out = client.chat.completions.create(
                model="kill", messages=[{"role": "user", "content": f"again {i}"}], max_tokens=2
            )
            assert out.choices[0].message.content
        wait_completed(before + 6, other)
        retried = gw.metric("smg_worker_retries_total", worker=victim.url)
        assert retried is not None and retried >= 1, retried
