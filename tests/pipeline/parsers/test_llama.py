"""Llama `<|python_tag|>` / bare JSON calls separated by `;`."""

from __future__ import annotations

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call

TAG = "<|python_tag|>"


def make():
    return tool_parser("llama", [{"type": "function", "function": {"name": "clock"}}])


def test_no_call() -> None:
    text = "It is { probably } noon; ask again.\n"
    assert_chunk_invariant(make, text, ParseResult(text), (TAG,))


def test_tagged_call() -> None:
    text = TAG + '{"name": "clock", "parameters": {"tz": "Europe/Oslo"}}'
    expected = ParseResult("", "", (call(0, "clock", {"tz": "Europe/Oslo"}),))
    assert_chunk_invariant(make, text, expected, (TAG,))


def test_bare_json_at_start_and_several_calls() -> None:
    text = (
        '\n {"name": "clock", "parameters": {"tz": "UTC"}} ;\n'
        '{"name": "alarm", "arguments": {"at": [7, 30], "opts": {"snooze": false}}};'
        f'{TAG}{{"name": "clock", "parameters": {{}}}}'
    )
    expected = ParseResult(
        "",
        "",
        (
            call(0, "clock", {"tz": "UTC"}),
            call(1, "alarm", {"at": [7, 30], "opts": {"snooze": False}}),
            call(2, "clock", {}),
        ),
    )
    assert_chunk_invariant(make, text, expected, (TAG,))


def test_text_before_and_after_call() -> None:
    text = f'Let me check. {TAG}{{"name": "clock", "parameters": {{"q": "a;b}}"}}}}  Then done.'
    expected = ParseResult("Let me check.Then done.", "", (call(0, "clock", {"q": "a;b}"}),))
    assert_chunk_invariant(make, text, expected, (TAG,))


def test_unicode_escaped_quotes_and_marker_inside_strings() -> None:
    args = {"msg": f'he said "\u00e7a va" {TAG} \u2603', "path": "C:\\tmp"}
    text = TAG + '{"name": "clock", "parameters": {"msg": "he said \\"\u00e7a va\\" '
    text += TAG + ' \\u2603", "path": "C:\\\\tmp"}}'
    expected = ParseResult("", "", (call(0, "clock", args),))
    assert_chunk_invariant(make, text, expected)


def test_unknown_tool_is_still_a_call() -> None:
    text = '{"name": "teleport", "parameters": {"to": "moon"}}'
    expected = ParseResult("", "", (call(0, "teleport", {"to": "moon"}),))
    assert_chunk_invariant(make, text, expected, (TAG,))


def test_malformed_is_returned_as_text() -> None:
    for text in (
        TAG + '{"name": "clock", "parameters": {"tz": }}',
        TAG + '{"parameters": {}}',
        TAG + "print('hi')",
        '{"name": "clock", "parameters": {"open": [1, 2}',
        '  {"name": 42}',
    ):
        assert_chunk_invariant(make, text, ParseResult(text))


def test_malformed_after_a_valid_call() -> None:
    text = '{"name": "clock"}; {"nope": 1} tail'
    expected = ParseResult('{"nope": 1} tail', "", (call(0, "clock", {}),))
    assert_chunk_invariant(make, text, expected)


def test_whitespace_only_and_empty() -> None:
    assert_chunk_invariant(make, "  \n", ParseResult("  \n"))
    assert_chunk_invariant(make, "", ParseResult())
