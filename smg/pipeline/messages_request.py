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
marks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from smg import errors
from smg.errors import ApiError
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
_BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "tool_use": {"type", "id", "name", "input", "cache_control", "caller"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
}
_TOOL_KEYS = {"type", "name", "description", "input_schema", "cache_control", "strict"}
_UNSUPPORTED_BLOCKS = {"image", "document", "redacted_thinking", "search_result"}


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


def unsupported(param: str, what: str) -> ApiError:
    return errors.invalid_request(f"{what} is not supported by this gateway yet", param=param)


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
    messages = [*_system(body.get("system")), *_turns(body.get("messages"))]
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


# --- messages ------------------------------------------------------------------------------------
def _system(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"role": "system", "content": raw}] if raw else []
    if not isinstance(raw, list):
        raise errors.invalid_type(
            "'system' must be a string or an array of text blocks", param="system"
        )
    texts = []
    for i, block in enumerate(raw):
        where = f"system.{i}"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise errors.invalid_type(f"{where} must be a text block", param=where)
        _keys(block, _BLOCK_KEYS["text"], where)
        texts.append(_str(block, "text", where))
    return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []


def _turns(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        raise errors.missing_field("messages")
    if not isinstance(raw, list):
        raise errors.invalid_type("'messages' must be an array", param="messages")
    if not raw:
        raise errors.empty_array("messages", "message")
    last = raw[-1]
    if isinstance(last, dict) and last.get("role") == "assistant":
        # the model would continue that turn; the chat template closes it and starts a new one
        raise unsupported(f"messages.{len(raw) - 1}", "A final assistant turn (prefill)")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(raw):
        where = f"messages.{i}"
        if not isinstance(msg, dict):
            raise errors.invalid_type(f"{where} must be an object", param=where)
        _keys(msg, {"role", "content"}, where)
        role = msg.get("role")
        if role not in ("user", "assistant"):
            raise errors.invalid_value(
                f"{where}.role must be 'user' or 'assistant'", param=f"{where}.role"
            )
        content = msg.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise errors.invalid_type(
                f"{where}.content must be a string or an array of blocks", param=f"{where}.content"
            )
        blocks = [_block(b, f"{where}.content.{j}", role) for j, b in enumerate(content)]
        out += _user(blocks) if role == "user" else [_assistant(blocks)]
    return out


def _block(raw: Any, where: str, role: str) -> dict[str, Any]:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind in _UNSUPPORTED_BLOCKS:
        raise unsupported(where, f"A '{kind}' content block")
    allowed = _BLOCK_KEYS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        raise errors.invalid_value(f"{where}: unknown content block type {kind!r}", param=where)
    assert isinstance(raw, dict)
    _keys(raw, allowed, where)
    if role == "user" and kind in ("tool_use", "thinking"):
        raise errors.invalid_value(f"{where}: a user turn cannot hold '{kind}'", param=where)
    if role == "assistant" and kind == "tool_result":
        raise errors.invalid_value(f"{where}: an assistant turn cannot hold '{kind}'", param=where)
    if kind == "text":
        return {"type": kind, "text": _str(raw, "text", where)}
    if kind == "thinking":
        return {"type": kind, "thinking": _str(raw, "thinking", where)}
    if kind == "tool_use":
        caller = raw.get("caller")
        if caller is not None and caller != {"type": "direct"}:
            raise unsupported(f"{where}.caller", "A tool call made by a server tool")
        tool_input = raw.get("input")
        if not isinstance(tool_input, dict):
            raise errors.invalid_type(f"{where}.input must be an object", param=f"{where}.input")
        return {
            "type": kind,
            "id": _str(raw, "id", where),
            "name": _str(raw, "name", where),
            "input": tool_input,
        }
    said = raw.get("content")
    text = said if isinstance(said, str) else _texts(said or [], f"{where}.content")
    return {"type": kind, "id": _str(raw, "tool_use_id", where), "text": text}


def _texts(raw: Any, where: str) -> str:
    """A tool result's content blocks as one text (text blocks only)."""
    if not isinstance(raw, list):
        raise errors.invalid_type(f"{where} must be a string or an array of blocks", param=where)
    texts = []
    for j, block in enumerate(raw):
        at = f"{where}.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind != "text":
            raise unsupported(at, f"A '{kind}' block in a tool result")
        assert isinstance(block, dict)
        _keys(block, _BLOCK_KEYS["text"], at)
        texts.append(_str(block, "text", at))
    return "".join(texts)


def _user(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user turn: its tool results as `tool` messages, its text as a user message, in order."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in blocks:
        if block["type"] == "tool_result":
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
                texts = []
            out.append({"role": "tool", "tool_call_id": block["id"], "content": block["text"]})
        else:
            texts.append(block["text"])
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    thinking = [b["thinking"] for b in blocks if b["type"] == "thinking"]
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": orjson.dumps(b["input"]).decode()},
        }
        for b in blocks
        if b["type"] == "tool_use"
    ]
    if calls:
        msg["tool_calls"] = calls
    return msg


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
        _keys(tool, _TOOL_KEYS, where)
        fn: dict[str, Any] = {"name": _str(tool, "name", where)}
        if tool.get("description") is not None:
            fn["description"] = _str(tool, "description", where)
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
    _keys(raw, {"type", "name", "disable_parallel_tool_use"}, "tool_choice")
    parallel = not _flag(raw.get("disable_parallel_tool_use"), "tool_choice")
    if kind == "none":
        return "none", parallel
    if not tools:
        raise errors.invalid_value(f"tool_choice '{kind}' needs tools", param="tool_choice")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    name = _str(raw, "name", "tool_choice")
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
        _keys(raw, {"type"}, "thinking")
        return False, None
    if kind != "enabled":
        raise errors.invalid_value(
            "thinking.type must be 'enabled' or 'disabled'", param="thinking.type"
        )
    assert isinstance(raw, dict)
    _keys(raw, {"type", "budget_tokens", "display"}, "thinking")
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
    _keys(raw, {"user_id"}, "metadata")
    user = raw.get("user_id")
    if user is not None and (not isinstance(user, str) or len(user) > 256):
        raise errors.invalid_type(
            "metadata.user_id must be a string of at most 256 characters", param="metadata.user_id"
        )
    return dict(raw)


def _keys(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    """Only `allowed` names (a null value says nothing: an SDK's block echoed back has them)."""
    for name, value in obj.items():
        if name not in allowed and value is not None:
            raise errors.invalid_request(
                f"{where}.{name}: Extra inputs are not permitted",
                param=f"{where}.{name}",
                code="unknown_parameter",
            )


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


def _str(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise errors.invalid_type(f"{where}.{name} must be a string", param=f"{where}.{name}")
    return value
