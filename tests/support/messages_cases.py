"""What the Messages tests (unit and end to end) ask the model: one tool in Anthropic's shape,
thinking enabled with the smallest budget, and (from responses_cases) a Qwen3 reply that
thinks, says a sentence and calls the tool."""

from __future__ import annotations

from typing import Any

from support.responses_cases import QWEN_REPLY

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
THINKING = {"type": "enabled", "budget_tokens": 1024}
THINK_AND_CALL = f"SIM_REPLY: {QWEN_REPLY}"


def think_and_call(model: str) -> dict[str, Any]:
    """`messages.create` arguments whose answer is a thinking, a text and a tool_use block."""
    return {
        "model": model,
        "max_tokens": 2000,
        "messages": [{"role": "user", "content": THINK_AND_CALL}],
        "tools": [WEATHER],
        "thinking": THINKING,
    }
