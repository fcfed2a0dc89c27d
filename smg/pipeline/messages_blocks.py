"""Anthropic's Messages content (system, user and assistant turns and their blocks) checked and
mapped to chat messages (pure; no IO). See smg.pipeline.messages_request for the mapping."""

from __future__ import annotations

from typing import Any

import orjson

from smg import errors
from smg.errors import ApiError

BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "tool_use": {"type", "id", "name", "input", "cache_control", "caller"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
}
UNSUPPORTED_BLOCKS = {"image", "document", "redacted_thinking", "search_result"}


def unsupported(param: str, what: str) -> ApiError:
    return errors.invalid_request(f"{what} is not supported by this gateway yet", param=param)


def system_messages(raw: Any) -> list[dict[str, Any]]:
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
        check_keys(block, BLOCK_KEYS["text"], where)
        texts.append(text_field(block, "text", where))
    return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []


def chat_turns(raw: Any) -> list[dict[str, Any]]:
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
        check_keys(msg, {"role", "content"}, where)
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
    if kind in UNSUPPORTED_BLOCKS:
        raise unsupported(where, f"A '{kind}' content block")
    allowed = BLOCK_KEYS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        raise errors.invalid_value(f"{where}: unknown content block type {kind!r}", param=where)
    assert isinstance(raw, dict)
    check_keys(raw, allowed, where)
    if role == "user" and kind in ("tool_use", "thinking"):
        raise errors.invalid_value(f"{where}: a user turn cannot hold '{kind}'", param=where)
    if role == "assistant" and kind == "tool_result":
        raise errors.invalid_value(f"{where}: an assistant turn cannot hold '{kind}'", param=where)
    if kind == "text":
        return {"type": kind, "text": text_field(raw, "text", where)}
    if kind == "thinking":
        return {"type": kind, "thinking": text_field(raw, "thinking", where)}
    if kind == "tool_use":
        caller = raw.get("caller")
        if caller is not None and caller != {"type": "direct"}:
            raise unsupported(f"{where}.caller", "A tool call made by a server tool")
        tool_input = raw.get("input")
        if not isinstance(tool_input, dict):
            raise errors.invalid_type(f"{where}.input must be an object", param=f"{where}.input")
        return {
            "type": kind,
            "id": text_field(raw, "id", where),
            "name": text_field(raw, "name", where),
            "input": tool_input,
        }
    said = raw.get("content")
    text = said if isinstance(said, str) else _texts(said or [], f"{where}.content")
    return {"type": kind, "id": text_field(raw, "tool_use_id", where), "text": text}


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
        check_keys(block, BLOCK_KEYS["text"], at)
        texts.append(text_field(block, "text", at))
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


def check_keys(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    """Only `allowed` names (a null value says nothing: an SDK's block echoed back has them)."""
    for name, value in obj.items():
        if name not in allowed and value is not None:
            raise errors.invalid_request(
                f"{where}.{name}: Extra inputs are not permitted",
                param=f"{where}.{name}",
                code="unknown_parameter",
            )


def text_field(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise errors.invalid_type(f"{where}.{name} must be a string", param=f"{where}.{name}")
    return value
