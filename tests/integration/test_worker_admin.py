"""The Rust gateway's worker API over real processes: `runtime_type` on worker records, PATCH and
PUT /workers/{id}, POST /flush_cache fanned out to HTTP and gRPC workers, /get_loads, and
/v1/tokenize / /v1/detokenize in its shapes.

One gateway for the module in front of an HTTP `smg sim` worker ("m") and a simulated vLLM gRPC
engine ("g", whose tokenizer the gateway fetches); each test puts the state it needs in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .conftest import (
    Engine,
    Gateway,
    Launcher,
    Resp,
    Sim,
    assert_openai_error,
    flat_error,
    free_port,
    wait_until,
)

SECRET = "sk-rotated-9f3c2e-never-shown"


@dataclass
class Setup:
    gw: Gateway
    sim: Sim
    engine: Engine

    def record(self, url: str) -> dict[str, Any]:
        workers = self.gw.request("GET", "/workers").json()["workers"]
        return next(w for w in workers if w["url"] == url)

    def worker_id(self, url: str) -> str:
        return str(self.record(url)["id"])


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    started = module_launch.start_engine("g", "vllm")
    sim = module_launch.sim("m")
    engine = module_launch.wait_engine(started)
    gw = module_launch.gateway([sim, engine])
    yield Setup(gw, sim, engine)


def accepted(resp: Resp, wid: str) -> None:
    assert resp.status == 202, (resp.status, resp.body)
    assert resp.json() == {
        "status": "accepted",
        "worker_id": wid,
        "message": "Worker update queued for background processing",
    }


# --- runtime_type --------------------------------------------------------------------------------


def test_runtime_type_detected_and_given(setup: Setup) -> None:
    gw = setup.gw
    assert setup.record(setup.engine.url)["runtime_type"] == "vllm"  # found by the probe
    assert setup.record(setup.sim.url)["runtime_type"] == "sglang"  # the Rust gateway's fallback

    dead = f"http://127.0.0.1:{free_port()}"
    r = gw.request("POST", "/workers", {"url": dead, "runtime": "TensorRT-LLM", "model_id": "x"})
    assert r.status == 202, r.body
    location = r.json()["location"]
    try:
        assert gw.request("GET", location).json()["runtime_type"] == "trtllm"
    finally:
        assert gw.request("DELETE", location).status == 202

    bad = gw.request("POST", "/workers", {"url": dead, "runtime_type": "tgi"})
    flat_error(bad, 400, "BAD_REQUEST")
    assert "runtime_type" in bad.json()["error"]


def test_list_filters_by_model(setup: Setup) -> None:
    only_g = setup.gw.request("GET", "/workers?model=g").json()
    assert [w["url"] for w in only_g["workers"]] == [setup.engine.url]
    assert only_g["total"] == 1 and only_g["stats"]["regular_count"] == 1
    none = setup.gw.request("GET", "/workers?model=nope").json()
    assert (none["workers"], none["total"], none["stats"]["regular_count"]) == ([], 0, 0)


# --- PATCH / PUT /workers/{id} -------------------------------------------------------------------


def test_patch_changes_only_what_it_names_and_never_shows_the_key(setup: Setup) -> None:
    gw, url = setup.gw, setup.sim.url
    wid = setup.worker_id(url)
    path = f"/workers/{wid}"
    body = {"priority": 7, "cost": 2.5, "labels": {"tier": "gold"}, "api_key": SECRET}
    r = gw.request("PATCH", path, body)
    accepted(r, wid)
    assert SECRET not in r.body.decode()

    w = gw.request("GET", path).json()
    assert (w["priority"], w["cost"], w["labels"]) == (7, 2.5, {"tier": "gold"})
    assert w["status"] == "ready" and w["model_id"] == "m"

    accepted(gw.request("PATCH", path, {"priority": 9}), wid)
    w = gw.request("GET", path).json()
    assert (w["priority"], w["cost"], w["labels"]) == (9, 2.5, {"tier": "gold"})

    # The rotated key is what the gateway now sends the worker (here: on /flush_cache) ...
    assert gw.request("POST", "/flush_cache", {}).status == 200
    assert setup.sim.stats()["flush_authorization"] == f"Bearer {SECRET}"
    # ... and it shows nowhere: not in the records, not in the gateway's log.
    assert SECRET not in gw.request("GET", "/workers").body.decode()
    assert SECRET not in gw.request("GET", path).body.decode()
    assert SECRET not in gw.proc.log_path.read_text(errors="replace")

    # Still serving with the new registration.
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert gw.request("POST", "/v1/chat/completions", chat).status == 200


@pytest.mark.parametrize(
    "body",
    [
        b'{"priority": ',
        b"[]",
        {"priority": -1},
        {"priority": "high"},
        {"priority": 1.5},
        {"cost": "cheap"},
        {"cost": -1},
        {"labels": {"a": 1}},
        {"labels": ["a"]},
        {"api_key": ""},
        {"api_key": 5},
    ],
    ids=[
        "invalid-json", "not-object", "negative-priority", "string-priority", "float-priority",
        "string-cost", "negative-cost", "label-not-string", "labels-not-object", "empty-key",
        "key-not-string",
    ],
)  # fmt: skip
def test_patch_rejects_bad_bodies(setup: Setup, body: object) -> None:
    wid = setup.worker_id(setup.engine.url)
    before = setup.record(setup.engine.url)
    flat_error(setup.gw.request("PATCH", f"/workers/{wid}", body), 400, "BAD_REQUEST")
    assert setup.record(setup.engine.url) == before


def test_patch_and_put_unknown_or_malformed_ids(setup: Setup) -> None:
    gw, unknown = setup.gw, "/workers/00000000-0000-4000-8000-000000000000"
    flat_error(gw.request("PATCH", unknown, {"priority": 1}), 404, "WORKER_NOT_FOUND")
    flat_error(gw.request("PUT", unknown, {"url": setup.sim.url}), 404, "WORKER_NOT_FOUND")
    flat_error(gw.request("PATCH", "/workers/nope", {"priority": 1}), 400, "BAD_REQUEST")
    flat_error(gw.request("PUT", "/workers/nope", {"url": setup.sim.url}), 400, "BAD_REQUEST")


def test_put_replaces_the_registration(setup: Setup) -> None:
    gw, url = setup.gw, setup.engine.url
    wid = setup.worker_id(url)
    path = f"/workers/{wid}"
    accepted(gw.request("PATCH", path, {"priority": 3, "cost": 4.0, "labels": {"x": "y"}}), wid)

    # The URL is the worker's identity: a different one is refused (DELETE + POST instead).
    other = gw.request("PUT", path, {"url": f"grpc://127.0.0.1:{free_port()}"})
    flat_error(other, 400, "BAD_REQUEST")
    assert "URL mismatch" in other.json()["error"]
    flat_error(gw.request("PUT", path, {"priority": 1}), 400, "BAD_REQUEST")  # no url
    flat_error(gw.request("PUT", path, {"url": url, "worker_type": "x"}), 400, "BAD_REQUEST")
    assert setup.record(url)["priority"] == 3

    # What the body leaves out goes back to its default.
    accepted(gw.request("PUT", path, {"url": url + "/", "labels": {"zone": "a"}}), wid)
    w = gw.request("GET", path).json()
    assert (w["priority"], w["cost"], w["labels"]) == (50, 1.0, {"zone": "a"})
    assert (w["model_id"], w["runtime_type"], w["status"]) == ("g", "vllm", "ready")


# --- /flush_cache, /get_loads --------------------------------------------------------------------


def test_flush_cache_fans_out_to_http_and_grpc_workers(setup: Setup) -> None:
    gw = setup.gw
    before = setup.sim.stats()["cache_flushes"]
    r = gw.request("POST", "/flush_cache", {})
    assert r.status == 200, r.body
    assert r.json() == {
        "status": "success",
        "message": "Successfully flushed cache on all 2 workers",
        "workers_flushed": 2,
        "total_http_workers": 1,
        "total_grpc_workers": 1,
        "total_zmq_workers_skipped": 0,
        "total_workers": 2,
    }
    assert setup.sim.stats()["cache_flushes"] == before + 1

    # A worker that cannot flush (nothing listens there): 206, each worker's outcome named.
    dead = f"http://127.0.0.1:{free_port()}"
    add = gw.request("POST", "/workers", {"url": dead, "model_id": "m"})
    assert add.status == 202, add.body
    try:
        r = gw.request("POST", "/flush_cache", {})
        assert r.status == 206, r.body
        body = r.json()
        assert body["status"] == "partial_success"
        assert body["message"] == "Cache flush: 2 succeeded, 1 failed"
        assert (body["workers_flushed"], body["total_workers"]) == (2, 3)
        assert sorted(body["successful"]) == sorted([setup.sim.url, setup.engine.url])
        [failed] = body["failed"]
        assert failed["worker"] == dead and failed["error"]
    finally:
        assert gw.request("DELETE", add.json()["location"]).status == 202


def test_get_loads_shape(setup: Setup) -> None:
    r = setup.gw.request("GET", "/get_loads")
    assert r.status == 200
    workers = r.json()["workers"]
    assert set(r.json()) == {"workers"}
    assert sorted(w["worker"] for w in workers) == sorted([setup.sim.url, setup.engine.url])
    assert all(set(w) == {"worker", "load"} and w["load"] >= 0 for w in workers)


# --- /v1/tokenize, /v1/detokenize ----------------------------------------------------------------


def test_tokenize_and_detokenize_shapes(setup: Setup) -> None:
    gw, text = setup.gw, "héllo 世界"
    r = gw.request("POST", "/v1/tokenize", {"model": "g", "prompt": text})
    assert r.status == 200, r.body
    one = r.json()
    assert set(one) == {"tokens", "count", "char_count"}
    assert one["count"] == len(one["tokens"]) >= 3
    assert one["char_count"] == 8  # characters, not bytes

    batch = gw.request("POST", "/v1/tokenize", {"model": "g", "prompt": [text, "ab"]}).json()
    assert batch["tokens"][0] == one["tokens"]
    assert batch["count"] == [len(t) for t in batch["tokens"]]
    assert batch["char_count"] == [8, 2]

    r = gw.request("POST", "/v1/detokenize", {"model": "g", "tokens": one["tokens"]})
    assert r.status == 200, r.body
    assert r.json() == {"text": text}
    r = gw.request("POST", "/v1/detokenize", {"model": "g", "tokens": batch["tokens"]})
    assert r.json() == {"text": [text, "ab"]}


@pytest.mark.parametrize(
    ("path", "body", "code", "param"),
    [
        ("/v1/tokenize", {"model": "g"}, "missing_required_parameter", "prompt"),
        ("/v1/tokenize", {"model": "g", "prompt": 5}, "invalid_type", "prompt"),
        ("/v1/tokenize", {"model": "g", "prompt": ["a", 1]}, "invalid_type", "prompt"),
        ("/v1/detokenize", {"model": "g", "tokens": [[1], [-1]]}, "invalid_type", "tokens"),
        ("/v1/detokenize", {"model": "g", "tokens": "abc"}, "invalid_type", "tokens"),
        ("/v1/detokenize", {"model": "g", "tokens": [[1], 2]}, "invalid_type", "tokens"),
    ],
    ids=["no-prompt", "prompt-int", "prompt-mixed", "negative-id", "tokens-str", "tokens-mixed"],
)
def test_tokenize_bad_input_is_400(
    setup: Setup, path: str, body: dict[str, Any], code: str, param: str
) -> None:
    assert_openai_error(setup.gw.request("POST", path, body), 400, code, param)


def test_flush_cache_reports_an_engine_that_refuses(launch: Launcher) -> None:
    """A gRPC engine with a request running refuses FlushCache: 206, its own message named."""
    engine = launch.engine("busy", decode_ms_per_token=50)
    gw = launch.gateway([engine])
    with gw.client() as client:
        msgs = [{"role": "user", "content": "a long answer"}]
        stream = client.chat.completions.create(
            model="busy", messages=msgs, max_tokens=200, stream=True
        )
        it = iter(stream)
        next(it)  # the engine is decoding now
        assert engine.stats()["in_flight"] == 1
        r = gw.request("POST", "/flush_cache", {})
        stream.close()
    assert r.status == 206, r.body
    body = r.json()
    assert (body["status"], body["workers_flushed"], body["total_grpc_workers"]) == (
        "partial_success", 0, 1,
    )  # fmt: skip
    assert body["failed"] == [
        {"worker": engine.url, "error": "requests in flight; cache not flushed"}
    ]
    wait_until(lambda: gw.request("POST", "/flush_cache", {}).status == 200, 10.0, "a flush")
