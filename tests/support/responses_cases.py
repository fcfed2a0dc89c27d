"""What the Responses tests (unit and end to end) ask the model: one function tool, and a Qwen3
reply that thinks, says a sentence and calls it."""

from __future__ import annotations

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
QWEN_REPLY = (
    "<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
)
