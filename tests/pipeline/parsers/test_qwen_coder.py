"""Qwen3-Coder XML tool calls (`qwen_coder` / `qwen_xml`)."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call
from .xml_tools import NESTED, STOPS, TOOLS

MARKERS = ("<tool_call>", "</tool_call>", "<function=", "<parameter=")


def make():
    return tool_parser("qwen_coder", TOOLS)


def block(name: str, *params: tuple[str, str]) -> str:
    inner = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{inner}</function>\n</tool_call>"


def test_alias_is_registered() -> None:
    text = block("ping")
    assert tool_parser("qwen_xml", TOOLS).parse(text) == make().parse(text)


def test_no_call() -> None:
    text = "Use <function> pointers with care; a < b and x=1.\n"
    assert_chunk_invariant(make, text, ParseResult(text), MARKERS)


def test_one_call_with_text_before() -> None:
    text = "I will plan it.\n\n" + block("plan_trip", ("city", "Tromsø"), ("nights", "4"))
    expected = ParseResult(
        "I will plan it.", "", (call(0, "plan_trip", {"city": "Tromsø", "nights": 4}),)
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_and_text_between() -> None:
    text = (
        block("ping", ("host", "a.example"))
        + "\nthen\n"
        + block("plan_trip", ("refundable", "false"))
        + block("ping")
        + "\nAll sent."
    )
    expected = ParseResult(
        "thenAll sent.",
        "",
        (
            call(0, "ping", {"host": "a.example"}),
            call(1, "plan_trip", {"refundable": False}),
            call(2, "ping", {}),
        ),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_typing_by_schema_and_raw_strings() -> None:
    text = block(
        "plan_trip",
        ("zip", "0150"),
        ("city", '"quoted" \\ back\\slash'),
        ("nights", " 7 "),
        ("budget", "1200.50"),
        ("refundable", "True"),
        ("note", "null"),
        ("rooms", "2"),
    )
    args = {
        "zip": "0150",
        "city": '"quoted" \\ back\\slash',
        "nights": 7,
        "budget": 1200.5,
        "refundable": True,
        "note": "null",
        "rooms": 2,
    }
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plan_trip", args),)))


def test_nested_object_and_array() -> None:
    text = block(
        "plan_trip",
        ("prefs", json.dumps(NESTED, indent=2)),
        ("stops", json.dumps(STOPS, ensure_ascii=False)),
    )
    expected = ParseResult("", "", (call(0, "plan_trip", {"prefs": NESTED, "stops": STOPS}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_multiline_string_keeps_inner_whitespace() -> None:
    code = "def f():\n    return '漢字 \U0001f600'\n"
    text = block("plan_trip", ("city", code))
    expected = ParseResult("", "", (call(0, "plan_trip", {"city": code}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unknown_tool_and_parameters_are_inferred() -> None:
    text = block("launch", ("count", "3"), ("when", "soon"), ("ok", "False"), ("list", "[1, 2]"))
    args = {"count": 3, "when": "soon", "ok": False, "list": [1, 2]}
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "launch", args),)), MARKERS)


def test_empty_arguments() -> None:
    text = "<tool_call><function=ping></function></tool_call>"
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "ping", {}),)), MARKERS)


def test_missing_inner_fences_are_tolerated() -> None:
    text = "<tool_call>\n<function=ping>\n<parameter=a>\n1\n<parameter=b>\nx\n</tool_call>"
    expected = ParseResult("", "", (call(0, "ping", {"a": 1, "b": "x"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


@pytest.mark.parametrize(
    "body",
    [
        "just prose",
        '{"name": "ping", "arguments": {}}',
        "<function=>\n</function>",
        "<function=ping>\nstray text\n</function>",
        "<function=ping>\n<parameter=>\n1\n</parameter>\n</function>",
        "",
    ],
)
def test_malformed_block_is_returned_as_text(body: str) -> None:
    text = "Before " + f"<tool_call>\n{body}\n</tool_call>"
    assert_chunk_invariant(make, text, ParseResult(text))


def test_malformed_then_valid() -> None:
    bad = "<tool_call>oops</tool_call>"
    text = bad + "\n" + block("ping", ("k", "v"))
    assert_chunk_invariant(make, text, ParseResult(bad, "", (call(0, "ping", {"k": "v"}),)))


def test_unterminated_block_at_end() -> None:
    done = "ok\n<tool_call>\n<function=ping>\n<parameter=n>\n5\n</parameter>\n</function>\n"
    expected = ParseResult("ok", "", (call(0, "ping", {"n": 5}),))
    assert_chunk_invariant(make, done, expected, MARKERS)
    cut = "ok <tool_call>\n<function=ping>\n<parameter=n>\n5"
    assert_chunk_invariant(make, cut, ParseResult(cut))


def test_overflowing_number_stays_text() -> None:
    text = block("plan_trip", ("budget", "1e400"), ("x", "-1e999"))
    args = {"budget": "1e400", "x": "-1e999"}
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plan_trip", args),)))
