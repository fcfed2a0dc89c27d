"""Kimi K2 `functions.NAME:IDX` call sections."""

from __future__ import annotations

import json

import pytest

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call

TOOLS = [{"type": "function", "function": {"name": "brew", "parameters": {}}}]
BEGIN, END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL, ARGS, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
MARKERS = (BEGIN, END, CALL, ARGS, CALL_END)


def make():
    return tool_parser("kimik2", TOOLS)


def one(header: str, args: str) -> str:
    return f"{CALL}{header}{ARGS}{args}{CALL_END}"


def section(*calls: str) -> str:
    return BEGIN + "".join(calls) + END


def test_no_call() -> None:
    text = "Tea needs 3 minutes.\nfunctions.brew:0 is just text <|other|>."
    assert_chunk_invariant(make, text, ParseResult(text), MARKERS)


def test_one_call() -> None:
    text = section(one("functions.brew:0", '{"leaf": "sencha"}'))
    expected = ParseResult("", "", (call(0, "brew", {"leaf": "sencha"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_several_calls_and_text_around() -> None:
    text = (
        "Two pots.\n"
        + section(
            one("functions.brew:0", '{"leaf": "oolong"}'),
            "\n" + one(" functions.brew:1 ", ' {"leaf": "puer"} '),
            one("steep-time.v2:2", "{}"),  # no `functions.` prefix; `-` and `.` in the name
        )
        + "\nEnjoy."
    )
    expected = ParseResult(
        "Two pots.Enjoy.",
        "",
        (
            call(0, "brew", {"leaf": "oolong"}),
            call(1, "brew", {"leaf": "puer"}),
            call(2, "steep-time.v2", {}),
        ),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_escapes_nesting_and_empty_arguments() -> None:
    args = {"note": 'a "\u00fcber" cup \\ \u8336 \U0001f375', "steps": [{"t": [60, 90]}, None]}
    text = section(one("functions.brew:0", json.dumps(args)), one("functions.brew:1", "{}"))
    expected = ParseResult("", "", (call(0, "brew", args), call(1, "brew", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unknown_tool_is_still_a_call() -> None:
    text = section(one("functions.boil_ocean:0", '{"depth": 3}'))
    expected = ParseResult("", "", (call(0, "boil_ocean", {"depth": 3}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_ids_come_from_the_id_factory() -> None:
    parser = tool_parser("kimik2", id_factory=lambda i: f"call_r9_{i}")
    result = parser.parse(section(one("functions.brew:7", "{}")))
    assert [(c.id, c.name) for c in result.calls] == [("call_r9_0", "brew")]


@pytest.mark.parametrize(
    "bad",
    [
        one("functions.brew", "{}"),  # no index
        one("functions.brew:0", '{"leaf": '),
        one("functions.brew:0", '"tea"'),  # arguments not an object
        f"{CALL}functions.brew:0{{}}{CALL_END}",  # no argument marker
    ],
)
def test_malformed_is_returned_as_text(bad: str) -> None:
    text = "Look: " + section(bad)
    assert_chunk_invariant(make, text, ParseResult(text))


def test_malformed_next_to_good_and_cut_off() -> None:
    bad = one("functions.brew:1", "{nope}")
    text = section(one("functions.brew:0", '{"n": 1}'), bad)
    expected = ParseResult(bad, "", (call(0, "brew", {"n": 1}),))
    assert_chunk_invariant(make, text, expected)
    cut = "ok " + BEGIN + CALL + "functions.br"
    assert_chunk_invariant(make, cut, ParseResult(cut))
