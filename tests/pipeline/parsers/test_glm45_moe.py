"""GLM-4.5 / 4.6 tool calls (`glm45_moe`)."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call
from .xml_tools import NESTED, STOPS, TOOLS

MARKERS = ("<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>")


def make():
    return tool_parser("glm45_moe", TOOLS)


def block(name: str, *pairs: tuple[str, str]) -> str:
    inner = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
    return f"<tool_call>{name}\n{inner}</tool_call>"


def test_no_call() -> None:
    text = "GLM says hi.\n<arg_key> is not special outside a call.\n"
    assert_chunk_invariant(make, text, ParseResult(text), ("<tool_call>",))


def test_one_call_with_text_before() -> None:
    text = "Checking the weather first.\n" + block("plan_trip", ("city", "Ålesund"))
    expected = ParseResult(
        "Checking the weather first.", "", (call(0, "plan_trip", {"city": "Ålesund"}),)
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls() -> None:
    text = block("ping", ("host", "b")) + "\n" + block("ping", ("host", "c")) + "\nDone"
    expected = ParseResult(
        "Done", "", (call(0, "ping", {"host": "b"}), call(1, "ping", {"host": "c"}))
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_typing_by_schema_and_raw_strings() -> None:
    text = block(
        "plan_trip",
        ("zip", "0150"),
        ("city", ' say "hi" \\n '),
        ("nights", "\n3\n"),
        ("budget", "99"),
        ("refundable", "false"),
        ("note", "[60, 30]"),
        ("rooms", "1"),
    )
    args = {
        "zip": "0150",
        "city": ' say "hi" \\n ',
        "nights": 3,
        "budget": 99,
        "refundable": False,
        "note": "[60, 30]",
        "rooms": 1,
    }
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plan_trip", args),)))


def test_nested_object_and_array() -> None:
    text = block(
        "plan_trip",
        ("prefs", json.dumps(NESTED)),
        ("stops", json.dumps(STOPS, ensure_ascii=False)),
    )
    expected = ParseResult("", "", (call(0, "plan_trip", {"prefs": NESTED, "stops": STOPS}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_and_escaped_quotes_in_unknown_parameter() -> None:
    text = block("ping", ("msg", '"caf\\u00e9 \\"ok\\""'), ("raw", '日本 "x"'))
    args = {"msg": 'café "ok"', "raw": '日本 "x"'}
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "ping", args),)), MARKERS)


def test_unknown_tool_is_still_a_call_with_inferred_values() -> None:
    text = block("drone_launch", ("n", "2"), ("ratio", "0.5"), ("go", "True"), ("who", "me"))
    args = {"n": 2, "ratio": 0.5, "go": True, "who": "me"}
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "drone_launch", args),)))


def test_empty_arguments() -> None:
    text = "<tool_call>ping\n</tool_call><tool_call>ping</tool_call>"
    expected = ParseResult("", "", (call(0, "ping", {}), call(1, "ping", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)


@pytest.mark.parametrize(
    "body",
    [
        "\n<arg_key>a</arg_key><arg_value>1</arg_value>",  # no name
        "ping\nloose words",
        "ping\n<arg_key>a</arg_key>",  # key without value
        "ping\n<arg_key> </arg_key><arg_value>1</arg_value>",  # empty key
        "ping<arg_key>a</arg_key><arg_value>1</arg_value>",  # 4.5 needs the newline
    ],
)
def test_malformed_block_is_returned_as_text(body: str) -> None:
    text = f"Text <tool_call>{body}</tool_call>"
    assert_chunk_invariant(make, text, ParseResult(text))


def test_unterminated_block_is_text() -> None:
    text = "ok <tool_call>ping\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n"
    assert_chunk_invariant(make, text, ParseResult(text))
