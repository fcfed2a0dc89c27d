"""Bare JSON calls: one object or an array."""

from __future__ import annotations

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call


def make():
    return tool_parser("json", [])


def test_no_call_streams_immediately() -> None:
    text = "The answer is 42 {not json}."
    assert_chunk_invariant(make, text, ParseResult(text))
    assert make().feed("The").normal_text == "The"


def test_single_object_with_arguments_or_parameters() -> None:
    for key in ("arguments", "parameters"):
        text = f'{{"name": "sum", "{key}": {{"xs": [1, 2, 3]}}}}'
        expected = ParseResult("", "", (call(0, "sum", {"xs": [1, 2, 3]}),))
        assert_chunk_invariant(make, text, expected)


def test_array_of_calls_nested_unicode_and_escapes() -> None:
    text = (
        ' [{"name": "note", "arguments": {"t": "\\"quoted\\" \u00fc\u00f1\u00ee \\ud83d\\ude00",'
        ' "m": {"a": [{"b": {}}]}}}, {"name": "ping", "arguments": {}}]\n'
    )
    expected = ParseResult(
        "",
        "",
        (
            call(
                0, "note", {"t": '"quoted" \u00fc\u00f1\u00ee \U0001f600', "m": {"a": [{"b": {}}]}}
            ),
            call(1, "ping", {}),
        ),
    )
    assert_chunk_invariant(make, text, expected)


def test_unknown_tool_is_still_a_call() -> None:
    text = '{"name": "not_offered", "arguments": {"z": null}}'
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "not_offered", {"z": None}),)))


def test_trailing_text_after_calls_is_content() -> None:
    text = '{"name": "ping"}\n\nSent.'
    assert_chunk_invariant(make, text, ParseResult("Sent.", "", (call(0, "ping", {}),)))


def test_malformed_is_returned_as_text() -> None:
    for text in (
        '{"name": "ping", "arguments": {"a": 1}',
        '[{"name": "ping"}, {"arguments": {}}]',
        "[]",
        '{"name": "ping"',
        "[1, 2] and more",
        '{"name": "x", "arguments": "not json"}',
    ):
        assert_chunk_invariant(make, text, ParseResult(text))


def test_whitespace_only_and_empty() -> None:
    assert_chunk_invariant(make, " \n\t", ParseResult(" \n\t"))
    assert_chunk_invariant(make, "", ParseResult())
