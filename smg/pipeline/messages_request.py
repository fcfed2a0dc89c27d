"""Anthropic's `POST /v1/messages` body, checked and mapped to the chat body the flow runs
(pure; no IO).

`parse_messages` checks the body field by field (an unknown field, or one smg does not do,
is a 400 naming it: never silently dropped) into a `MessagesRequest`; `chat_body` is the chat
completions body the flow's token mode prepares (chat template, reasoning and tool parsers) and
an HTTP worker gets as it is:

    system (a string or text blocks)     → a first `system` message
    user text blocks                     → a `user` message
    user `tool_result` blocks            → `tool` messages (`tool_call_id` = `tool_use_id`)
    assistant `text` / `thinking`        → an assistant message's `content` / `reasoning_content`
    assistant `tool_use` blocks          → its `tool_calls` (`arguments`: the input as JSON)
    tools (`name`, `description`, `input_schema`) → function tools (`parameters`)
    tool_choice auto / any / tool / none → auto / required / a named function / none
    thinking enabled / disabled / absent → chat_template_kwargs `enable_thinking` true / false
    stop_sequences, temperature, top_p, top_k, max_tokens → the chat body's sampling fields

`image` and `document` blocks, server tools, redacted thinking and a final assistant turn (a
prefill the model would continue) are refused (400).
`cache_control` (on the request or a block) is accepted: the gateway's prefix caching needs no
marks. `thinking.budget_tokens` is checked (at least 1024, below `max_tokens`) but not a
separate limit: the reasoning counts toward `max_tokens`, which bounds the whole answer. A
`tool_result`'s `is_error` is accepted; the model sees its content as the tool's output. The
turns and their blocks are checked and mapped in smg.pipeline.messages_blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from smg import errors
from smg.pipeline.messages_blocks import (
    chat_turns,
    check_keys,
    system_messages,
    text_field,
    unsupported,
)
from smg.pipeline.sampling import MAX_STOP, MAX_STOP_CHARS

# every field of Anthropic's MessageCreateParams smg serves
KNOWN_FIELDS = frozenset(
    {
        "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p",
        "top_k", "tools", "tool_choice", "thinking", "metadata", "stream", "cache_control",
    }
)  # fmt: skip
# `POST /v1/messages/count_tokens`: what shapes the prompt
COUNT_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking", "cache_control"}
)
# fields of Anthropic's API smg does not do yet (a 400 that says so, not "unknown")
NOT_YET = frozenset(
    {
        "service_tier", "container", "mcp_servers", "context_management", "output_format",
        "output_config", "prefill", "diagnostics", "inference_geo", "speed",
    }
)  # fmt: skip
_TOOL_KEYS = {"type", "name", "description", "input_schema", "cache_control", "strict"}


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    """A checked Messages body: the chat turns it becomes and what the answer echoes."""

    model: str
    max_tokens: int
    messages: tuple[dict[str, Any], ...]  # chat messages (system first)
    tools: tuple[dict[str, Any], ...]  # chat function tools
    tool_choice: str | dict[str, Any] | None  # the chat body's tool_choice (None: default)
    parallel_tool_calls: bool
    stop_sequences: tuple[str, ...]
    temperature: float | None
    top_p: float | None
    top_k: int | None
    thinking: bool  # thinking enabled (its blocks shown unless display is "omitted")
    budget_tokens: int | None
    metadata: dict[str, Any]
    stream: bool


def parse_messages(body: dict[str, Any], *, count: bool = False) -> MessagesRequest:
    """The typed request, or an `ApiError` (400) naming the first field at fault. `count`:
    a count_tokens body (no `max_tokens`, only the fields that shape the prompt)."""
    known = COUNT_FIELDS if count else KNOWN_FIELDS
    for name in body:
        if name in NOT_YET:
            raise unsupported(name, f"'{name}'")
        if name not in known:
            raise errors.invalid_request(
                f"{name}: Extra inputs are not permitted", param=name, code="unknown_parameter"
            )
    model = body.get("model")
    if model is None:
        raise errors.missing_field("model")
    if not isinstance(model, str) or not model:
        raise errors.invalid_type("'model' must be a non-empty string", param="model")
    max_tokens = 1
    if not count:
        if "max_tokens" not in body:
            raise errors.missing_field("max_tokens")
        max_tokens = _int(body.get("max_tokens"), "max_tokens", 1)
    tools = _tools(body.get("tools"))
    choice, parallel = _tool_choice(body.get("tool_choice"), tools)
    thinking, budget = _thinking(body.get("thinking"), None if count else max_tokens)
    messages = [*system_messages(body.get("system")), *chat_turns(body.get("messages"))]
    return MessagesRequest(
        model=model,
        max_tokens=max_tokens,
        messages=tuple(messages),
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        stop_sequences=_stops(body.get("stop_sequences")),
        temperature=_number(body, "temperature", 0.0, 1.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        top_k=None if body.get("top_k") is None else _int(body["top_k"], "top_k", 1),
        thinking=thinking,
        budget_tokens=budget,
        metadata=_metadata(body.get("metadata")),
        stream=_flag(body.get("stream"), "stream"),
    )


def chat_body(req: MessagesRequest) -> dict[str, Any]:
    """The chat completions body the flow prepares (token mode) or an HTTP worker gets."""
    body: dict[str, Any] = {
        "model": req.model,
        "messages": list(req.messages),
        "max_tokens": req.max_tokens,
        "chat_template_kwargs": {"enable_thinking": req.thinking},
    }
    if req.tools:
        body["tools"] = list(req.tools)
        if not req.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    if req.tool_choice is not None:
        body["tool_choice"] = req.tool_choice
    if req.stop_sequences:
        body["stop"] = list(req.stop_sequences)
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    user = req.metadata.get("user_id")
    if isinstance(user, str):
        body["user"] = user
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # an HTTP worker's counts (usage)
    return body


# --- tools ---------------------------------------------------------------------------------------
def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise errors.invalid_type("'tools' must be an array", param="tools")
    out = []
    for i, tool in enumerate(raw):
        where = f"tools.{i}"
        kind = tool.get("type", "custom") if isinstance(tool, dict) else None
        if kind != "custom":
            raise unsupported(where, f"A tool of type {kind!r} (server tools)")
        assert isinstance(tool, dict)
        check_keys(tool, _TOOL_KEYS, where)
        fn: dict[str, Any] = {"name": text_field(tool, "name", where)}
        if tool.get("description") is not None:
            fn["description"] = text_field(tool, "description", where)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise errors.invalid_type(
                f"{where}.input_schema must be an object", param=f"{where}.input_schema"
            )
        fn["parameters"] = schema
        if tool.get("strict") is not None:
            fn["strict"] = _flag(tool["strict"], f"{where}.strict")
        out.append({"type": "function", "function": fn})
    return tuple(out)


def _tool_choice(
    raw: Any, tools: tuple[dict[str, Any], ...]
) -> tuple[str | dict[str, Any] | None, bool]:
    """(the chat body's tool_choice, parallel tool calls)."""
    if raw is None:
        return None, True
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise errors.invalid_value(
            "tool_choice.type must be 'auto', 'any', 'tool' or 'none'", param="tool_choice"
        )
    assert isinstance(raw, dict)
    check_keys(raw, {"type", "name", "disable_parallel_tool_use"}, "tool_choice")
    parallel = not _flag(raw.get("disable_parallel_tool_use"), "tool_choice")
    if kind == "none":
        return "none", parallel
    if not tools:
        raise errors.invalid_value(f"tool_choice '{kind}' needs tools", param="tool_choice")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    name = text_field(raw, "name", "tool_choice")
    if not any(t["function"]["name"] == name for t in tools):
        raise errors.invalid_value(
            f"tool_choice names {name!r}, which is not in tools", param="tool_choice.name"
        )
    return {"type": "function", "function": {"name": name}}, parallel


# --- other fields --------------------------------------------------------------------------------
def _thinking(raw: Any, max_tokens: int | None) -> tuple[bool, int | None]:
    if raw is None:
        return False, None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "disabled":
        assert isinstance(raw, dict)
        check_keys(raw, {"type"}, "thinking")
        return False, None
    if kind != "enabled":
        raise errors.invalid_value(
            "thinking.type must be 'enabled' or 'disabled'", param="thinking.type"
        )
    assert isinstance(raw, dict)
    check_keys(raw, {"type", "budget_tokens", "display"}, "thinking")
    display = raw.get("display")
    if display not in (None, "summarized", "omitted"):
        raise errors.invalid_value(
            "thinking.display must be 'summarized' or 'omitted'", param="thinking.display"
        )
    if "budget_tokens" not in raw:
        raise errors.missing_field("thinking.budget_tokens")
    budget = _int(raw["budget_tokens"], "thinking.budget_tokens", 1024)
    if max_tokens is not None and budget >= max_tokens:
        raise errors.invalid_value(
            "`max_tokens` must be greater than `thinking.budget_tokens`",
            param="thinking.budget_tokens",
        )
    return display != "omitted", budget


def _stops(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        raise errors.invalid_type(
            "'stop_sequences' must be an array of non-empty strings", param="stop_sequences"
        )
    if len(raw) > MAX_STOP or any(len(s) > MAX_STOP_CHARS for s in raw):
        raise errors.invalid_value(
            f"'stop_sequences': at most {MAX_STOP} sequences of at most {MAX_STOP_CHARS} "
            "characters in this gateway",
            param="stop_sequences",
        )
    return tuple(raw)


def _metadata(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise errors.invalid_type("'metadata' must be an object", param="metadata")
    check_keys(raw, {"user_id"}, "metadata")
    user = raw.get("user_id")
    if user is not None and (not isinstance(user, str) or len(user) > 256):
        raise errors.invalid_type(
            "metadata.user_id must be a string of at most 256 characters", param="metadata.user_id"
        )
    return dict(raw)


def _int(value: Any, name: str, lo: int) -> int:
    if type(value) is not int:
        raise errors.invalid_type(f"'{name}' must be an integer", param=name)
    if value < lo:
        raise errors.invalid_value(f"'{name}' must be at least {lo}", param=name)
    return value


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.invalid_type(f"'{name}' must be a number", param=name)
    if not lo <= value <= hi:
        raise errors.invalid_value(f"'{name}' must be between {lo:g} and {hi:g}", param=name)
    return float(value)


def _flag(value: Any, name: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise errors.invalid_type(f"'{name}' must be a boolean", param=name)
    return value
