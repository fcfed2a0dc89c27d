"""An OpenAI chat completions body as an Anthropic Messages request (POST /v1/messages).

* system and developer messages -> `system` (their texts joined by a blank line);
* user/assistant content -> content blocks (text, images by URL or data URL); an assistant's
  `tool_calls` -> `tool_use` blocks (arguments parsed: Anthropic takes an object); `tool`
  messages -> `tool_result` blocks in a user turn; neighbouring turns of one role are merged;
* `tools` -> `{name, description, input_schema}`; `tool_choice` auto/none/required/named ->
  auto/none/any/tool; `parallel_tool_calls: false` -> `disable_parallel_tool_use`;
* `max_completion_tokens`, else `max_tokens`, else `DEFAULT_MAX_TOKENS` (Anthropic requires one);
  `stop` -> `stop_sequences`; temperature, top_p, top_k as they are; `user` -> metadata.user_id;
* `reasoning_effort` -> extended thinking, `thinking: {type: enabled, budget_tokens}` with the
  budget of `THINKING_BUDGET` (minimal and low 1024, Anthropic's least; medium 8192; high 24576,
  Gemini's budgets for the same words; none: no thinking); `chat_template_kwargs.enable_thinking`
  (what the Messages surface sends) -> the medium budget. The answer's `max_tokens` covers the
  thinking, as OpenAI's does the reasoning: without a limit it is the budget plus
  `DEFAULT_MAX_TOKENS`; a limit at or under the budget cuts the budget to the limit less one, and
  a limit that leaves under 1024 is a 400 (Anthropic would refuse it too).

Anything else with a non-default value (n > 1, logprobs, penalties, a JSON response format...)
cannot be said in Messages: a `ProviderRequestError` naming it, never dropped.
"""

from __future__ import annotations

from typing import Any

import orjson

from smg.pipeline.providers.base import ProviderRequestError

DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; the client gave none
ANTHROPIC_VERSION = "2023-06-01"

# reasoning_effort -> thinking budget_tokens (documented in the module docstring)
THINKING_BUDGET = {"none": 0, "minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}
MIN_THINKING_BUDGET = 1024  # Anthropic refuses less
TEMPLATE_THINKING = "medium"  # the budget of `chat_template_kwargs.enable_thinking`

_PASSED = ("temperature", "top_p", "top_k")
# accepted and meaningless here (how the gateway or OpenAI bill and store): left out
_IGNORED = frozenset(
    {"model", "messages", "stream", "stream_options", "store", "service_tier", "metadata"}
)
# accepted at these values only (the OpenAI defaults)
_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "logprobs": (False,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "response_format": ({"type": "text"},),
    "parallel_tool_calls": (True, False),
}


def messages_body(body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"model": body.get("model")}
    system, turns = _turns(body.get("messages"))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    out["max_tokens"] = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    budget = _thinking_budget(body)
    if budget:
        if max_tokens is None:
            out["max_tokens"] = budget + DEFAULT_MAX_TOKENS
        elif isinstance(max_tokens, int) and max_tokens <= budget:
            budget = max_tokens - 1
            if budget < MIN_THINKING_BUDGET:
                raise ProviderRequestError(
                    "max_tokens",
                    f"with reasoning an Anthropic worker needs max_tokens over "
                    f"{MIN_THINKING_BUDGET} (its least thinking budget); {max_tokens} given",
                )
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if system:
        out["system"] = system
    out["messages"] = turns
    for key in _PASSED:
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if stop is not None:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("user") is not None:
        out["metadata"] = {"user_id": body["user"]}
    if body.get("tools"):
        out["tools"] = [_tool(t) for t in body["tools"]]
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None:
        out["tool_choice"] = choice
    if stream:
        out["stream"] = True
    handled = {*_PASSED, *_IGNORED, "max_tokens", "max_completion_tokens", "stop", "user"}
    handled |= {"tools", "tool_choice", "reasoning_effort", "chat_template_kwargs"}
    for key, value in body.items():
        if key in handled or value is None:
            continue
        if key in _DEFAULTS and value in _DEFAULTS[key]:
            continue
        raise ProviderRequestError(key, f"`{key}` is not supported by an Anthropic worker")
    return out


def _thinking_budget(body: dict[str, Any]) -> int:
    """The thinking budget the request asks for: by `reasoning_effort`, else by
    `chat_template_kwargs.enable_thinking` (or `thinking`); 0 for none."""
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in THINKING_BUDGET:
            raise ProviderRequestError("reasoning_effort", f"unknown reasoning_effort {effort!r}")
        return THINKING_BUDGET[effort]
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return 0
    if not isinstance(kwargs, dict):
        raise ProviderRequestError("chat_template_kwargs", "must be an object")
    if kwargs.get("enable_thinking") is True or kwargs.get("thinking") is True:
        return THINKING_BUDGET[TEMPLATE_THINKING]
    return 0  # other template switches mean nothing to Anthropic


def _text_of(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ProviderRequestError(param, f"`{param}` may hold text parts only")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    if content is None:
        return ""
    raise ProviderRequestError(param, f"`{param}` must be a string or a list of parts")


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if content is None:
        return []
    if not isinstance(content, list):
        raise ProviderRequestError(param, f"`{param}` must be a string or a list of parts")
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            out.append(_image(part.get("image_url"), param))
        else:
            raise ProviderRequestError(param, f"content part {kind!r} is not supported")
    return out


def _image(spec: Any, param: str) -> dict[str, Any]:
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str):
        raise ProviderRequestError(param, "an image_url part needs a url")
    if url.startswith("data:"):
        head, _, data = url[5:].partition(",")
        media, _, enc = head.partition(";")
        if enc != "base64":
            raise ProviderRequestError(param, "an image data URL must be base64")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _tool_use(call: Any, param: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ProviderRequestError(param, "a tool call needs a function name")
    args = fn.get("arguments") or "{}"
    try:
        parsed = orjson.loads(args) if isinstance(args, str) else args
    except orjson.JSONDecodeError:
        raise ProviderRequestError(param, "tool call arguments must be JSON") from None
    if not isinstance(parsed, dict):
        raise ProviderRequestError(param, "tool call arguments must be a JSON object")
    return {"type": "tool_use", "id": call.get("id"), "name": fn["name"], "input": parsed}


def _turns(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    if not isinstance(messages, list):
        raise ProviderRequestError("messages", "`messages` must be a list")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise ProviderRequestError(param, f"`{param}` must be an object")
        role = msg.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(msg.get("content"), param))
            continue
        if role == "user":
            blocks = _blocks(msg.get("content"), param)
        elif role == "assistant":
            blocks = _blocks(msg.get("content"), param)
            blocks += [_tool_use(c, param) for c in msg.get("tool_calls") or ()]
        elif role == "tool":
            role = "user"
            result = {
                "type": "tool_result",
                "tool_use_id": msg.get("tool_call_id"),
                "content": _text_of(msg.get("content"), param),
            }
            blocks = [result]
        else:
            raise ProviderRequestError(param, f"role {role!r} is not supported")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


def _tool(tool: Any) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    if tool.get("type") != "function" or not isinstance(fn, dict) or "name" not in fn:
        raise ProviderRequestError("tools", "only function tools are supported")
    out: dict[str, Any] = {"name": fn["name"]}
    if fn.get("description"):
        out["description"] = fn["description"]
    out["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if choice is None:
        out: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name")}
    else:
        raise ProviderRequestError("tool_choice", "`tool_choice` is not one Anthropic knows")
    if out is not None and parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out
