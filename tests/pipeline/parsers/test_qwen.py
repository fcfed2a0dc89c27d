"""Qwen `<tool_call>` blocks."""

from __future__ import annotations

from smg.pipeline.parsers import ParseResult, tool_parser

from .chunking import assert_chunk_invariant, call

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
MARKERS = ("<tool_call>", "</tool_call>")


def make():
    return tool_parser("qwen", TOOLS)


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_no_call() -> None:
    text = "Tides follow the moon.\nNo tools needed <tool> here.\n"
    assert_chunk_invariant(make, text, ParseResult(text), MARKERS)


def test_one_call() -> None:
    text = block('{"name": "lookup", "arguments": {"term": "neap tide"}}')
    expected = ParseResult("", "", (call(0, "lookup", {"term": "neap tide"}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_text_before_between_and_after_calls() -> None:
    text = (
        "Checking two sources.\n"
        + block('{"name": "lookup", "arguments": {"src": "a"}}')
        + "\nand\n"
        + block('{"arguments": {"src": "b"}, "name": "lookup"}')
        + "\n\nDone."
    )
    expected = ParseResult(
        "Checking two sources.andDone.",
        "",
        (call(0, "lookup", {"src": "a"}), call(1, "lookup", {"src": "b"})),
    )
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unicode_escapes_nesting_and_compact_json() -> None:
    args = {
        "q": 'say "h\u00e9llo" \\ \u6f6e\u6c50 \U0001f30a',
        "filter": {"tags": ["a", {"deep": [1, 2.5, None, True]}], "empty": {}},
    }
    body = (
        '{"name":"lookup","arguments":{"q":"say \\"h\\u00e9llo\\" \\\\ \u6f6e\u6c50 \U0001f30a",'
        '"filter":{"tags":["a",{"deep":[1,2.5,null,true]}],"empty":{}}}}'
    )
    expected = ParseResult("", "", (call(0, "lookup", args),))
    assert_chunk_invariant(make, block(body), expected, MARKERS)


def test_empty_and_missing_arguments() -> None:
    text = block('{"name": "lookup", "arguments": {}}') + block('{"name": "lookup"}')
    expected = ParseResult("", "", (call(0, "lookup", {}), call(1, "lookup", {})))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_unknown_tool_is_still_a_call() -> None:
    text = block('{"name": "launch_rocket", "arguments": {"count": 3}}')
    expected = ParseResult("", "", (call(0, "launch_rocket", {"count": 3}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_malformed_blocks_are_returned_as_text() -> None:
    for body in (
        '{"name": "lookup", "arguments": {"x": 1}',  # unclosed
        '{"arguments": {}}',  # no name
        '{"name": "lookup", "arguments": [1, 2]}',  # arguments not an object
        '{"name": "lookup", "arguments": NaN}',
        "just words",
    ):
        text = "Before " + block(body)
        assert_chunk_invariant(make, text, ParseResult(text))


def test_malformed_then_valid() -> None:
    bad = block("{oops}")
    text = bad + "\n" + block('{"name": "lookup", "arguments": {"k": "v"}}')
    expected = ParseResult(bad, "", (call(0, "lookup", {"k": "v"}),))
    assert_chunk_invariant(make, text, expected)


def test_unterminated_block_at_end() -> None:
    complete = '<tool_call>\n{"name": "lookup", "arguments": {"n": 1}}\n'
    expected = ParseResult("ok", "", (call(0, "lookup", {"n": 1}),))
    assert_chunk_invariant(make, "ok\n" + complete, expected, MARKERS)
    cut = 'ok <tool_call>{"name": "lookup", "argu'
    assert_chunk_invariant(make, cut, ParseResult(cut))


def test_string_arguments_are_decoded() -> None:
    text = block('{"name": "lookup", "arguments": "{\\"a\\": [1]}"}')
    expected = ParseResult("", "", (call(0, "lookup", {"a": [1]}),))
    assert_chunk_invariant(make, text, expected, MARKERS)


def test_call_streams_as_one_delta_with_id_and_name() -> None:
    parser = tool_parser("qwen", id_factory=lambda i: f"call_req7_{i}")
    assert parser.feed("Hi <tool_call>").normal_text == "Hi"
    assert not parser.feed('{"name": "lookup", "arguments": {"a": 1}}')
    delta = parser.feed("</tool_call>")
    assert [(c.index, c.id, c.name, c.arguments) for c in delta.calls] == [
        (0, "call_req7_0", "lookup", '{"a": 1}')
    ]
