"""Cohere Command R / A `<|START_ACTION|>` blocks."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call

TOOLS = [{"type": "function", "function": {"name": "book_room", "parameters": {}}}]
START, END = "<|START_ACTION|>", "<|END_ACTION|>"
MARKERS = (START, END, "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")


def make():
    return tool_parser("cohere", TOOLS)


def action(body: str) -> str:
    return f"{START}\n{body}\n{END}"


def test_no_call() -> None:
    text = "<|START_RESPONSE|>Rooms are free on Friday.\nAsk <|later|>.<|END_RESPONSE|>"
    expected = ParseResult("Rooms are free on Friday.\nAsk <|later|>.")
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_one_call() -> None:
    text = action('{"tool_name": "book_room", "parameters": {"room": "B2"}}')
    expected = ParseResult("", "", (call(0, "book_room", {"room": "B2"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_and_text_around() -> None:
    text = (
        "<|START_TEXT|>Booking both.<|END_TEXT|>\n"
        + action(
            '[{"tool_name": "book_room", "parameters": {"room": "A1"}},\n'
            ' {"name": "book_room", "arguments": {"room": "A2"}}]'
        )
        + "\n<|START_TEXT|>Then lunch.<|END_TEXT|>\n"
        + action('{"tool_name": "order_lunch"}')
        + "\n"
    )
    expected = ParseResult(
        "Booking both.Then lunch.",
        "",
        (
            call(0, "book_room", {"room": "A1"}),
            call(1, "book_room", {"room": "A2"}),
            call(2, "order_lunch", {}),
        ),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_escapes_nesting_and_empty_arguments() -> None:
    args = {
        "title": 'the "caf\u00e9" room \\ \u4f1a\u8bae \U0001f4c5',
        "slots": [[9, 10], {"x": {}}],
    }
    body = json.dumps(
        [
            {"tool_name": "book_room", "parameters": args},
            {"tool_name": "book_room", "parameters": {}},
        ]
    )
    expected = ParseResult("", "", (call(0, "book_room", args), call(1, "book_room", {})))
    assert_chunk_invariant(make, action(body), expected, MARKERS)


def test_unknown_tool_is_still_a_call() -> None:
    text = action('{"tool_name": "teleport", "parameters": {"to": "Mars"}}')
    expected = ParseResult("", "", (call(0, "teleport", {"to": "Mars"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


@pytest.mark.parametrize(
    "body",
    [
        '{"tool_name": invalid}',
        '{"parameters": {"room": "A1"}}',  # no name
        '{"tool_name": "book_room", "parameters": [1]}',
        '[{"tool_name": "book_room"}, 7]',
        "[]",
    ],
)
def test_malformed_is_returned_as_text(body: str) -> None:
    text = "Trying." + action(body) + " ok"
    assert_chunk_invariant(make, text, ParseResult(text))


def test_unterminated_block_at_end() -> None:
    text = 'Go. <|START_ACTION|>{"tool_name": "book_room", "parameters": {"n": 1}}'
    expected = ParseResult("Go.", "", (call(0, "book_room", {"n": 1}),))
    assert_chunk_invariant(make, text, expected, MARKERS)
    cut = 'Go. <|START_ACTION|>{"tool_name": "book_'
    assert_chunk_invariant(make, cut, ParseResult(cut))
