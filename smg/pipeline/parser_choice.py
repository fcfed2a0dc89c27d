"""Which reasoning and tool-call parsing a chat request gets (pure; no IO).

`tool_choice`: "none" (no tool parsing), "auto" (the model's format), "required" (the engine is
constrained to a JSON array of calls, parsed as JSON), or a named function (the engine is
constrained to that function's parameters; the whole output is its arguments). Reasoning is
separated unless the request sets `separate_reasoning: false`; parsing starts inside the think
block when the chat template already opened it.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smg import errors
from smg.pipeline.parsers import (
    detect_reasoning_parser,
    detect_tool_parser,
    reasoning_parser,
    tool_parser,
)
from smg.pipeline.parsers.engine import ChainedParser, StreamParser
from smg.pipeline.parsers.forced import ForcedCallParser
from smg.pipeline.parsers.types import Parser

_OPEN_THINK = ("<think>", "◁think▷", "<|START_THINKING|>")


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: str  # "none" | "auto" | "required" | "function"
    function: str | None = None
    constraint: str | None = None  # JSON schema the engine should enforce


def _functions(tools: list[Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise errors.invalid_type(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                param=f"tools[{i}]",
            )
        params = fn.get("parameters")
        out[fn["name"]] = params if isinstance(params, dict) else {"type": "object"}
    return out


# the two answers of most requests, made once (a frozen dataclass costs ~0.5 us to build)
_NONE = ToolChoice("none")
_AUTO = ToolChoice("auto")


def tool_choice(body: dict[str, Any], tools: list[Any] | None) -> ToolChoice:
    raw = body.get("tool_choice")
    functions = _functions(tools) if tools else {}
    if raw is None:
        return _AUTO if functions else _NONE
    if raw == "none":
        return _NONE
    if raw == "auto":
        return _AUTO
    if raw == "required":
        if not functions:
            raise errors.invalid_value("tool_choice 'required' needs tools", param="tool_choice")
        items = [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "parameters": schema},
                "required": ["name", "parameters"],
            }
            for name, schema in functions.items()
        ]
        schema = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
        return ToolChoice("required", constraint=json.dumps(schema))
    if isinstance(raw, dict):
        fn = raw.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if raw.get("type") != "function" or not isinstance(name, str):
            raise errors.invalid_type(
                "tool_choice must be 'none', 'auto', 'required' or "
                "{'type': 'function', 'function': {'name': ...}}",
                param="tool_choice",
            )
        if name not in functions:
            raise errors.invalid_value(
                f"tool_choice names '{name}', which is not in tools", param="tool_choice"
            )
        return ToolChoice("function", function=name, constraint=json.dumps(functions[name]))
    raise errors.invalid_value(f"Unknown tool_choice {raw!r}", param="tool_choice")


class ParserChoice:
    """The gateway's parser settings (`--reasoning-parser`, `--tool-call-parser`) applied per
    request; without them, each model's family is detected from its name."""

    def __init__(self, reasoning: str | None = None, tool: str | None = None) -> None:
        self.reasoning = reasoning
        self.tool = tool

    def factory(
        self,
        body: dict[str, Any],
        model: str,
        prompt: str,
        tools: list[Any] | None,
        choice: ToolChoice,
        request_id: str,
    ) -> Callable[[], Parser] | None:
        separate = body.get("separate_reasoning", True) is not False
        rname = (self.reasoning or detect_reasoning_parser(model)) if separate else None
        if choice.mode == "none" or not tools:
            tname = None
        elif choice.mode == "required":
            tname = "json"
        elif choice.mode == "function":
            tname = "forced"
        else:
            tname = self.tool or detect_tool_parser(model)
        if rname is None and tname is None:
            return None
        start = prompt.rstrip().endswith(_OPEN_THINK)
        prefix = f"call_{os.urandom(6).hex()}"
        forced = choice.function
        choices = itertools.count()  # one parser per choice: ids stay unique when n > 1

        def make() -> Parser:
            k = next(choices)

            def ids(i: int) -> str:
                return f"{prefix}{k:02x}{i:02x}"

            reasoning = reasoning_parser(rname or "passthrough", start_in_reasoning=start)
            calls: StreamParser
            if tname == "forced" and forced is not None:
                calls = ForcedCallParser(forced, tools, id_factory=ids)
            else:
                calls = tool_parser(tname or "passthrough", tools, id_factory=ids)
            return ChainedParser(reasoning, calls)

        return make
