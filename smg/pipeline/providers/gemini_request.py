"""An OpenAI chat completions body as a Gemini `GenerateContentRequest` (pure; no IO).

The Gemini API (generativelanguage.googleapis.com, v1beta) takes `contents` (turns of role `user`
or `model`, each a list of `parts`), a `systemInstruction`, a `generationConfig`, `tools` (one
entry holding every `functionDeclarations`) and a `toolConfig.functionCallingConfig`. The mapping:

* system/developer messages -> `systemInstruction.parts` (text only);
* user -> a `user` turn; assistant -> a `model` turn (its text, then a `functionCall` part per
  tool call, `args` the call's arguments parsed back into an object, `thoughtSignature` from the
  call's `extra_content.google.thought_signature` as Gemini's OpenAI-compatible API returns it);
* tool -> a `functionResponse` part in a `user` turn (consecutive tool messages share one turn);
  its `name` is the function of the assistant tool call with that `tool_call_id`, its `response`
  an object (`{"result": text}` unless the text is a JSON object itself);
* sampling -> `generationConfig` (temperature, topP, topK, maxOutputTokens, stopSequences,
  candidateCount, seed, presencePenalty, frequencyPenalty); `reasoning_effort` -> a
  `thinkingConfig` budget with `includeThoughts` (thought parts come back as reasoning_content),
  as does `chat_template_kwargs.enable_thinking` (what the Messages surface sends; the other
  template arguments shape a local chat template, which a hosted model does not have);
* `response_format` json_object -> `responseMimeType: application/json`; json_schema -> also
  `responseSchema` when the schema stays within the OpenAPI subset Gemini accepts
  (`gemini_schema`, which also converts the tools' parameters).

Anything that cannot be expressed (images by URL, audio, logprobs, a schema keyword Gemini lacks,
a tool result whose call is unknown) is a `ProviderRequestError` naming the parameter.
"""

from __future__ import annotations

from typing import Any

import orjson

from smg.pipeline.providers.base import ProviderRequestError
from smg.pipeline.providers.gemini_schema import gemini_schema

# OpenAI fields with no Gemini form that are left out on purpose: the gateway's own stream flags,
# bookkeeping (user, store, metadata, service_tier), and `parallel_tool_calls` (Gemini has no
# switch; the Messages surface sends `false` for disable_parallel_tool_use, and refusing it would
# refuse every such client, while a model calling two tools at once still gets both results).
IGNORED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "user",
        "store",
        "metadata",
        "parallel_tool_calls",
        "service_tier",
        "logprobs",  # handled: only asking for them is refused
        "top_logprobs",
    }
)
# reasoning_effort -> thinkingBudget, as Gemini's own OpenAI-compatible endpoint maps it
THINKING_BUDGET = {"minimal": 0, "none": 0, "low": 1024, "medium": 8192, "high": 24576}
# a turn's first function call must carry the model's thought signature (Gemini 3); a history
# without one (another model's, or a client that dropped `extra_content`) gets the value Google
# documents for that case (ai.google.dev/gemini-api/docs/thought-signatures)
SKIP_SIGNATURE = "skip_thought_signature_validator"


def gemini_body(body: dict[str, Any]) -> dict[str, Any]:
    """The Gemini request for an OpenAI chat completions `body` (ProviderRequestError if some
    part of it has no Gemini form)."""
    for key in body:
        if key not in IGNORED and key not in _FIELD_KEYS:
            raise ProviderRequestError(key, f"'{key}' is not supported by the Gemini provider")
    for key in ("logprobs", "top_logprobs"):
        if body.get(key):
            raise ProviderRequestError(key, "logprobs are not supported by the Gemini provider")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProviderRequestError("messages", "'messages' must be a non-empty list")
    system, contents = _contents(messages)
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": [{"text": t} for t in system]}
    config = _generation_config(body)
    if config:
        out["generationConfig"] = config
    tools = body.get("tools")
    if tools is not None:
        declarations = [_declaration(t, i) for i, t in enumerate(_list(tools, "tools"))]
        if declarations:
            out["tools"] = [{"functionDeclarations": declarations}]
    choice = body.get("tool_choice")
    if choice is not None:
        out["toolConfig"] = {"functionCallingConfig": _calling_config(choice)}
    return out


# ---------------------------------------------------------------- messages


def _contents(messages: list[Any]) -> tuple[list[str], list[dict[str, Any]]]:
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}  # tool_call_id -> function name, from the assistant turns
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ProviderRequestError(where, f"{where} must be an object")
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_text_only(content, f"{where}.content"))
        elif role == "user":
            _append(contents, "user", _user_parts(content, f"{where}.content"))
        elif role == "assistant":
            _append(contents, "model", _model_parts(message, where, call_names))
        elif role == "tool":
            _append(contents, "user", [_tool_result(message, where, call_names)])
        else:
            raise ProviderRequestError(f"{where}.role", f"unknown role {role!r}")
    if not contents:
        raise ProviderRequestError("messages", "at least one user message is required")
    return system, contents


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Gemini turns alternate; consecutive messages of one role share a turn."""
    if not parts:
        parts = [{"text": ""}]
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _user_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    parts: list[dict[str, Any]] = []
    for k, part in enumerate(_list(content, where)):
        at = f"{where}[{k}]"
        if not isinstance(part, dict):
            raise ProviderRequestError(at, f"{at} must be an object")
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"text": part["text"]})
        elif kind == "image_url":
            parts.append(_inline_image(part.get("image_url"), at))
        else:
            raise ProviderRequestError(
                at, f"content part of type {kind!r} is not supported by the Gemini provider"
            )
    return parts


def _inline_image(image: Any, where: str) -> dict[str, Any]:
    """A `data:` URL becomes `inlineData`; Gemini cannot fetch an http(s) image itself."""
    url = image.get("url") if isinstance(image, dict) else None
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        mime, data = url[5:].split(";base64,", 1)
        if mime:
            return {"inlineData": {"mimeType": mime, "data": data}}
    raise ProviderRequestError(
        f"{where}.image_url", "only base64 data: URLs of images are supported by Gemini"
    )


def _model_parts(
    message: dict[str, Any], where: str, call_names: dict[str, str]
) -> list[dict[str, Any]]:
    content = message.get("content")
    parts: list[dict[str, Any]] = []
    if content is not None:
        text = _text_only(content, f"{where}.content")
        if text:
            parts.append({"text": text})
    calls = message.get("tool_calls")
    for k, call in enumerate(_list(calls, f"{where}.tool_calls") if calls is not None else []):
        at = f"{where}.tool_calls[{k}]"
        call = call if isinstance(call, dict) else {}
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ProviderRequestError(at, f"{at} needs a function name")
        args = _object_json(fn.get("arguments"), f"{at}.function.arguments")
        if isinstance(call.get("id"), str):
            call_names[call["id"]] = name
        part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        signature = _signature(call) or (SKIP_SIGNATURE if k == 0 else None)
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _signature(call: dict[str, Any]) -> str | None:
    """The thought signature Gemini gave this call, as its OpenAI-compatible API carries it."""
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) and signature else None


def _tool_result(message: dict[str, Any], where: str, call_names: dict[str, str]) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    name = call_names.get(call_id) if isinstance(call_id, str) else None
    if name is None:
        raise ProviderRequestError(
            f"{where}.tool_call_id", f"{where} answers no tool call of an earlier assistant turn"
        )
    text = _text_only(message.get("content"), f"{where}.content")
    response: Any
    try:
        response = orjson.loads(text)
    except orjson.JSONDecodeError:
        response = None
    if not isinstance(response, dict):
        response = {"result": text}
    return {"functionResponse": {"name": name, "response": response}}


def _text_only(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for k, part in enumerate(_list(content, where)):
        if not (isinstance(part, dict) and part.get("type") == "text"):
            raise ProviderRequestError(f"{where}[{k}]", "only text parts are allowed here")
        text = part.get("text")
        if not isinstance(text, str):
            raise ProviderRequestError(f"{where}[{k}].text", "text must be a string")
        texts.append(text)
    return "".join(texts)


def _object_json(arguments: Any, where: str) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            raise ProviderRequestError(where, f"{where} is not valid JSON") from None
        if isinstance(value, dict):
            return value
    raise ProviderRequestError(where, f"{where} must be a JSON object")


# ---------------------------------------------------------------- generation config


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProviderRequestError(key, f"'{key}' must be a number")
    return value


def _int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProviderRequestError(key, f"'{key}' must be an integer")
    return value


_NUMBERS = (
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
)
_INTS = (("top_k", "topK"), ("n", "candidateCount"), ("seed", "seed"))
_FIELD_KEYS = frozenset(
    {k for k, _ in _NUMBERS}
    | {k for k, _ in _INTS}
    | {
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "tools",
        "tool_choice",
        "response_format",
        "reasoning_effort",
        "chat_template_kwargs",
    }
)


def _generation_config(body: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, name in _NUMBERS:
        number = _number(body, key)
        if number is not None:
            config[name] = number
    for key, name in _INTS:
        integer = _int(body, key)
        if integer is not None:
            config[name] = integer
    limit = _int(body, "max_completion_tokens")
    limit = _int(body, "max_tokens") if limit is None else limit
    if limit is not None:
        config["maxOutputTokens"] = limit
    stop = body.get("stop")
    if isinstance(stop, str):
        config["stopSequences"] = [stop]
    elif stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise ProviderRequestError("stop", "'stop' must be a string or a list of strings")
        if len(stop) > 5:
            raise ProviderRequestError("stop", "Gemini accepts at most 5 stop sequences")
        if stop:
            config["stopSequences"] = stop
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ProviderRequestError("chat_template_kwargs", "must be an object")
    if kwargs and (kwargs.get("enable_thinking") is True or kwargs.get("thinking") is True):
        config["thinkingConfig"] = {"includeThoughts": True}  # the model's own budget
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in THINKING_BUDGET:
            raise ProviderRequestError("reasoning_effort", f"unknown reasoning_effort {effort!r}")
        budget = THINKING_BUDGET[effort]
        config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": budget > 0}
    fmt = body.get("response_format")
    if fmt is not None:
        config.update(_response_format(fmt))
    return config


def _response_format(fmt: Any) -> dict[str, Any]:
    fmt = fmt if isinstance(fmt, dict) else {}
    kind = fmt.get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ProviderRequestError(
                "response_format.json_schema.schema", "a json_schema format needs a schema"
            )
        return {
            "responseMimeType": "application/json",
            "responseSchema": gemini_schema(schema, "response_format.json_schema.schema"),
        }
    raise ProviderRequestError("response_format.type", f"unknown response_format type {kind!r}")


# ---------------------------------------------------------------- tools


def _declaration(tool: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise ProviderRequestError(f"{where}.type", "only function tools are supported by Gemini")
    fn = tool.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ProviderRequestError(f"{where}.function.name", "a function tool needs a name")
    out: dict[str, Any] = {"name": name}
    if isinstance(fn.get("description"), str):
        out["description"] = fn["description"]
    params = fn.get("parameters")
    if params is not None and params != {"type": "object", "properties": {}}:
        out["parameters"] = gemini_schema(params, f"{where}.function.parameters")
    return out


def _calling_config(choice: Any) -> dict[str, Any]:
    if choice == "auto":
        return {"mode": "AUTO"}
    if choice == "required":
        return {"mode": "ANY"}
    if choice == "none":
        return {"mode": "NONE"}
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(name, str):
        return {"mode": "ANY", "allowedFunctionNames": [name]}
    raise ProviderRequestError("tool_choice", f"unknown tool_choice {choice!r}")


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ProviderRequestError(where, f"{where} must be a list")
    return value
