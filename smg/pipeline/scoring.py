"""Rerank and classify, the Rust gateway's shapes. Pure.

Both go to HTTP workers that serve them (`/v1/rerank`, `/v1/classify`), the client's body passed
through. Classify's answer is relayed as the worker gives it (vLLM's shape); rerank's is rebuilt
by the gateway, as the Rust gateway does: the worker's results (SGLang's bare list of
`{score, document, index}`, or vLLM's `{results: [{index, relevance_score, document: {text}}]}`)
become `{results, model, usage, object: "rerank", id, created}`, cut to `top_k` and without the
documents when `return_documents` is false.
"""

from __future__ import annotations

from typing import Any

from smg import errors


def check_rerank(body: dict[str, Any]) -> None:
    """`query` (a non-blank string), `documents` (a non-empty array of strings), `top_k` (an
    integer >= 1) and `return_documents` (a boolean), as the Rust gateway validates them."""
    query = body.get("query")
    if query is None:
        raise errors.missing_field("query")
    if not isinstance(query, str):
        raise errors.invalid_type("'query' must be a string", param="query")
    if not query.strip():
        raise errors.invalid_value("'query' cannot be empty", param="query")
    docs = body.get("documents")
    if docs is None:
        raise errors.missing_field("documents")
    if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
        raise errors.invalid_type("'documents' must be an array of strings", param="documents")
    if not docs:
        raise errors.empty_array("documents", "document")
    top_k = body.get("top_k")
    if top_k is not None and (type(top_k) is not int or top_k < 1):
        raise errors.invalid_value("'top_k' must be an integer >= 1", param="top_k")
    ret = body.get("return_documents")
    if ret is not None and not isinstance(ret, bool):
        raise errors.invalid_type("'return_documents' must be a boolean", param="return_documents")


def check_classify(body: dict[str, Any]) -> None:
    value = body.get("input")
    if value is None:
        raise errors.missing_field("input")
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.invalid_type("'input' must be a string or an array of strings", param="input")
    if not value:
        raise errors.empty_array("input", "input")


def build_failed() -> errors.ApiError:
    return errors.ApiError(
        500,
        "rerank_response_build_failed",
        "Failed to build rerank response",
        type="internal_error",
    )


def _result(item: Any) -> dict[str, Any]:
    """One worker result in the Rust gateway's `RerankResult` shape."""
    if not isinstance(item, dict):
        raise build_failed()
    score = item.get("score", item.get("relevance_score"))
    index = item.get("index")
    if not isinstance(score, int | float) or isinstance(score, bool) or type(index) is not int:
        raise build_failed()
    out: dict[str, Any] = {"score": float(score)}
    doc = item.get("document")
    if isinstance(doc, dict):  # vLLM: {"text": ...}
        doc = doc.get("text")
    if isinstance(doc, str):
        out["document"] = doc
    out["index"] = index
    if isinstance(item.get("meta_info"), dict):
        out["meta_info"] = item["meta_info"]
    return out


def rerank_body(
    worker_answer: Any, request: dict[str, Any], model: str, created: int
) -> dict[str, Any]:
    """The client's answer from the worker's (`build_failed` if it is not a rerank answer)."""
    items = worker_answer
    if isinstance(items, dict):
        items = items.get("results")
    if not isinstance(items, list):
        raise build_failed()
    results = [_result(item) for item in items]
    top_k = request.get("top_k")
    if type(top_k) is int:
        results = results[:top_k]
    if request.get("return_documents") is False:
        for r in results:
            r.pop("document", None)
    rid = request.get("rid")
    return {
        "results": results,
        "model": model,
        "usage": None,
        "object": "rerank",
        "id": rid if isinstance(rid, str | list) else None,
        "created": created,
    }
