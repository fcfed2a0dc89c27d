"""SGLang's native `/generate` for the simulated HTTP worker: the body read as a completion (text
or token ids, `sampling_params.max_new_tokens`, PD bootstrap fields at the top level, as SGLang
takes them) and the answer in SGLang's shape: `{"text", "meta_info"}`, streamed as SSE events
whose `text` is cumulative (what SGLang sends), ending with `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from smg.errors import invalid_request
from smg.sim.http_wire import DONE
from smg.sim.plan import Plan
from smg.sim.text import TextGen

_BOOTSTRAP = ("bootstrap_host", "bootstrap_port", "bootstrap_room")


def completion_body(body: dict[str, Any]) -> dict[str, Any]:
    """The completions-shaped body a `/generate` body stands for (validated: 400 on bad input)."""
    ids, text = body.get("input_ids"), body.get("text")
    prompt = ids if ids is not None else text
    if prompt is None:
        raise invalid_request("/generate needs 'text' or 'input_ids'", param="text")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise invalid_request("'sampling_params' must be an object", param="sampling_params")
    out: dict[str, Any] = {"prompt": prompt, "stream": body.get("stream") or False}
    if params.get("max_new_tokens") is not None:
        out["max_tokens"] = params["max_new_tokens"]
    out |= {k: body[k] for k in _BOOTSTRAP if k in body}
    return out


def meta_info(rid: str, plan: Plan, completion_tokens: int, finished: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": rid,
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion_tokens,
        "finish_reason": {"type": plan.finish} if finished else None,
    }
    return meta


def answer(rid: str, plan: Plan, gen: TextGen) -> bytes:
    text = gen.text(plan.offsets[0], plan.max_tokens)
    return orjson.dumps({"text": text, "meta_info": meta_info(rid, plan, plan.max_tokens, True)})


def frames(rid: str, plan: Plan, gen: TextGen) -> Iterator[bytes]:
    """The SSE frames of a streamed answer: one per token, each with the text so far, then DONE."""
    words: list[str] = []
    total = plan.max_tokens
    for done in range(total):
        words.extend(gen.words(plan.offsets[0], done, 1))
        meta = meta_info(rid, plan, done + 1, done + 1 == total)
        yield b"data: %s\n\n" % orjson.dumps({"text": "".join(words), "meta_info": meta})
    yield DONE
