"""What the Gemini stand-in answers (pure; no IO): a `GenerateContentRequest` in, the documented
response shapes out (whole, or as the frames of `:streamGenerateContent?alt=sse`), and the
Google API errors (`{"error": {"code", "message", "status", "details"}}`).

The reply is scripted as in the other sims (smg.sim.chat_script): the last user turn's text after
`SIM_REPLY:` (unless function responses came after it), else the first `--script` rule whose
`when` occurs in any text, else a fixed sentence. `<think>...</think>` becomes thought parts (only
when the request asks `thinkingConfig.includeThoughts`, as Gemini does), and with `tools` each
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` a `functionCall` part. Prompts can ask
for failures: `SIM_STATUS: 429` (also 400, 401, 403, 404, 500, 503) in the last user text is
answered with that error, a 429 with the QuotaFailure and RetryInfo details Gemini sends;
a model turn sent back whose first function call lacks its `thoughtSignature` is a 400;
`SIM_BREAK` cuts a stream off after its first frame (no finishReason).
Token counts are words (whitespace-separated), enough for usage to add up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from smg.sim import chat_script
from smg.sim.script import Script

DEFAULT_REPLY = "This is the Gemini stand-in answering."
STATUS = re.compile(r"SIM_STATUS:\s*(\d{3})")
BREAK = "SIM_BREAK"
WORDS_PER_FRAME = 3
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
RETRY_DELAY = "7s"
# each function call part carries a thought signature; a model turn sent back must carry it on
# its first call (or Google's documented skip value), as Gemini 3 insists
SIGNATURE = "c2ltLXRob3VnaHQtc2lnbmF0dXJl"
SIGNATURES = frozenset({SIGNATURE, "skip_thought_signature_validator"})
MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly. Additional data, function call `{}`. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
CALL_TOKENS = 8  # what a function call counts as output


def error(code: int, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "code": code,
        "message": message,
        "status": GOOGLE_STATUS.get(code, "UNKNOWN"),
    }
    if details:
        body["details"] = details
    return {"error": body}


def scripted_error(code: int) -> dict[str, Any]:
    """The error a `SIM_STATUS: <code>` prompt gets, in the shape Gemini sends it."""
    if code == 429:
        return error(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [
                        {
                            "quotaMetric": "generativelanguage.googleapis.com/"
                            "generate_content_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                        }
                    ],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": RETRY_DELAY},
            ],
        )
    messages = {
        500: "An internal error has occurred. Please retry or report in "
        "https://developers.generativeai.google/guide/troubleshooting",
        503: "The model is overloaded. Please try again later.",
    }
    return error(code, messages.get(code, f"Simulated error {code}."))


def bad_key() -> dict[str, Any]:
    return error(
        400,
        "API key not valid. Please pass a valid API key.",
        [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
        ],
    )


def no_key() -> dict[str, Any]:
    return error(
        403,
        "Method doesn't allow unregistered callers (callers without established identity). "
        "Please use API Key or other form of API consumer identity to call this API.",
    )


def unknown_model(model: str) -> dict[str, Any]:
    return error(
        404,
        f"models/{model} is not found for API version v1beta, or is not supported for "
        "generateContent. Call ListModels to see the list of available models and their "
        "supported methods.",
    )


def model_entry(model: str) -> dict[str, Any]:
    return {
        "name": f"models/{model}",
        "version": "001",
        "displayName": model,
        "description": "A stand-in for a Gemini model.",
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 8192,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "temperature": 1.0,
        "topP": 0.95,
        "topK": 40,
    }


@dataclass(frozen=True, slots=True)
class Reply:
    """What one request is answered: an error, or candidates' parts and the counts."""

    error: dict[str, Any] | None
    parts: tuple[dict[str, Any], ...] = ()
    finish: str = "STOP"
    candidates: int = 1
    prompt_tokens: int = 0
    output_tokens: int = 0
    thought_tokens: int = 0
    broken: bool = False


def plan_reply(request: Any, script: Script) -> Reply:
    """The reply to a `GenerateContentRequest` (a 400 for a malformed one)."""
    if not isinstance(request, dict) or not isinstance(request.get("contents"), list):
        return Reply(error(400, "* GenerateContentRequest.contents: contents is not specified"))
    turns = _turns(request["contents"])
    if turns is None:
        return Reply(error(400, "Invalid value at 'contents': each needs a role and parts."))
    unsigned = _unsigned_call(request["contents"])
    if unsigned is not None:
        return Reply(error(400, MISSING_SIGNATURE.format(unsigned)))
    last_user = next((text for role, text in reversed(turns) if role == "user"), "")
    status = STATUS.search(last_user)
    if status:
        return Reply(scripted_error(int(status.group(1))))
    config = request.get("generationConfig")
    config = config if isinstance(config, dict) else {}
    messages = [{"role": role, "content": text} for role, text in turns]
    text = chat_script.scripted_reply({"messages": messages}, script) or DEFAULT_REPLY
    said = chat_script.answer(text, bool(request.get("tools")), "sim")
    parts: list[dict[str, Any]] = []
    thinking = config.get("thinkingConfig")
    thoughts_on = isinstance(thinking, dict) and thinking.get("includeThoughts") is True
    if said.reasoning and thoughts_on:
        parts.append({"text": said.reasoning, "thought": True})
    content = said.content or ""
    limit = config.get("maxOutputTokens")
    finish = "STOP"
    words = content.split(" ")
    if isinstance(limit, int) and 0 < limit < len(words):
        content, finish = " ".join(words[:limit]), "MAX_TOKENS"
    if content:
        parts.append({"text": content})
    for call in said.tool_calls if finish == "STOP" else ():
        fn = call["function"]
        call = {"name": fn["name"], "args": json.loads(fn["arguments"])}
        parts.append({"functionCall": call, "thoughtSignature": SIGNATURE})
    count = config.get("candidateCount")
    prompt = " ".join(t for _, t in turns) + " " + _system_text(request)
    return Reply(
        None,
        tuple(parts),
        finish,
        count if isinstance(count, int) and 1 <= count <= 8 else 1,
        _words(prompt),
        _words(content) + CALL_TOKENS * sum("functionCall" in p for p in parts),
        _words(said.reasoning or "") if thoughts_on else 0,
        BREAK in last_user,
    )


def whole(reply: Reply, model: str, response_id: str) -> dict[str, Any]:
    candidates = [
        {
            "content": {"parts": list(reply.parts), "role": "model"},
            "finishReason": reply.finish,
            "index": k,
        }
        for k in range(reply.candidates)
    ]
    return {
        "candidates": candidates,
        "usageMetadata": _usage(reply, reply.output_tokens * reply.candidates),
        "modelVersion": model,
        "responseId": response_id,
    }


def frames(reply: Reply, model: str, response_id: str) -> Iterator[dict[str, Any]]:
    """The stream's responses: thoughts, the text a few words a frame, each function call, the
    finishReason on the last; every frame carries the usage so far (cumulative, as Gemini's)."""
    pieces: list[dict[str, Any]] = []
    for part in reply.parts:
        text = part.get("text")
        if isinstance(text, str) and part.get("thought") is not True:
            words = text.split(" ")
            for at in range(0, len(words), WORDS_PER_FRAME):
                tail = " " if at + WORDS_PER_FRAME < len(words) else ""
                pieces.append({"text": " ".join(words[at : at + WORDS_PER_FRAME]) + tail})
        else:
            pieces.append(part)
    if not pieces:
        pieces.append({"text": ""})
    sent = 0
    for k, piece in enumerate(pieces):
        last = k == len(pieces) - 1
        if piece.get("thought") is not True:
            sent = reply.output_tokens if last else sent + _words(str(piece.get("text", "")))
        candidates = []
        for index in range(reply.candidates):
            candidate: dict[str, Any] = {
                "content": {"parts": [piece], "role": "model"},
                "index": index,
            }
            if last:
                candidate["finishReason"] = reply.finish
            candidates.append(candidate)
        yield {
            "candidates": candidates,
            "usageMetadata": _usage(reply, min(sent, reply.output_tokens) * reply.candidates),
            "modelVersion": model,
            "responseId": response_id,
        }
        if reply.broken:
            return


def _usage(reply: Reply, output: int) -> dict[str, Any]:
    meta = {"promptTokenCount": reply.prompt_tokens, "candidatesTokenCount": output}
    if reply.thought_tokens:
        meta["thoughtsTokenCount"] = reply.thought_tokens
    meta["totalTokenCount"] = reply.prompt_tokens + output + reply.thought_tokens
    return meta


def _turns(contents: list[Any]) -> list[tuple[str, str]] | None:
    """(role, text) per turn: `user` text, `tool` for a turn of function responses only."""
    turns: list[tuple[str, str]] = []
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) else None
        role = content.get("role", "user") if isinstance(content, dict) else None
        if role not in ("user", "model") or not isinstance(parts, list):
            return None
        texts = _texts(parts)
        answers = [p for p in parts if isinstance(p, dict) and "functionResponse" in p]
        if role == "user" and answers and not texts:
            turns.append(("tool", str([a["functionResponse"] for a in answers])))
        else:
            turns.append(("user" if role == "user" else "assistant", "".join(texts)))
    return turns


def _unsigned_call(contents: list[Any]) -> str | None:
    """The name of a model turn's first function call when it lacks a valid signature."""
    for content in contents:
        if content.get("role") != "model":
            continue
        calls = [p for p in content["parts"] if isinstance(p, dict) and "functionCall" in p]
        if calls and calls[0].get("thoughtSignature") not in SIGNATURES:
            name = (
                calls[0]["functionCall"].get("name")
                if isinstance(calls[0]["functionCall"], dict)
                else None
            )
            return str(name)
    return None


def _system_text(request: dict[str, Any]) -> str:
    system = request.get("systemInstruction")
    parts = system.get("parts") if isinstance(system, dict) else None
    if not isinstance(parts, list):
        return ""
    return " ".join(_texts(parts))


def _texts(parts: list[Any]) -> list[str]:
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _words(text: str) -> int:
    return len(text.split())
