"""DeepSeek V3 (fenced JSON) and V3.1 (bare JSON) call sections."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser
from smg.pipeline.parsers.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP

from .chunking import assert_chunk_invariant, call

TOOLS = [{"type": "function", "function": {"name": "orbit", "parameters": {}}}]
MARKERS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)


def v3_call(name: str, args: str) -> str:
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{args}\n```{CALL_END}"


def v31_call(name: str, args: str) -> str:
    return f"{CALL_BEGIN}{name}{SEP}{args}{CALL_END}"


FORMATS = [("deepseek", v3_call), ("deepseek31", v31_call)]


def section(*calls: str) -> str:
    return CALLS_BEGIN + "\n".join(calls) + CALLS_END


@pytest.fixture(params=FORMATS, ids=[f[0] for f in FORMATS])
def fmt(request):
    name, make_call = request.param
    return (lambda: tool_parser(name, TOOLS)), make_call


def test_no_call(fmt) -> None:
    make, _ = fmt
    text = "Orbits are ellipses.\n```json\n{}\n```\n<|not a marker|>"
    assert_chunk_invariant(make, text, ParseResult(text), MARKERS)


def test_one_call(fmt) -> None:
    make, mk = fmt
    text = section(mk("orbit", '{"body": "Io"}'))
    expected = ParseResult("", "", (call(0, "orbit", {"body": "Io"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_with_text_around(fmt) -> None:
    make, mk = fmt
    text = (
        "Computing both.\n\n"
        + section(mk("orbit", '{"body": "Io"}'), mk("orbit", '{"body": "Europa"}'))
        + "\nDone."
    )
    expected = ParseResult(
        "Computing both.Done.",
        "",
        (call(0, "orbit", {"body": "Io"}), call(1, "orbit", {"body": "Europa"})),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_escapes_nesting_and_empty_arguments(fmt) -> None:
    make, mk = fmt
    args = {"label": 'moon "\u00e9t\u00e9" \\ \u6708 \U0001f315', "path": [[0, 1.5], {"k": None}]}
    text = section(mk("orbit", json.dumps(args)), mk("orbit", "{}"))
    expected = ParseResult("", "", (call(0, "orbit", args), call(1, "orbit", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unknown_tool_is_still_a_call(fmt) -> None:
    make, mk = fmt
    text = section(mk("launch_probe", '{"target": "Titan"}'))
    expected = ParseResult("", "", (call(0, "launch_probe", {"target": "Titan"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_malformed_section_is_returned_as_text(fmt) -> None:
    make, mk = fmt
    for bad in (
        mk("orbit", '{"body": '),
        mk("orbit", "[1, 2]"),
        mk("", "{}"),
        mk("two words", "{}"),
    ):
        text = "See: " + section(bad) + " end"
        assert_chunk_invariant(make, text, ParseResult(text))
    text = "cut " + CALLS_BEGIN + CALL_BEGIN + "orb"
    assert_chunk_invariant(make, text, ParseResult(text))


def test_malformed_call_next_to_a_good_one(fmt) -> None:
    make, mk = fmt
    bad = mk("orbit", "{oops}")
    text = section(mk("orbit", '{"n": 1}'), bad)
    expected = ParseResult("\n" + bad, "", (call(0, "orbit", {"n": 1}),))
    assert_chunk_invariant(make, text, expected)


def test_unterminated_call_at_end_still_counts(fmt) -> None:
    make, mk = fmt
    text = "Go " + section(mk("orbit", '{"n": 2}'))[: -len(CALL_END + CALLS_END)]
    expected = ParseResult("Go", "", (call(0, "orbit", {"n": 2}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_v3_requires_function_type_and_v31_has_no_fence() -> None:
    text = section(f"{CALL_BEGIN}method{SEP}orbit\n```json\n{{}}\n```{CALL_END}")
    assert_chunk_invariant(lambda: tool_parser("deepseek"), text, ParseResult(text))
    fenced = section(v31_call("orbit", '```json\n{"n": 3}\n```'))
    expected = ParseResult("", "", (call(0, "orbit", {"n": 3}),))
    assert_chunk_invariant(lambda: tool_parser("deepseek31"), fenced, expected, MARKERS)
