"""Reasoning and tool-call parsers: the public API for embedders (pure; no IO).

    from smg.pipeline.parsers import reasoning_parser, tool_parser, detect_tool_parser

    p = tool_parser(detect_tool_parser(model), tools, id_factory=lambda i: f"call_{rid}_{i}")
    for piece in model_text_stream:
        delta = p.feed(piece)   # ParseDelta(normal_text, reasoning_text, calls)
    delta = p.finish()
    result = tool_parser("qwen").parse(whole_text)   # ParseResult, equal to the aggregated deltas

A parser instance serves one response. `ChainedParser(reasoning, tools)` runs the reasoning
parser first and feeds its normal text to the tool parser.

Adding a format: write `smg/pipeline/parsers/<format>.py` (a `StreamParser` subclass, see
`engine.py`) and add one line to `TOOL_PARSERS` or `REASONING_PARSERS` below. Names with no
parser yet resolve to passthrough, so the detection tables may name formats ahead of their code.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

from smg.pipeline.parsers import reasoning as _r
from smg.pipeline.parsers.cohere import CohereParser
from smg.pipeline.parsers.deepseek import DeepSeekV3Parser, DeepSeekV31Parser
from smg.pipeline.parsers.engine import ChainedParser, PassthroughParser, StreamParser
from smg.pipeline.parsers.glm45_moe import Glm45MoeParser
from smg.pipeline.parsers.glm47_moe import Glm47MoeParser
from smg.pipeline.parsers.json_format import JsonParser
from smg.pipeline.parsers.kimik2 import KimiK2Parser
from smg.pipeline.parsers.llama import LlamaParser
from smg.pipeline.parsers.minimax_m2 import MinimaxM2Parser
from smg.pipeline.parsers.mistral import MistralParser
from smg.pipeline.parsers.pythonic import PythonicParser
from smg.pipeline.parsers.qwen import QwenParser
from smg.pipeline.parsers.qwen_coder import QwenCoderParser
from smg.pipeline.parsers.step3 import Step3Parser
from smg.pipeline.parsers.types import (
    CallDelta,
    IdFactory,
    ParseDelta,
    Parser,
    ParseResult,
    ToolCall,
    aggregate,
)

__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "CallDelta",
    "ChainedParser",
    "IdFactory",
    "ParseDelta",
    "ParseResult",
    "Parser",
    "ToolCall",
    "aggregate",
    "detect_reasoning_parser",
    "detect_tool_parser",
    "reasoning_parser",
    "tool_parser",
]


class ToolParserFactory(Protocol):
    def __call__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> StreamParser: ...


class ReasoningParserFactory(Protocol):
    def __call__(self, *, start_in_reasoning: bool = False) -> StreamParser: ...


# name -> factory. One line per format.
TOOL_PARSERS: dict[str, ToolParserFactory] = {
    "passthrough": PassthroughParser,
    "json": JsonParser,
    "qwen": QwenParser,
    "llama": LlamaParser,
    "qwen_coder": QwenCoderParser,
    "qwen_xml": QwenCoderParser,
    "glm45_moe": Glm45MoeParser,
    "glm47_moe": Glm47MoeParser,
    "step3": Step3Parser,
    "minimax_m2": MinimaxM2Parser,
    "mistral": MistralParser,
    "deepseek": DeepSeekV3Parser,
    "deepseek31": DeepSeekV31Parser,
    "kimik2": KimiK2Parser,
    "pythonic": PythonicParser,
    "cohere": CohereParser,
}

REASONING_PARSERS: dict[str, ReasoningParserFactory] = {
    "passthrough": PassthroughParser,
    "deepseek_r1": _r.DEEPSEEK_R1,
    "qwen3": _r.QWEN3,
    "qwen3_thinking": _r.QWEN3_THINKING,
    "kimi": _r.KIMI,
    "glm45": _r.GLM45,
    "step3": _r.STEP3,
    "minimax": _r.MINIMAX,
    "nano_v3": _r.NANO_V3,
    "cohere_cmd": _r.COHERE_CMD,
}


def tool_parser(
    name: str, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
) -> StreamParser:
    """A fresh tool-call parser; unknown (or not yet implemented) names give passthrough."""
    factory = TOOL_PARSERS.get(name, PassthroughParser)
    return factory(tools, id_factory=id_factory)


def reasoning_parser(name: str, *, start_in_reasoning: bool = False) -> StreamParser:
    """A fresh reasoning parser; unknown names give passthrough (which ignores the flag)."""
    factory = REASONING_PARSERS.get(name, PassthroughParser)
    return factory(start_in_reasoning=start_in_reasoning)


# Model name -> tool format, as in the Rust gateway: prefix patterns, the longest match wins;
# no match -> "passthrough". Matched case-insensitively on the full name and on the part after
# the last "/" (so "Qwen/Qwen3-8B" and "meta-llama/Llama-3.1-8B" work without org variants).
# Deviation: Rust maps only llama-3.2 to "llama" and other llama-3.x to "json"; our llama parser
# is a superset of json for Llama output (it also handles `<|python_tag|>`), so all llama-3.
TOOL_MODEL_PATTERNS: dict[str, str] = {
    "gpt-4": "json",
    "gpt-3.5": "json",
    "gpt-4o": "json",
    "claude-": "json",
    "mistral-": "mistral",
    "mixtral-": "mistral",
    "qwen3.5": "qwen_xml",
    "qwen3-coder": "qwen_xml",
    "qwen": "qwen",
    "llama-4": "pythonic",
    "meta-llama-4": "pythonic",
    "llama-3": "llama",
    "meta-llama-3": "llama",
    "llama-": "json",
    "meta-llama-": "json",
    "deepseek-v3": "deepseek",
    "deepseek-v3.1": "deepseek31",
    "deepseek-": "pythonic",
    "glm-4.5": "glm45_moe",
    "glm-4.6": "glm45_moe",
    "glm-4.7": "glm47_moe",
    "glm-": "json",
    "step3": "step3",
    "step-3": "step3",
    "kimi-k2": "kimik2",
    "minimax": "minimax_m2",
    "command-r": "cohere",
    "command-a": "cohere",
    "c4ai-command": "cohere",
    "cohere": "cohere",
    "gemini-": "json",
    "palm-": "json",
    "gemma-": "json",
}

# Model name -> reasoning format, as in the Rust gateway: case-insensitive substring, the first
# pattern in this order wins; no match -> None (no reasoning parsing).
REASONING_MODEL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("deepseek-r1", "deepseek_r1"),
    ("qwen3-thinking", "qwen3_thinking"),
    ("qwen-thinking", "qwen3_thinking"),
    ("qwen3", "qwen3"),
    ("qwen", "qwen3"),
    ("glm45", "glm45"),
    ("glm47", "glm45"),
    ("glm-4.5", "glm45"),  # the last three are ours: real GLM ids are spelled "GLM-4.5..."
    ("glm-4.6", "glm45"),
    ("glm-4.7", "glm45"),
    ("kimi", "kimi"),
    ("step3", "step3"),
    ("minimax", "minimax"),
    ("mm-m2", "minimax"),
    ("command-r", "cohere_cmd"),
    ("command-a", "cohere_cmd"),
    ("c4ai-command", "cohere_cmd"),
    ("cohere", "cohere_cmd"),
    ("nemotron-nano", "nano_v3"),
    ("nemotron-super", "nano_v3"),
    ("nano-v3", "nano_v3"),
)


# Asked per request with the request's model (a handful of names): kept, bounded.
@lru_cache(maxsize=256)
def detect_tool_parser(model_name: str) -> str:
    """The tool format name for a model (maybe not implemented yet: `tool_parser` falls back)."""
    full = model_name.lower()
    base = full.rsplit("/", 1)[-1]
    best = ""
    for pattern in TOOL_MODEL_PATTERNS:
        if len(pattern) > len(best) and (full.startswith(pattern) or base.startswith(pattern)):
            best = pattern
    return TOOL_MODEL_PATTERNS[best] if best else "passthrough"


@lru_cache(maxsize=256)
def detect_reasoning_parser(model_name: str) -> str | None:
    """The reasoning format name for a model, or None if it has no known reasoning markers."""
    lowered = model_name.lower()
    for pattern, name in REASONING_MODEL_PATTERNS:
        if pattern in lowered:
            return name
    return None
