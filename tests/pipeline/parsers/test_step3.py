"""Step-3 tool calls (`step3`); markers use U+FF5C."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call
from .xml_tools import NESTED, STOPS, TOOLS

BAR = "\uff5c"
CALLS_BEGIN = f"<{BAR}tool_calls_begin{BAR}>"
CALLS_END = f"<{BAR}tool_calls_end{BAR}>"
CALL_BEGIN = f"<{BAR}tool_call_begin{BAR}>"
CALL_END = f"<{BAR}tool_call_end{BAR}>"
SEP = f"<{BAR}tool_sep{BAR}>"
MARKERS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, SEP, "<steptml:")


def make():
    return tool_parser("step3", TOOLS)


def one(name: str, *params: tuple[str, str], kind: str = "function") -> str:
    inner = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in params)
    return (
        f'{CALL_BEGIN}{kind}{SEP}<steptml:invoke name="{name}">{inner}</steptml:invoke>{CALL_END}'
    )


def section(*calls: str) -> str:
    return CALLS_BEGIN + "\n".join(calls) + CALLS_END


def test_no_call() -> None:
    text = f"Bars {BAR} and <steptml:invoke> outside a section are text."
    assert_chunk_invariant(make, text, ParseResult(text), (CALLS_BEGIN,))


def test_one_call_with_text_before() -> None:
    text = "Sure.\n" + section(one("plan_trip", ("city", "Lima"), ("nights", "3")))
    expected = ParseResult("Sure.", "", (call(0, "plan_trip", {"city": "Lima", "nights": 3}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_in_one_section_and_text_after() -> None:
    text = section(one("ping", ("host", "x")), one("ping"), one("plan_trip")) + "\nThat's all."
    expected = ParseResult(
        "That's all.",
        "",
        (
            call(0, "ping", {"host": "x"}),
            call(1, "ping", {}),
            call(2, "plan_trip", {}),
        ),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_typing_by_schema_strings_trimmed() -> None:
    text = section(
        one(
            "plan_trip",
            ("zip", " 1234 "),
            ("city", "\n São Paulo \n"),
            ("nights", "10"),
            ("budget", "0.75"),
            ("refundable", "False"),
            ("note", "42"),
        )
    )
    args = {
        "zip": "1234",
        "city": "São Paulo",
        "nights": 10,
        "budget": 0.75,
        "refundable": False,
        "note": "42",
    }
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "plan_trip", args),)))


def test_nested_object_and_array() -> None:
    text = section(one("plan_trip", ("prefs", json.dumps(NESTED)), ("stops", json.dumps(STOPS))))
    expected = ParseResult("", "", (call(0, "plan_trip", {"prefs": NESTED, "stops": STOPS}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_escaped_quotes_unknown_tool() -> None:
    text = section(one("search_docs", ("q", 'he said \\"日本語\\"'), ("limit", "5")))
    args = {"q": 'he said \\"日本語\\"', "limit": 5}
    assert_chunk_invariant(make, text, ParseResult("", "", (call(0, "search_docs", args),)))


@pytest.mark.parametrize(
    "body",
    [
        "",
        "plain words",
        one("ping", kind="retrieval"),  # only `function` calls exist
        one("ping").replace(CALL_END, ""),
        one("ping") + "trailing",
        f'{CALL_BEGIN}function{SEP}<steptml:invoke name="ping">{CALL_END}',
    ],
)
def test_malformed_section_is_returned_as_text(body: str) -> None:
    text = "Try " + CALLS_BEGIN + body + CALLS_END
    assert_chunk_invariant(make, text, ParseResult(text))


def test_unterminated_section_at_end() -> None:
    done = "go " + CALLS_BEGIN + one("ping", ("n", "1"))
    assert_chunk_invariant(make, done, ParseResult("go", "", (call(0, "ping", {"n": 1}),)))
    cut = "go " + CALLS_BEGIN + CALL_BEGIN + "function" + SEP + '<steptml:invoke name="pi'
    assert_chunk_invariant(make, cut, ParseResult(cut))
