"""The simulated worker's `/v1/rerank` and `/v1/classify` answers. Pure: no IO, no clock.

Deterministic stand-ins built on the sim's embeddings (`text.embedding`, seeded by the worker's
seed and the text's fingerprint): a document's rerank score is the cosine of its vector with the
query's, the results sorted best first (SGLang's `serving_rerank` answers a bare list of
`{score, document, index}`); a classification is the softmax of the first two components of the
input's vector over the labels `LABEL_0` and `LABEL_1` (vLLM's `/v1/classify` shape). Token
counts are the sim's estimate (a quarter of the characters, at least one).
"""

from __future__ import annotations

import math
from typing import Any

from smg.errors import invalid_request, missing_field
from smg.sim.text import EMBED_DIMS, embedding, estimate_tokens, fingerprint

LABELS = ("LABEL_0", "LABEL_1")


def _vector(seed: int, text: str) -> list[float]:
    return embedding(seed, fingerprint((text,))[0], EMBED_DIMS)


def rerank_results(seed: int, body: dict[str, Any]) -> list[dict[str, Any]]:
    query, documents = body.get("query"), body.get("documents")
    if not isinstance(query, str):
        raise missing_field("query")
    if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
        raise invalid_request("'documents' must be an array of strings", param="documents")
    q = _vector(seed, query)
    results = [
        {
            "score": sum(a * b for a, b in zip(q, _vector(seed, doc), strict=True)),
            "document": doc,
            "index": index,
        }
        for index, doc in enumerate(documents)
    ]
    results.sort(key=lambda r: (-r["score"], r["index"]))
    return results


def classify_body(
    seed: int, body: dict[str, Any], model: str, response_id: str, created: int
) -> dict[str, Any]:
    value = body.get("input")
    if value is None:
        raise missing_field("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise invalid_request("'input' must be a string or an array of strings", param="input")
    data = []
    for index, text in enumerate(texts):
        vec = _vector(seed, text)
        top = max(vec[0], vec[1])
        exps = [math.exp(v - top) for v in vec[:2]]
        probs = [e / sum(exps) for e in exps]
        label = LABELS[probs.index(max(probs))]
        data.append({"index": index, "label": label, "probs": probs, "num_classes": len(probs)})
    tokens = sum(estimate_tokens(len(t)) for t in texts)
    return {
        "id": response_id,
        "object": "list",
        "created": created,
        "model": body.get("model") if isinstance(body.get("model"), str) else model,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }
