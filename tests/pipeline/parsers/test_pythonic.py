"""Pythonic call lists (`[f(a=1), g(b="x")]`), optionally in Llama 4 python tags."""

from __future__ import annotations

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call

TOOLS = [{"type": "function", "function": {"name": "plant", "parameters": {}}}]
MARKERS = ("<|python_start|>", "<|python_end|>")


def make():
    return tool_parser("pythonic", TOOLS)


def test_no_call() -> None:
    text = "Sow in rows [1] and [2]; see [the guide](url) or [ x ] and [f]. List: [a, b(c)]"
    assert_chunk_invariant(make, text, ParseResult(text), MARKERS)


def test_one_call() -> None:
    text = '[plant(seed="kale", rows=3)]'
    expected = ParseResult("", "", (call(0, "plant", {"seed": "kale", "rows": 3}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_with_text_around_and_python_tags() -> None:
    text = (
        "Planting now.\n<|python_start|>[plant(seed='leek'), water( litres = 2.5 ),\n"
        ' plant(seed="bean", dry=False)]<|python_end|>\nDone.'
    )
    expected = ParseResult(
        "Planting now.Done.",
        "",
        (
            call(0, "plant", {"seed": "leek"}),
            call(1, "water", {"litres": 2.5}),
            call(2, "plant", {"seed": "bean", "dry": False}),
        ),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_literals_unicode_escapes_and_nesting() -> None:
    text = (
        "[plant(note='it\\'s \"r\u00e9colte\" \\\\ \u79cd \U0001f331', bed={'rows': [1, (2, 3)], "
        "'mix': {'peat': None, 'ok': True}, 4: -1}, tags=[], brackets=\"])}[\")]"
    )
    args = {
        "note": 'it\'s "r\u00e9colte" \\ \u79cd \U0001f331',
        "bed": {"rows": [1, [2, 3]], "mix": {"peat": None, "ok": True}, "4": -1},
        "tags": [],
        "brackets": "])}[",
    }
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plant", args),)), MARKERS)


def test_empty_arguments_and_unknown_tool() -> None:
    text = "[harvest_moon(), plant()]"
    expected = ParseResult("", "", (call(0, "harvest_moon", {}), call(1, "plant", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)


@pytest.mark.parametrize(
    "bad",
    [
        "[plant('kale')]",  # positional
        "[plant(seed=kale)]",  # a name, not a literal
        "[plant(seed=1, seed=2)]",
        "[plant(**opts)]",
        "[plant(n=__import__('os').getcwd())]",  # never evaluated
        "[plant(s={1, 2})]",
        "[plant(x=float('nan'))]",
        "[plant(x=1e999)]",
        "[plant(x=1), 42]",
        "[plant(x=1]",  # mismatched bracket
        "[os.path(x=1)]",
        "[plant(x=1)",  # cut off
        "[plant(x='unterminated)]",
    ],
)
def test_malformed_is_returned_as_text(bad: str) -> None:
    text = "Try " + bad
    assert_chunk_invariant(make, text, ParseResult(text))


def test_malformed_then_valid() -> None:
    text = "[plant(1)] then [plant(n=1)]"
    expected = ParseResult("[plant(1)] then", "", (call(0, "plant", {"n": 1}),))
    assert_chunk_invariant(make, text, expected)


def test_text_streams_before_the_list_is_decided() -> None:
    parser = make()
    assert parser.feed("Rows [1] first ").normal_text == "Rows [1] first"
    assert not parser.feed("[plant(n=")
    delta = parser.feed("2)] ok")
    assert [(c.name, c.arguments) for c in delta.calls] == [("plant", '{"n": 2}')]
