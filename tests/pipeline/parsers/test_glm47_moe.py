"""GLM-4.7 tool calls (`glm47_moe`): GLM-4.5's pairs without the line structure."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call
from .xml_tools import NESTED, STOPS, TOOLS

MARKERS = ("<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>")


def make():
    return tool_parser("glm47_moe", TOOLS)


def block(name: str, *pairs: tuple[str, str]) -> str:
    inner = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in pairs)
    return f"<tool_call>{name}{inner}</tool_call>"


def test_no_call() -> None:
    text = "Nothing to call; <tool_ and </arg_value> are just text."
    assert_chunk_invariant(make, text, ParseResult(text), ("<tool_call>",))


def test_one_call_with_text_before() -> None:
    text = "Let me look.  " + block("plan_trip", ("city", "Bodø"), ("nights", "2"))
    expected = ParseResult(
        "Let me look.", "", (call(0, "plan_trip", {"city": "Bodø", "nights": 2}),)
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_newline_layout_also_accepted() -> None:
    text = (
        block("ping", ("host", "a"))
        + "<tool_call>\nping\n<arg_key>host</arg_key>\n<arg_value>b</arg_value>\n</tool_call>"
    )
    expected = ParseResult("", "", (call(0, "ping", {"host": "a"}), call(1, "ping", {"host": "b"})))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_typing_by_schema_and_raw_strings() -> None:
    text = block(
        "plan_trip",
        ("zip", "007"),
        ("city", '"Oslo"'),
        ("nights", "12"),
        ("budget", "-3.25e2"),
        ("refundable", "True"),
        ("rooms", "oops"),
    )
    args = {
        "zip": "007",
        "city": '"Oslo"',
        "nights": 12,
        "budget": -325.0,
        "refundable": True,
        "rooms": "oops",
    }
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plan_trip", args),)))


def test_nested_object_and_array() -> None:
    text = block(
        "plan_trip",
        ("prefs", json.dumps(NESTED, indent=1)),
        ("stops", json.dumps(STOPS)),
    )
    expected = ParseResult("", "", (call(0, "plan_trip", {"prefs": NESTED, "stops": STOPS}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_and_escaped_quotes() -> None:
    text = block("plan_trip", ("city", 'Zürich \\"central\\" 🚆'))
    expected = ParseResult("", "", (call(0, "plan_trip", {"city": 'Zürich \\"central\\" 🚆'}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unknown_tool_and_empty_arguments() -> None:
    text = block("mystery_tool", ("x", '[1, {"y": null}]')) + block("ping")
    expected = ParseResult(
        "", "", (call(0, "mystery_tool", {"x": [1, {"y": None}]}), call(1, "ping", {}))
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


@pytest.mark.parametrize(
    "body",
    [
        "<arg_key>a</arg_key><arg_value>1</arg_value>",  # no name
        "ping two<arg_key>a</arg_key><arg_value>1</arg_value>",  # text after the name
        "ping<arg_value>1</arg_value>",
        "",
    ],
)
def test_malformed_block_is_returned_as_text(body: str) -> None:
    text = f"Note: <tool_call>{body}</tool_call> end"
    assert_chunk_invariant(make, text, ParseResult(text))
