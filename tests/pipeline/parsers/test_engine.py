"""The shared engine: marker scanner, whitespace trim, registry, detection, chaining, purity."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from smg.pipeline.parsers import (
    TOOL_PARSERS,
    ChainedParser,
    ParseResult,
    detect_reasoning_parser,
    detect_tool_parser,
    reasoning_parser,
    tool_parser,
)
from smg.pipeline.parsers.engine import Markers, MarkerScanner, WsTrim
from smg.pipeline.parsers.types import CallDelta, ParseDelta, aggregate

from .chunking import assert_chunk_invariant, call, chunkings

PARSERS_DIR = Path(__file__).resolve().parents[3] / "smg" / "pipeline" / "parsers"


def scan(markers: Markers, chunks: list[str]) -> list[tuple[str, str]]:
    """Events with adjacent text merged: the chunk-independent view of a scan."""
    scanner = MarkerScanner()
    events: list[tuple[str, str]] = []

    def add(text: str, marker: str) -> None:
        if text:
            if events and not events[-1][1]:
                events[-1] = (events[-1][0] + text, "")
            else:
                events.append((text, ""))
        if marker:
            events.append(("", marker))

    for chunk in chunks:
        scanner.push(chunk)
        while (event := scanner.next_event(markers)) is not None:
            add(*event)
    while (event := scanner.next_event(markers, final=True)) is not None:
        add(*event)
    return events


@pytest.mark.parametrize(
    ("markers", "text", "expected"),
    [
        (("<a>",), "x<a>y", [("x", ""), ("", "<a>"), ("y", "")]),
        (("<a>",), "x<a", [("x<a", "")]),  # an unfinished marker at the end is text
        (("ab", "abc"), "zabcd", [("z", ""), ("", "abc"), ("d", "")]),  # longest wins
        (("ab", "abc"), "zab", [("z", ""), ("", "ab")]),  # at the end, the shorter one
        (("ab", "abc"), "zabx", [("z", ""), ("", "ab"), ("x", "")]),
        (("bc", "abcd"), "abce", [("a", ""), ("", "bc"), ("e", "")]),
        (("<<x>",), "<<<x>", [("<", ""), ("", "<<x>")]),
        ((), "any <a> text", [("any <a> text", "")]),
    ],
)
def test_scanner_table(markers: tuple[str, ...], text: str, expected: list) -> None:
    for chunks in chunkings(text):
        assert scan(Markers(*markers), list(chunks)) == expected


def test_scanner_holds_back_only_possible_marker_prefixes() -> None:
    scanner = MarkerScanner()
    scanner.push("hello <th")
    assert scanner.next_event(Markers("<tool>", "<think>")) == ("hello ", "")
    assert scanner.next_event(Markers("<tool>", "<think>")) is None
    assert scanner.pending == "<th"


def test_ws_trim() -> None:
    trim = WsTrim(strip_leading=True, hold_trailing=True)
    assert [trim.feed(t) for t in (" \n", " a ", " ", "b\n")] == ["", "a", "", "  b"]
    assert trim.take_held() == "\n"


def test_aggregate_rejects_broken_call_protocol() -> None:
    with pytest.raises(ValueError):
        aggregate([ParseDelta(calls=(CallDelta(0, None, None, "{}"),))])
    with pytest.raises(ValueError):
        aggregate([ParseDelta(calls=(CallDelta(0, "a", "f", ""), CallDelta(0, "a", "f", "{}")))])


def test_feed_after_finish_is_our_bug() -> None:
    parser = tool_parser("qwen")
    parser.finish()
    assert not parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("x")


def test_chained_reasoning_then_tools() -> None:
    text = (
        "<think>need the time</think>\n\nOne moment.\n"
        '<tool_call>{"name": "clock", "arguments": {"tz": "UTC"}}</tool_call>'
    )
    expected = ParseResult("One moment.", "need the time", (call(0, "clock", {"tz": "UTC"}),))

    def make() -> ChainedParser:
        return ChainedParser(reasoning_parser("qwen3"), tool_parser("qwen"))

    assert_chunk_invariant(make, text, expected, ("<think>", "</think>", "<tool_call>"))


def test_unknown_and_unimplemented_names_fall_back_to_passthrough() -> None:
    for name in ("nope", "mistral"):
        assert tool_parser(name).parse("[TOOL_CALLS] x") == ParseResult("[TOOL_CALLS] x")
    assert set(TOOL_PARSERS) >= {"passthrough", "json", "qwen", "llama"}


@pytest.mark.parametrize(
    ("model", "tool", "reasoning"),
    [
        ("Qwen/Qwen3-8B", "qwen", "qwen3"),
        ("qwen2.5-7b-instruct", "qwen", "qwen3"),
        ("Qwen/Qwen3-Coder-30B-A3B", "qwen_xml", "qwen3"),
        ("Qwen3-235B-A22B-Thinking-2507", "qwen", "qwen3"),
        ("qwen3-thinking-mini", "qwen", "qwen3_thinking"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "pythonic", "deepseek_r1"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek", None),
        ("deepseek-v3.1-terminus", "deepseek31", None),
        ("meta-llama/Llama-3.2-3B-Instruct", "llama", None),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama", None),
        ("llama-4-scout", "pythonic", None),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral", None),
        ("mixtral-8x7b", "mistral", None),
        ("moonshotai/Kimi-K2-Instruct", "kimik2", "kimi"),
        ("zai-org/GLM-4.5-Air", "glm45_moe", "glm45"),
        ("GLM-4.7", "glm47_moe", "glm45"),
        ("stepfun-ai/step3", "step3", "step3"),
        ("MiniMaxAI/MiniMax-M2", "minimax_m2", "minimax"),
        ("CohereForAI/c4ai-command-r-plus", "cohere", "cohere_cmd"),
        ("command-a-03-2025", "cohere", "cohere_cmd"),
        ("nvidia/nemotron-nano-9b", "passthrough", "nano_v3"),
        ("gpt-4o-mini", "json", None),
        ("gemma-2-9b", "json", None),
        ("some-unknown-model", "passthrough", None),
    ],
)
def test_detection(model: str, tool: str, reasoning: str | None) -> None:
    assert detect_tool_parser(model) == tool
    assert detect_reasoning_parser(model) == reasoning


@pytest.mark.parametrize("path", sorted(PARSERS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_parser_modules_are_pure(path: Path) -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    forbidden = {"asyncio", "socket", "time", "aiohttp", "grpc", "threading", "random", "smg_"}
    assert not imported & forbidden
    assert len(path.read_text().splitlines()) < 400
