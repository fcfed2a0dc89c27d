"""Rerank's answer rebuilt from a worker's (SGLang's and vLLM's shapes), and the sim's scoring."""

from __future__ import annotations

from typing import Any

import pytest

from smg.errors import ApiError
from smg.pipeline.scoring import check_classify, check_rerank, rerank_body
from smg.sim.scoring import classify_body, rerank_results

SGLANG = [{"score": 0.9, "document": "b", "index": 1}, {"score": 0.2, "document": "a", "index": 0}]
VLLM = {
    "id": "x",
    "results": [
        {"index": 1, "relevance_score": 0.9, "document": {"text": "b"}},
        {"index": 0, "relevance_score": 0.2, "document": {"text": "a"}},
    ],
}


@pytest.mark.parametrize("worker", [SGLANG, VLLM])
def test_rerank_body_from_either_runtime(worker: Any) -> None:
    out = rerank_body(worker, {"top_k": 1}, "m", 7)
    assert out == {
        "results": [{"score": 0.9, "document": "b", "index": 1}],
        "model": "m",
        "usage": None,
        "object": "rerank",
        "id": None,
        "created": 7,
    }
    bare = rerank_body(worker, {"return_documents": False, "rid": "r"}, "m", 7)
    assert bare["results"] == [{"score": 0.9, "index": 1}, {"score": 0.2, "index": 0}]
    assert bare["id"] == "r"


@pytest.mark.parametrize(
    "worker", [{"error": "x"}, [{"score": "high", "index": 0}], [{"score": 1.0}], ["x"], None]
)
def test_not_a_rerank_answer(worker: Any) -> None:
    with pytest.raises(ApiError) as err:
        rerank_body(worker, {}, "m", 0)
    assert (err.value.status, err.value.code) == (500, "rerank_response_build_failed")


@pytest.mark.parametrize(
    "body",
    [
        {"documents": ["a"]},
        {"query": 1, "documents": ["a"]},
        {"query": "q"},
        {"query": "q", "documents": "a"},
        {"query": "q", "documents": ["a"], "top_k": True},
        {"query": "q", "documents": ["a"], "return_documents": "no"},
    ],
)
def test_rerank_checks(body: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as err:
        check_rerank(body)
    assert err.value.status == 400


def test_classify_checks() -> None:
    check_classify({"input": "x"})
    check_classify({"input": ["x", "y"]})
    for bad in ({}, {"input": []}, {"input": [1]}, {"input": {"a": 1}}):
        with pytest.raises(ApiError):
            check_classify(bad)


def test_sim_scoring_is_deterministic_and_sorted() -> None:
    body = {"query": "q", "documents": ["a", "b", "c", "q"]}
    first = rerank_results(3, body)
    assert first == rerank_results(3, body)
    assert [r["score"] for r in first] == sorted((r["score"] for r in first), reverse=True)
    assert first[0]["index"] == 3  # the query itself scores 1.0
    assert first[0]["score"] == pytest.approx(1.0)
    out = classify_body(3, {"input": ["a", "b"]}, "m", "id", 5)
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert all(sum(d["probs"]) == pytest.approx(1.0) for d in out["data"])
