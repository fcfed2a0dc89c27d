"""Responses input items: checked, turned into the chat messages a template renders, and
normalised for storage (pure; no IO).

Input items → chat messages (`input_messages`):
* a string: one user message; `instructions`: a system message before everything;
* `message` items (roles user, assistant, system, developer → system) with text parts
  (`input_text`, `output_text`, `refusal`; a plain string content too);
* `function_call` items: an assistant message's `tool_calls` (consecutive calls share one
  message, as a model that called several tools at once said them);
* `function_call_output` items: `tool` messages;
* `reasoning` items: the `reasoning_content` of the assistant turn that follows them;
* `mcp_call` items (a tool the gateway ran): a tool call and its output, as the two above;
  `mcp_list_tools`, `mcp_approval_request` and `mcp_approval_response` items say nothing to the
  model (the approved call comes back as an `mcp_call`).

A stored response keeps its input as items in OpenAI's listed shape (`stored_items`): each with
an `id` and a `type`, a message's content as a list of parts. A chain
(`previous_response_id`) is the stored items of the earlier responses, oldest first, followed by
the new input; `input_messages` reads both alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from smg import errors
from smg.errors import ApiError

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "refusal"})
_SILENT = frozenset({"mcp_list_tools", "mcp_approval_request", "mcp_approval_response"})
_ID_PREFIX = {
    "mcp_approval_response": "mcpa_",
    "message": "msg_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "reasoning": "rs_",
}


def unsupported(name: str, why: str) -> ApiError:
    return ApiError(
        400, "unsupported_parameter", f"Unsupported parameter: '{name}': {why}", param=name
    )


def stored_items(raw: str | list[Any], new_id: Callable[[str], str]) -> list[dict[str, Any]]:
    """The input as stored items (already checked by `input_messages`): ids given where the
    client gave none (`new_id(prefix)`), a message's string content as one text part."""
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    out: list[dict[str, Any]] = []
    for item in raw:
        kind = item.get("type", "message")
        stored = {"type": kind, **item}
        if kind == "message":
            if isinstance(stored.get("content"), str):
                part = "output_text" if stored.get("role") == "assistant" else "input_text"
                stored["content"] = [{"type": part, "text": stored["content"]}]
            stored.setdefault("status", "completed")
        if not isinstance(stored.get("id"), str) or not stored["id"]:
            stored["id"] = new_id(_ID_PREFIX.get(kind, "item_"))
        out.append(stored)
    return out


def input_messages(raw: Any, instructions: str | None) -> tuple[dict[str, Any], ...]:
    """The chat messages of `input` (a string or a list of items), after `instructions`."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    if isinstance(raw, str):
        out.append({"role": "user", "content": raw})
        return tuple(out)
    if not isinstance(raw, list):
        raise errors.invalid_type("'input' must be a string or an array of items", param="input")
    if not raw:
        raise errors.empty_array("input", "item")
    reasoning: list[str] = []  # reasoning items wait for the assistant turn they belong to
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise errors.invalid_type(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            msg = _message(item, where)
            if msg["role"] == "assistant" and reasoning:
                msg["reasoning_content"] = "".join(reasoning)
                reasoning = []
            out.append(msg)
        elif kind == "function_call" or kind == "mcp_call":
            call = _function_call(item, where)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)
                if "content" not in last:
                    last["content"] = ""
            else:
                msg = {"role": "assistant", "content": "", "tool_calls": [call]}
                if reasoning:
                    msg["reasoning_content"] = "".join(reasoning)
                    reasoning = []
                out.append(msg)
            if kind == "mcp_call":
                output = item.get("output")
                said = output if isinstance(output, str) else "(no output)"
                out.append({"role": "tool", "tool_call_id": call["id"], "content": said})
        elif kind in _SILENT:
            continue
        elif kind == "function_call_output":
            call_id = _str(item, "call_id", where)
            output = _text(item.get("output"), f"{where}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "reasoning":
            reasoning.append(_reasoning_text(item, where))
        elif kind == "item_reference":
            raise unsupported(where, "item references need stored items (not supported yet)")
        elif isinstance(kind, str):
            raise errors.invalid_value(
                f"{where}.type: '{kind}' is not supported; expected message, function_call, "
                "function_call_output or reasoning",
                param=f"{where}.type",
            )
        else:
            raise errors.invalid_type(f"{where}.type must be a string", param=f"{where}.type")
    if reasoning:  # reasoning at the end of the input: an assistant turn that only thought
        out.append({"role": "assistant", "content": "", "reasoning_content": "".join(reasoning)})
    return tuple(out)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise errors.invalid_value(
            f"{where}.role must be one of user, assistant, system, developer",
            param=f"{where}.role",
        )
    return {"role": _ROLES[role], "content": _text(item.get("content"), f"{where}.content")}


def _text(value: Any, where: str) -> str:
    """A string, or the text of an array of text parts."""
    if isinstance(value, list):
        return _parts_text(value, where)
    if not isinstance(value, str):
        raise errors.invalid_type(
            f"{where} must be a string or an array of text parts", param=where
        )
    return value


def _parts_text(parts: list[Any], where: str) -> str:
    texts: list[str] = []
    for j, part in enumerate(parts):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            if isinstance(kind, str) and kind.startswith("input_"):
                raise unsupported(at, f"content parts of type '{kind}' are not supported yet")
            raise errors.invalid_value(
                f"{at}.type must be one of input_text, output_text, refusal", param=f"{at}.type"
            )
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        if not isinstance(text, str):
            raise errors.invalid_type(f"{at} has no text", param=at)
        texts.append(text)
    return "".join(texts)


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    key = "id" if item.get("type") == "mcp_call" else "call_id"
    return {
        "id": _str(item, key, where),
        "type": "function",
        "function": {
            "name": _str(item, "name", where),
            "arguments": _str(item, "arguments", where),
        },
    }


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    content = item.get("content")
    parts = content if isinstance(content, list) and content else item.get("summary")
    if not isinstance(parts, list):
        raise errors.invalid_type(f"{where}.summary must be an array", param=f"{where}.summary")
    texts: list[str] = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise errors.invalid_type(f"{where}: part {j} has no text", param=where)
        texts.append(part["text"])
    return "".join(texts)


def _str(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise errors.invalid_type(f"{where}.{name} must be a string", param=f"{where}.{name}")
    return value
