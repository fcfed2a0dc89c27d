"""Planning a simulated answer: validate a chat/completions body and fix what to generate.

Pure: no IO, no clock; the worker's handlers call `plan_request` and then only write bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from smg.errors import invalid_request, missing_field
from smg.sim.text import TextGen, estimate_tokens, fingerprint

CONTEXT_LENGTH = 32768  # max_tokens above this is refused, as vLLM does past max_model_len
MAX_N = 128


@dataclass(slots=True)
class Plan:
    """A validated generation request."""

    chat: bool
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int
    finish: str  # "length" when the request set a limit (always reached), else "stop"
    prompt_tokens: int
    offsets: list[int]  # one per choice; the choice index is the position


def int_field(body: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not int or not lo <= value <= hi:
        raise invalid_request(f"'{name}' must be an integer in [{lo}, {hi}]", param=name)
    return value


def _message_texts(messages: list[Any]) -> Iterator[str]:
    for msg in messages:
        if not isinstance(msg, dict):
            raise invalid_request("Each message must be an object", param="messages")
        role = msg.get("role")
        yield role if isinstance(role, str) else ""
        content = msg.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]


def prompt_keys(prompt: Any) -> list[tuple[int, int]]:
    """(fingerprint, prompt tokens) per prompt of a completions request."""
    if isinstance(prompt, str):
        prompt = [prompt]
    elif isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise invalid_request("'prompt' must be a string, strings, or token ids", param="prompt")
    keys = []
    for item in prompt:
        if isinstance(item, str):
            crc, chars = fingerprint((item,))
            keys.append((crc, estimate_tokens(chars)))
        elif isinstance(item, list) and item and all(type(t) is int for t in item):
            keys.append((fingerprint((",".join(map(str, item)),))[0], len(item)))
        else:
            raise invalid_request(
                "'prompt' items must be strings or token-id lists", param="prompt"
            )
    return keys


def plan_request(
    body: dict[str, Any], *, chat: bool, default_tokens: int, default_model: str, gen: TextGen
) -> Plan:
    """Validate a chat or completions body (raises `ApiError` 400) and fix its answer."""
    if chat:
        messages = body.get("messages")
        if messages is None:
            raise missing_field("messages")
        if not isinstance(messages, list) or not messages:
            raise invalid_request("'messages' must be a non-empty list", param="messages")
        crc, chars = fingerprint(_message_texts(messages))
        keys = [(crc, estimate_tokens(chars))]
    else:
        if body.get("prompt") is None:
            raise missing_field("prompt")
        keys = prompt_keys(body["prompt"])
    n = int_field(body, "n", 1, 1, MAX_N)
    newer = body.get("max_completion_tokens")  # chat's newer name wins, as in OpenAI's API
    limit_name = "max_tokens" if newer is None else "max_completion_tokens"
    limit = int_field(body, limit_name, -1, 0, CONTEXT_LENGTH)
    seed = body.get("seed")
    if seed is not None and type(seed) is not int:
        raise invalid_request("'seed' must be an integer", param="seed")
    stream = body.get("stream") or False
    if type(stream) is not bool:
        raise invalid_request("'stream' must be a boolean", param="stream")
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    model = body.get("model")
    return Plan(
        chat=chat,
        model=model if isinstance(model, str) and model else default_model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=default_tokens if limit < 0 else limit,
        finish="stop" if limit < 0 else "length",
        prompt_tokens=sum(tokens for _, tokens in keys),
        offsets=[gen.offset(crc, seed, j) for crc, _ in keys for j in range(n)],
    )
