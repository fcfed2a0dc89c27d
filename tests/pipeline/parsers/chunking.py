"""Shared checks for incremental parsers: same result for any chunking, well-formed deltas."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence

from smg.pipeline.parsers import ParseDelta, Parser, ParseResult, ToolCall, aggregate


def call(index: int, name: str, arguments: dict) -> ToolCall:
    """The expected call with default ids and canonical arguments."""
    return ToolCall(index, f"call_{index}", name, json.dumps(arguments, ensure_ascii=False))


def chunkings(text: str, seeds: int = 20) -> Iterable[Sequence[str]]:
    """Whole, one character at a time, then `seeds` seeded random 1-5 character splits."""
    yield [text]
    yield list(text)
    for seed in range(seeds):
        rng = random.Random(seed)
        pieces, i = [], 0
        while i < len(text):
            step = rng.randint(1, 5)
            pieces.append(text[i : i + step])
            i += step
        yield pieces


def run_chunks(make_parser: Callable[[], Parser], chunks: Iterable[str]) -> ParseResult:
    parser = make_parser()
    deltas: list[ParseDelta] = [parser.feed(chunk) for chunk in chunks]
    deltas.append(parser.finish())
    return aggregate(deltas)  # raises if the call-delta protocol is broken


def assert_chunk_invariant(
    make_parser: Callable[[], Parser],
    text: str,
    expected: ParseResult,
    markers: Iterable[str] = (),
) -> None:
    """`parse(text)` and every chunking give `expected`; no marker leaks into normal text."""
    whole = make_parser().parse(text)
    assert whole == expected
    for chunks in chunkings(text):
        got = run_chunks(make_parser, chunks)
        assert got == expected, f"chunks={list(chunks)!r}"
    for marker in markers:
        assert marker not in expected.normal_text, f"{marker!r} leaked into content"
    for tool_call in expected.calls:
        assert isinstance(json.loads(tool_call.arguments), dict)
