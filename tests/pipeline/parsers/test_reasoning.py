"""Reasoning formats: every one chunk-invariant, markers never in content."""

from __future__ import annotations

import pytest

from smg.pipeline.parsers import REASONING_PARSERS, ParseResult, reasoning_parser

from .chunking import assert_chunk_invariant

THINK = ("<think>", "</think>")
KIMI = ("\u25c1think\u25b7", "\u25c1/think\u25b7")
COHERE = ("<|START_THINKING|>", "<|END_THINKING|>")

# name -> (start marker, end marker, starts inside the block)
FORMATS = {
    "deepseek_r1": (*THINK, True),
    "qwen3": (*THINK, False),
    "qwen3_thinking": (*THINK, True),
    "kimi": (*KIMI, False),
    "glm45": (*THINK, False),
    "step3": (*THINK, True),
    "minimax": (*THINK, True),
    "nano_v3": (*THINK, True),
    "cohere_cmd": (*COHERE, False),
}


def maker(name: str, start_in_reasoning: bool = False):
    return lambda: reasoning_parser(name, start_in_reasoning=start_in_reasoning)


def test_every_registered_format_is_covered() -> None:
    assert set(REASONING_PARSERS) == {*FORMATS, "passthrough"}


@pytest.mark.parametrize("name", FORMATS)
def test_explicit_block_then_answer(name: str) -> None:
    start, end, _ = FORMATS[name]
    text = f"{start}\nThe hen lays eggs; count them twice.\n{end}\n\nThere are 7 eggs."
    expected = ParseResult("There are 7 eggs.", "The hen lays eggs; count them twice.")
    assert_chunk_invariant(maker(name), text, expected, markers=(start, end))


@pytest.mark.parametrize("name", FORMATS)
def test_implicit_start(name: str) -> None:
    """No start marker: formats that start inside read reasoning, the others read content."""
    start, end, inside = FORMATS[name]
    text = f"weighing options {end} pick B"
    if inside:
        expected = ParseResult("pick B", "weighing options")
    else:
        expected = ParseResult(text, "")  # end marker outside a block is plain text
    assert_chunk_invariant(maker(name), text, expected, markers=(start,))


@pytest.mark.parametrize("name", FORMATS)
def test_start_in_reasoning_flag(name: str) -> None:
    start, end, _ = FORMATS[name]
    text = f"the template opened it{end}Done."
    expected = ParseResult("Done.", "the template opened it")
    assert_chunk_invariant(maker(name, True), text, expected, markers=(start, end))


@pytest.mark.parametrize("name", FORMATS)
def test_unterminated_reasoning_stays_reasoning(name: str) -> None:
    start, end, _ = FORMATS[name]
    text = f"{start}still thinking about \u00e9t\u00e9 \U0001f914 \n"
    expected = ParseResult("", "still thinking about \u00e9t\u00e9 \U0001f914")
    assert_chunk_invariant(maker(name), text, expected, markers=(start, end))


@pytest.mark.parametrize("name", FORMATS)
def test_no_markers_at_all(name: str) -> None:
    _, _, inside = FORMATS[name]
    text = "  Plain answer < with > brackets </ and <| odd |> bits.\n"
    expected = ParseResult("", text.strip()) if inside else ParseResult(text, "")
    assert_chunk_invariant(maker(name), text, expected)


@pytest.mark.parametrize("name", FORMATS)
def test_partial_marker_lookalikes_are_text(name: str) -> None:
    start, end, _ = FORMATS[name]
    fake = end[:-1] + " x"  # a prefix of the end marker that then diverges
    text = f"{start}a {fake} b{end}c {start[:-1]}"
    expected = ParseResult(f"c {start[:-1]}", f"a {fake} b")
    assert_chunk_invariant(maker(name), text, expected)


def test_redundant_start_tolerated_when_starting_inside() -> None:
    text = "  <think>  deep thought</think>answer"
    assert_chunk_invariant(
        maker("deepseek_r1"), text, ParseResult("answer", "deep thought"), markers=THINK
    )
    assert_chunk_invariant(
        maker("qwen3", True), text, ParseResult("answer", "deep thought"), markers=THINK
    )


def test_start_marker_later_in_reasoning_is_reasoning() -> None:
    text = "first <think> nested</think>out"
    expected = ParseResult("out", "first <think> nested")
    assert_chunk_invariant(maker("deepseek_r1"), text, expected)


def test_text_before_block_keeps_its_space() -> None:
    text = "Intro <think>why</think> Result"
    assert_chunk_invariant(maker("qwen3"), text, ParseResult("Intro Result", "why"), THINK)


def test_only_one_block_per_response() -> None:
    text = "<think>a</think>b<think>c</think>"
    expected = ParseResult("b<think>c</think>", "a")
    assert_chunk_invariant(maker("qwen3"), text, expected)


def test_empty_block_and_empty_input() -> None:
    assert_chunk_invariant(maker("qwen3"), "<think></think>x", ParseResult("x", ""), THINK)
    assert_chunk_invariant(maker("deepseek_r1"), "", ParseResult("", ""))
    assert_chunk_invariant(maker("qwen3"), "", ParseResult("", ""))


def test_passthrough_and_unknown_names() -> None:
    text = "<think>kept</think> as is "
    for name in ("passthrough", "no-such-format"):
        assert_chunk_invariant(maker(name, True), text, ParseResult(text, ""))


def test_markers_split_across_chunks_stream_early() -> None:
    parser = reasoning_parser("qwen3")
    assert parser.feed("Hello <th").normal_text == "Hello"  # the space waits: it may touch <think>
    assert parser.feed("ink>ab").reasoning_text == "ab"
    assert parser.feed("c </thi").reasoning_text == "c"
    delta = parser.feed("nk> ok")
    assert (delta.normal_text, delta.reasoning_text) == ("ok", "")
    assert not parser.finish()
