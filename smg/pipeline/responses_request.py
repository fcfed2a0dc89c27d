"""OpenAI Responses requests: a `POST /v1/responses` body checked into one typed value, and the
chat body the flow's token mode prepares from it (pure; no IO).

`parse_responses(body)` validates every field the Responses API defines and refuses, with a 400
in OpenAI's shape, what smg does not do yet (`unsupported_parameter`) or does not know at all
(`unknown_parameter`): nothing is dropped silently. `chat_body(req)` maps the value to the chat
completions body the prepare stage reads (`messages`, `tools`, `tool_choice`, `max_tokens`, ...):
a new surface maps its body at its edge and runs the one flow.

Input items become chat messages in smg.pipeline.responses_items.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from smg import errors
from smg.errors import ApiError
from smg.pipeline.responses_items import input_messages, unsupported
from smg.pipeline.responses_mcp import MAX_MCP_SERVERS, McpServerSpec, echoed, parse_mcp_tool

# every field of OpenAI's ResponseCreateParams; what smg does not do yet is refused by name
KNOWN_FIELDS = frozenset(
    {
        "background", "conversation", "include", "input", "instructions", "max_output_tokens",
        "max_tool_calls", "metadata", "model", "parallel_tool_calls", "previous_response_id",
        "prompt", "prompt_cache_key", "prompt_cache_retention", "reasoning", "safety_identifier",
        "service_tier", "store", "stream", "stream_options", "temperature", "text", "tool_choice",
        "tools", "top_logprobs", "top_p", "truncation", "user",
    }
)  # fmt: skip
# fields known but not served yet (their feature lands later in issue 12)
NOT_YET = frozenset({"prompt", "include"})
MAX_METADATA_PAIRS = 16  # OpenAI's limits on `metadata`
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """A checked `POST /v1/responses` body: the chat messages it becomes and what the response
    object echoes back."""

    model: str
    input: str | list[Any]  # as the client sent it (checked)
    messages: tuple[dict[str, Any], ...]  # the chat turns: stored history, then `input`
    previous_response_id: str | None
    conversation: str | None  # the id of the conversation it continues (and appends to)
    instructions: str | None
    tools: tuple[dict[str, Any], ...]  # Responses function tools, as the client sent them
    mcp: tuple[McpServerSpec, ...]  # MCP tools (servers) the gateway runs for the model
    echo_tools: tuple[dict[str, Any], ...]  # every tool, as the response object shows them
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    text_format: dict[str, Any]  # {"type": "text"} | {"type": "json_schema", ...} | json_object
    reasoning: dict[str, Any] | None
    store: bool
    stream: bool
    metadata: dict[str, str]
    user: str | None
    background: bool
    echo: dict[str, Any]  # other accepted fields echoed as they were (prompt_cache_key, ...)


def unknown_parameter(name: str) -> ApiError:
    return ApiError(400, "unknown_parameter", f"Unknown parameter: '{name}'.", param=name)


def parse_responses(body: dict[str, Any]) -> ResponsesRequest:
    """The typed request, or an `ApiError` (400) naming the first field at fault."""
    for name in body:
        if name not in KNOWN_FIELDS:
            raise unknown_parameter(name)
    for name in NOT_YET:
        if body.get(name) is not None and body.get(name) != []:
            raise unsupported(name, "not supported by this gateway yet")
    model = body.get("model")
    if model is None:
        raise errors.missing_field("model")
    if not isinstance(model, str) or not model:
        raise errors.invalid_type("'model' must be a non-empty string", param="model")
    instructions = _opt(body, "instructions", str, "a string")
    if "input" not in body:
        raise errors.missing_field("input")
    messages = input_messages(body["input"], instructions)
    tools, mcp, echo_tools = _tools(body.get("tools"))
    background = _flag(body, "background", False)
    if background and not _flag(body, "store", True):
        raise errors.invalid_value(
            "'background' requires 'store': a background response is read back from storage",
            param="background",
        )
    truncation = body.get("truncation")
    if truncation not in (None, "disabled"):
        raise unsupported("truncation", "only 'disabled' is supported")
    top_logprobs = body.get("top_logprobs")
    if top_logprobs not in (None, 0):
        raise unsupported("top_logprobs", "logprobs are not supported on /v1/responses yet")
    service_tier = body.get("service_tier")
    if service_tier not in (None, "auto", "default"):
        raise errors.invalid_value(
            f"Invalid 'service_tier': {service_tier!r}; this gateway serves 'auto' or 'default'",
            param="service_tier",
        )
    echo = {k: body[k] for k in ("prompt_cache_key", "safety_identifier") if body.get(k)}
    max_tool_calls = body.get("max_tool_calls")
    if max_tool_calls is not None:
        if type(max_tool_calls) is not int or max_tool_calls < 1:
            raise errors.invalid_value(
                "'max_tool_calls' must be a positive integer", param="max_tool_calls"
            )
        echo["max_tool_calls"] = max_tool_calls
    previous = _opt(body, "previous_response_id", str, "a string")
    conversation = _conversation(body.get("conversation"))
    if previous is not None and conversation is not None:
        raise errors.invalid_request(
            "Mutually exclusive parameters: 'previous_response_id' and 'conversation'; "
            "send one of them",
            param="conversation",
            code="mutually_exclusive_parameters",
        )
    return ResponsesRequest(
        model=model,
        input=body["input"],
        messages=messages,
        previous_response_id=previous,
        conversation=conversation,
        instructions=instructions,
        tools=tools,
        mcp=mcp,
        echo_tools=echo_tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools, bool(mcp)),
        parallel_tool_calls=_flag(body, "parallel_tool_calls", True),
        max_output_tokens=_max_output_tokens(body.get("max_output_tokens")),
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        text_format=_text_format(body.get("text")),
        reasoning=_reasoning(body.get("reasoning")),
        store=_flag(body, "store", True),
        stream=_flag(body, "stream", False),
        metadata=check_metadata(body.get("metadata")),
        user=_opt(body, "user", str, "a string"),
        background=background,
        echo=echo,
    )


def with_history(req: ResponsesRequest, history: list[dict[str, Any]]) -> ResponsesRequest:
    """`req` continuing a stored chain: `history` (the earlier responses' input and output
    items, oldest first) comes before its input."""
    new = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    messages = input_messages([*history, *new], req.instructions)
    return dataclasses.replace(req, messages=messages)


def chat_body(req: ResponsesRequest) -> dict[str, Any]:
    """The chat completions body the flow's prepare stage reads for `req` (token mode)."""
    body: dict[str, Any] = {"model": req.model, "messages": list(req.messages)}
    if req.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    k: t[k] for k in ("name", "description", "parameters", "strict") if k in t
                },
            }
            for t in req.tools
        ]
        choice = req.tool_choice
        if isinstance(choice, dict):
            choice = {"type": "function", "function": {"name": choice["name"]}}
        body["tool_choice"] = choice
        body["parallel_tool_calls"] = req.parallel_tool_calls
    elif req.tool_choice == "none":
        body["tool_choice"] = "none"
    if req.max_output_tokens is not None:
        body["max_tokens"] = req.max_output_tokens
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    fmt = req.text_format
    if fmt["type"] == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif fmt["type"] == "json_object":
        body["response_format"] = {"type": "json_object"}
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # an HTTP worker's counts (usage)
    return body


# --- other fields --------------------------------------------------------------------------------
_Tools = tuple[dict[str, Any], ...]


def _tools(raw: Any) -> tuple[_Tools, tuple[McpServerSpec, ...], _Tools]:
    """(function tools, MCP servers, every tool as echoed)."""
    if raw is None:
        return (), (), ()
    if not isinstance(raw, list):
        raise errors.invalid_type("'tools' must be an array", param="tools")
    tools: list[dict[str, Any]] = []
    mcp: list[McpServerSpec] = []
    echo: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "mcp":
            assert isinstance(tool, dict)
            spec = parse_mcp_tool(tool, where)
            if any(m.label == spec.label for m in mcp):
                raise errors.invalid_value(
                    f"{where}.server_label {spec.label!r} is given twice", param=where
                )
            if len(mcp) == MAX_MCP_SERVERS:
                raise errors.invalid_value(
                    f"at most {MAX_MCP_SERVERS} MCP tools per request", param="tools"
                )
            mcp.append(spec)
            echo.append(echoed(tool))
            continue
        if kind != "function":
            raise unsupported(where, f"tools of type {kind!r} are not supported; use 'function'")
        assert isinstance(tool, dict)
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise errors.invalid_type(f"{where}.name must be a non-empty string", param=where)
        params = tool.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise errors.invalid_type(f"{where}.parameters must be an object", param=where)
        tools.append(tool)
        echo.append(tool)
    return tuple(tools), tuple(mcp), tuple(echo)


def _tool_choice(raw: Any, tools: tuple[dict[str, Any], ...], mcp: bool) -> str | dict[str, Any]:
    if raw is None:
        return "auto"
    if raw in ("none", "auto", "required"):
        if raw == "required" and not tools and not mcp:
            raise errors.invalid_value("tool_choice 'required' needs tools", param="tool_choice")
        assert isinstance(raw, str)
        return raw
    if isinstance(raw, dict) and raw.get("type") == "function":
        name = raw.get("name")
        if not any(t["name"] == name for t in tools):
            raise errors.invalid_value(
                f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
            )
        return {"type": "function", "name": name}
    raise errors.invalid_value(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...}",
        param="tool_choice",
    )


def _text_format(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {"type": "text"}
    if not isinstance(raw, dict):
        raise errors.invalid_type("'text' must be an object", param="text")
    fmt = raw.get("format")
    if fmt is None:
        return {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text" or kind == "json_object":
        return {"type": kind}
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        if not isinstance(fmt.get("schema"), dict) or not isinstance(fmt.get("name"), str):
            raise errors.invalid_type(
                "text.format json_schema needs a 'name' and a 'schema' object", param="text.format"
            )
        return dict(fmt)
    raise errors.invalid_value(
        "text.format.type must be one of text, json_schema, json_object", param="text.format"
    )


def _reasoning(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise errors.invalid_type("'reasoning' must be an object", param="reasoning")
    effort = raw.get("effort")
    if effort not in (None, "none", "minimal", "low", "medium", "high", "xhigh"):
        raise errors.invalid_value(f"Invalid reasoning.effort {effort!r}", param="reasoning.effort")
    return {"effort": effort, "summary": raw.get("summary")}


def check_metadata(raw: Any) -> dict[str, str]:
    """`metadata`: at most 16 string pairs (OpenAI's limits)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise errors.invalid_type("'metadata' must be an object", param="metadata")
    if len(raw) > MAX_METADATA_PAIRS:
        raise errors.invalid_value(
            f"'metadata' has {len(raw)} pairs; at most {MAX_METADATA_PAIRS}", param="metadata"
        )
    for k, v in raw.items():
        if len(k) > MAX_METADATA_KEY or not isinstance(v, str) or len(v) > MAX_METADATA_VALUE:
            raise errors.invalid_value(
                f"metadata: keys are at most {MAX_METADATA_KEY} characters and values strings "
                f"of at most {MAX_METADATA_VALUE}",
                param="metadata",
            )
    return dict(raw)


def _conversation(raw: Any) -> str | None:
    """`conversation`: its id, or `{"id": ...}`."""
    if raw is None:
        return None
    conv_id = raw.get("id") if isinstance(raw, dict) else raw
    if not isinstance(conv_id, str) or not conv_id:
        raise errors.invalid_type(
            "'conversation' must be a conversation id or {'id': ...}", param="conversation"
        )
    return conv_id


def _max_output_tokens(raw: Any) -> int | None:
    if raw is None:
        return None
    if type(raw) is not int or raw < 1:
        raise errors.invalid_value(
            "'max_output_tokens' must be a positive integer", param="max_output_tokens"
        )
    return raw


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.invalid_type(f"'{name}' must be a number", param=name)
    return float(value)  # the range is checked once, by the sampling stage


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise errors.invalid_type(f"'{name}' must be a boolean", param=name)
    return value


def _opt(body: dict[str, Any], name: str, kind: type, what: str) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise errors.invalid_type(f"'{name}' must be {what}", param=name)
    return value
