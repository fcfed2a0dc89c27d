"""MiniMax-M2 tool calls (`minimax_m2`)."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call
from .xml_tools import NESTED, STOPS, TOOLS

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
MARKERS = (OPEN, CLOSE, "<invoke", "<parameter")


def make():
    return tool_parser("minimax_m2", TOOLS)


def invoke(name: str, *params: tuple[str, str]) -> str:
    inner = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
    return f'<invoke name="{name}">\n{inner}</invoke>\n'


def wrap(*invokes: str) -> str:
    return OPEN + "\n" + "".join(invokes) + CLOSE


def test_no_call() -> None:
    text = 'An <invoke name="x"> tag outside the wrapper is plain text.'
    assert_chunk_invariant(make, text, ParseResult(text), (OPEN,))


def test_one_call_with_text_before() -> None:
    text = "Booking now.\n" + wrap(invoke("plan_trip", ("city", "Kyoto"), ("nights", "5")))
    expected = ParseResult(
        "Booking now.", "", (call(0, "plan_trip", {"city": "Kyoto", "nights": 5}),)
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_parallel_invokes_and_several_wrappers() -> None:
    text = (
        wrap(invoke("ping", ("host", "a")), invoke("ping", ("host", "b")))
        + " and "
        + wrap(invoke("plan_trip", ("rooms", "2")))
    )
    expected = ParseResult(
        "and",
        "",
        (
            call(0, "ping", {"host": "a"}),
            call(1, "ping", {"host": "b"}),
            call(2, "plan_trip", {"rooms": 2}),
        ),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_typing_by_schema_raw_strings_and_entities() -> None:
    text = wrap(
        invoke(
            "plan_trip",
            ("zip", "0042"),
            ("city", ' A &amp; B &lt;3 "q" '),
            ("nights", "6"),
            ("budget", "19.99"),
            ("refundable", "true"),
            ("note", "false"),
        )
    )
    args = {
        "zip": "0042",
        "city": ' A & B <3 "q" ',
        "nights": 6,
        "budget": 19.99,
        "refundable": True,
        "note": "false",
    }
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plan_trip", args),)))


def test_nested_object_and_array() -> None:
    text = wrap(
        invoke(
            "plan_trip",
            ("prefs", json.dumps(NESTED)),
            ("stops", json.dumps(STOPS, ensure_ascii=False)),
        )
    )
    expected = ParseResult("", "", (call(0, "plan_trip", {"prefs": NESTED, "stops": STOPS}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_and_escaped_quotes_unknown_tool() -> None:
    text = wrap(invoke("translate", ("text", 'Grüße "Welt" \\ 你好'), ("n", "4")))
    args = {"text": 'Grüße "Welt" \\ 你好', "n": 4}
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "translate", args),)))


def test_empty_arguments() -> None:
    text = wrap('<invoke name="ping"></invoke>')
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "ping", {}),)), MARKERS)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "no invoke at all",
        '<invoke name="">\n</invoke>',
        '<invoke name="ping">\n<parameter name="a">1\n</invoke>',  # parameter not closed
        '<invoke name="ping">\n</invoke>\nleftover',
        '<invoke name="ping">',
    ],
)
def test_malformed_block_is_returned_as_text(body: str) -> None:
    text = f"Hmm {OPEN}{body}{CLOSE}"
    assert_chunk_invariant(make, text, ParseResult(text))


def test_unterminated_wrapper_at_end() -> None:
    done = "ok " + OPEN + invoke("ping", ("a", "1"))
    assert_chunk_invariant(make, done, ParseResult("ok", "", (call(0, "ping", {"a": 1}),)))
    cut = "ok " + OPEN + '<invoke name="ping">\n<parameter name="a">1'
    assert_chunk_invariant(make, cut, ParseResult(cut))
