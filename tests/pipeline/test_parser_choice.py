"""tool_choice: the mode (and constraint) each request's `tool_choice` and `tools` give."""

from __future__ import annotations

import json
from typing import Any

import pytest

from smg import errors
from smg.pipeline.parser_choice import ToolChoice, tool_choice

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("raw", "tools", "want"),
    [
        (None, None, ToolChoice("none")),
        (None, [], ToolChoice("none")),
        (None, TOOLS, ToolChoice("auto")),
        ("none", None, ToolChoice("none")),
        ("none", TOOLS, ToolChoice("none")),
        ("auto", None, ToolChoice("auto")),
        ("auto", TOOLS, ToolChoice("auto")),
        (
            {"type": "function", "function": {"name": "f"}},
            TOOLS,
            ToolChoice("function", function="f", constraint=json.dumps({"type": "object"})),
        ),
    ],
)
def test_modes(raw: Any, tools: list[Any] | None, want: ToolChoice) -> None:
    body = {} if raw is None else {"tool_choice": raw}
    assert tool_choice(body, tools) == want


def test_required_and_refusals() -> None:
    required = tool_choice({"tool_choice": "required"}, TOOLS)
    assert required.mode == "required" and required.constraint is not None
    for raw, tools in (("required", None), ("bogus", TOOLS), ({"type": "x"}, TOOLS)):
        with pytest.raises(errors.ApiError):
            tool_choice({"tool_choice": raw}, tools)
