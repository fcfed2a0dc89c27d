"""Mistral `[TOOL_CALLS]`: the JSON-array form and the `NAME[ARGS]{...}` form."""

from __future__ import annotations

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call

TOOLS = [{"type": "function", "function": {"name": "find_ferry", "parameters": {}}}]
MARKERS = ("[TOOL_CALLS]", "[ARGS]")


def make():
    return tool_parser("mistral", TOOLS)


def test_no_call() -> None:
    text = "Ferries leave hourly [weather permitting].\nBring a [coat]. "
    assert_chunk_invariant(make, text, ParseResult(text), MARKERS)


def test_one_call_array_form() -> None:
    text = '[TOOL_CALLS] [{"name": "find_ferry", "arguments": {"from": "Oban"}}]'
    expected = ParseResult("", "", (call(0, "find_ferry", {"from": "Oban"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_one_call_args_form() -> None:
    text = '[TOOL_CALLS]find_ferry[ARGS]{"from": "Oban", "to": "Mull"}'
    expected = ParseResult("", "", (call(0, "find_ferry", {"from": "Oban", "to": "Mull"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_both_forms() -> None:
    array = (
        'Two routes: [TOOL_CALLS] [{"name": "find_ferry", "arguments": {"day": 1}}, '
        '{"name": "find_ferry", "parameters": {"day": 2}}]\nThat is all.'
    )
    expected = ParseResult(
        "Two routes:That is all.",
        "",
        (call(0, "find_ferry", {"day": 1}), call(1, "find_ferry", {"day": 2})),
    )
    assert_chunk_invariant(make, array, expected, MARKERS)
    repeated = (
        'Checking. [TOOL_CALLS]find_ferry[ARGS]{"day": 1}\n'
        '[TOOL_CALLS]find_ferry[ARGS] {"day": 2}[TOOL_CALLS]tide_table{"port": "Oban"}'
    )
    expected = ParseResult(
        "Checking.",
        "",
        (
            call(0, "find_ferry", {"day": 1}),
            call(1, "find_ferry", {"day": 2}),
            call(2, "tide_table", {"port": "Oban"}),
        ),
    )
    assert_chunk_invariant(make, repeated, expected, MARKERS)


def test_unicode_escapes_nesting_and_empty_arguments() -> None:
    args = {"note": 'she said "\u00f6ff" \\ \u6e2f \U0001f6a2', "legs": [{"stops": [1, None]}, {}]}
    body = (
        '{"note": "she said \\"\\u00f6ff\\" \\\\ \u6e2f \U0001f6a2", '
        '"legs": [{"stops": [1, null]}, {}]}'
    )
    text = f"[TOOL_CALLS]find_ferry[ARGS]{body}[TOOL_CALLS]find_ferry[ARGS]{{}}"
    expected = ParseResult("", "", (call(0, "find_ferry", args), call(1, "find_ferry", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)
    text = f'[TOOL_CALLS][{{"name": "find_ferry", "arguments": {body}}}, {{"name": "x"}}]'
    expected = ParseResult("", "", (call(0, "find_ferry", args), call(1, "x", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unknown_tool_is_still_a_call() -> None:
    text = '[TOOL_CALLS]summon_kraken[ARGS]{"size": "large"}'
    expected = ParseResult("", "", (call(0, "summon_kraken", {"size": "large"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


@pytest.mark.parametrize(
    "text",
    [
        "Note: [TOOL_CALLS] is a token, not a call.",
        "[TOOL_CALLS][ARGS]{}",  # no name
        "[TOOL_CALLS]find_ferry[ARGS]{'single': 'quotes'}",
        "[TOOL_CALLS]find_ferry[ARGS][1, 2]",  # arguments not an object
        "[TOOL_CALLS]find_ferry[ARGS]nope",
        '[TOOL_CALLS] [{"arguments": {}}]',  # no name
        '[TOOL_CALLS] [{"name": "find_ferry", "arguments": {"x": 1}}',  # cut off
        "[TOOL_CALLS]find_ferry[ARGS]",
    ],
)
def test_malformed_is_returned_as_text(text: str) -> None:
    assert_chunk_invariant(make, "Try: " + text, ParseResult("Try: " + text))


def test_malformed_then_valid() -> None:
    text = 'Hm [TOOL_CALLS]find ferry [TOOL_CALLS]find_ferry[ARGS]{"k": true}'
    expected = ParseResult("Hm [TOOL_CALLS]find ferry", "", (call(0, "find_ferry", {"k": True}),))
    assert_chunk_invariant(make, text, expected)


def test_text_before_call_streams_early() -> None:
    parser = make()
    assert parser.feed("Sure, [one] moment ").normal_text == "Sure, [one] moment"
    assert not parser.feed("[TOOL_CALLS]find_ferry[ARGS]{")
    delta = parser.feed('"a": 1}')
    assert [(c.name, c.arguments) for c in delta.calls] == [("find_ferry", '{"a": 1}')]
