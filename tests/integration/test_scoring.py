"""`/rerank`, `/v1/rerank` and `/v1/classify` through the gateway to HTTP workers that serve them
(two `smg sim` workers of one model, round robin), in the Rust gateway's shapes; a model served
by a gRPC engine is refused 501 without touching the engine's breaker.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .conftest import Engine, Gateway, Launcher, Sim, assert_openai_error

DOCS = ["a gateway routes requests", "bread needs flour", "routers balance load", "cats sleep"]


@dataclass
class Fleet:
    gw: Gateway
    sims: list[Sim]
    engine: Engine


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    engine = module_launch.start_engine("gen")
    sims = module_launch.sims("ranker", "ranker")
    module_launch.wait_engine(engine)
    gw = module_launch.gateway([*sims, engine])
    yield Fleet(gw, sims, engine)


def test_rerank_shape_order_top_k_and_documents(fleet: Fleet) -> None:
    before = sum(s.stats()["completed"] for s in fleet.sims)
    body = {"model": "ranker", "query": "how does a gateway route?", "documents": DOCS}
    r = fleet.gw.request("POST", "/rerank", body)
    assert r.status == 200, r
    out = r.json()
    assert set(out) == {"results", "model", "usage", "object", "id", "created"}
    assert (out["object"], out["model"], out["usage"], out["id"]) == (
        "rerank",
        "ranker",
        None,
        None,
    )
    assert isinstance(out["created"], int)
    results = out["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(r["document"] == DOCS[r["index"]] for r in results)
    assert r.header("X-SMG-Routed-Worker-Id")

    again = fleet.gw.request(
        "POST", "/rerank", {**body, "top_k": 2, "return_documents": False, "rid": "mine"}
    ).json()
    assert again["results"] == [{"score": x["score"], "index": x["index"]} for x in results[:2]]
    assert again["id"] == "mine"

    # /v1/rerank: the same answer; both workers served (round robin)
    v1 = fleet.gw.request("POST", "/v1/rerank", body).json()
    assert v1["results"] == results
    assert sum(s.stats()["completed"] for s in fleet.sims) == before + 3
    assert all(s.stats()["completed"] > 0 for s in fleet.sims)


def test_classify_relayed(fleet: Fleet) -> None:
    r = fleet.gw.request(
        "POST", "/v1/classify", {"model": "ranker", "input": ["good gateway", "bad gateway"]}
    )
    assert r.status == 200, r
    out = r.json()
    assert out["object"] == "list" and out["model"] == "ranker"
    assert [d["index"] for d in out["data"]] == [0, 1]
    for d in out["data"]:
        assert d["num_classes"] == len(d["probs"]) == 2
        assert math.isclose(sum(d["probs"]), 1.0, rel_tol=1e-6)
        assert d["label"] in ("LABEL_0", "LABEL_1")
    assert out["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "param"),
    [
        ("/rerank", {"model": "ranker", "documents": DOCS}, 400, "missing_required_parameter",
         "query"),
        ("/rerank", {"model": "ranker", "query": "  ", "documents": DOCS}, 400, "invalid_value",
         "query"),
        ("/rerank", {"model": "ranker", "query": "q", "documents": []}, 400, "empty_array",
         "documents"),
        ("/rerank", {"model": "ranker", "query": "q", "documents": [1]}, 400, "invalid_type",
         "documents"),
        ("/rerank", {"model": "ranker", "query": "q", "documents": DOCS, "top_k": 0}, 400,
         "invalid_value", "top_k"),
        ("/v1/rerank", {"query": "q", "documents": DOCS}, 400, "missing_required_parameter",
         "model"),
        ("/v1/classify", {"model": "ranker"}, 400, "missing_required_parameter", "input"),
        ("/v1/classify", {"model": "ranker", "input": [3]}, 400, "invalid_type", "input"),
        ("/v1/classify", {"model": "nope", "input": "x"}, 404, "model_not_found", None),
        ("/v1/classify", {"model": "gen", "input": "x"}, 501, "unsupported_endpoint", None),
        ("/rerank", {"model": "gen", "query": "q", "documents": DOCS}, 501,
         "unsupported_endpoint", None),
    ],
)  # fmt: skip
def test_bad_requests(
    fleet: Fleet, path: str, body: dict, status: int, code: str, param: str | None
) -> None:
    assert_openai_error(fleet.gw.request("POST", path, body), status, code, param)


def test_engine_untouched_by_refused_scoring(fleet: Fleet) -> None:
    for _ in range(12):
        r = fleet.gw.request("POST", "/v1/classify", {"model": "gen", "input": "x"})
        assert r.status == 501
    worker = fleet.gw.worker_by_url(fleet.engine.url)
    assert worker is not None and worker["circuit_breaker"] == "closed", worker
    assert fleet.engine.stats()["requests"] == 0


def test_worker_error_is_relayed(fleet: Fleet) -> None:
    for s in fleet.sims:
        s.configure(status_override=400)
    try:
        r = fleet.gw.request(
            "POST", "/rerank", {"model": "ranker", "query": "q", "documents": DOCS}
        )
        assert_openai_error(r, 400, "sim_status_override")
    finally:
        for s in fleet.sims:
            s.configure(status_override=None)
