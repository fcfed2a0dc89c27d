"""StopMatcher: table tests, then chunk invariance (whole, per character, random chunks)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg.pipeline.stop import StopMatcher


def run(stops: list[str], chunks: list[str], include: bool = False) -> tuple[str, str | None]:
    m = StopMatcher(stops, include_stop=include)
    out: list[str] = []
    for chunk in chunks:
        emit, stopped, matched = m.feed(chunk)
        out.append(emit)
        if stopped:
            assert matched == m.matched
            return "".join(out), matched
    out.append(m.finish())
    return "".join(out), None


TABLE = [
    # stops, text, include_stop, emitted, matched
    ([], "hello world", False, "hello world", None),
    (["\n\n"], "line one\n\nline two", False, "line one", "\n\n"),
    (["\n\n"], "line one\n\nline two", True, "line one\n\n", "\n\n"),
    (["STOP"], "no match here, ST", False, "no match here, ST", None),
    (["STOP"], "STOP at start", False, "", "STOP"),
    (["ab", "abc"], "xxabc", False, "xx", "ab"),  # "ab" completes first
    (["abc", "bc"], "xabc", False, "x", "abc"),  # both end at 4: the longest wins ...
    (["bc", "abc"], "xabc", True, "xabc", "abc"),  # ... whatever the order given
    (["world", "o w"], "hello world", False, "hell", "o w"),  # "o w" ends before "world"
    (["</s>"], "a </ b </s> c", False, "a </ b ", "</s>"),
    (["aa"], "baaa", False, "b", "aa"),
    (["你好"], "说你好吗", False, "说", "你好"),
    (["🎉"], "party 🎉 time", True, "party 🎉", "🎉"),
    (["", "x"], "abc", False, "abc", None),  # empty stop strings are ignored
]


@pytest.mark.parametrize(("stops", "text", "include", "emitted", "matched"), TABLE)
def test_table(
    stops: list[str], text: str, include: bool, emitted: str, matched: str | None
) -> None:
    assert run(stops, [text], include) == (emitted, matched)
    assert run(stops, list(text), include) == (emitted, matched)


def test_holds_back_partial_stop_then_releases_it() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("abc ST") == ("abc ", False, None)
    assert m.feed("O") == ("", False, None)
    assert m.feed("P!") == ("", True, "STOP")
    assert m.feed("more") == ("", True, "STOP")  # nothing after a stop
    assert m.finish() == ""


def test_false_alarm_releases_held_text() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("ST") == ("", False, None)
    assert m.feed("OX") == ("STOX", False, None)
    assert m.feed("STO") == ("", False, None)
    assert m.finish() == "STO"


def test_overlapping_prefix_hold() -> None:
    # "aab" after "aa": the held suffix must be "aa" (a prefix of "aab"), not just "a"
    m = StopMatcher(["aab"])
    assert m.feed("xaa") == ("x", False, None)
    assert m.feed("aab") == ("aa", True, "aab")


def chunkings(text: str, rng: random.Random) -> list[list[str]]:
    ways = [[text], list(text)]
    for _ in range(3):
        chunks, i = [], 0
        while i < len(text):
            n = rng.randint(1, 5)
            chunks.append(text[i : i + n])
            i += n
        ways.append(chunks)
    return ways


ALPHABET = "ab\n</s>xé🎉"


@settings(max_examples=300, deadline=None)
@given(
    stops=st.lists(st.text(ALPHABET, min_size=1, max_size=4), max_size=4),
    text=st.text(ALPHABET, max_size=40),
    include=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_chunk_invariance(stops: list[str], text: str, include: bool, seed: int) -> None:
    results = {run(stops, c, include) for c in chunkings(text, random.Random(seed))}
    assert len(results) == 1
    emitted, matched = results.pop()
    if matched is None:
        assert emitted == text
        assert not any(s in text for s in stops)
        return
    # what is emitted is a prefix of the text, and no stop completes before the match
    assert text.startswith(emitted)
    cut = len(emitted) - (len(matched) if include else 0)
    assert text[cut:].startswith(matched)
    earlier = text[: cut + len(matched) - 1]
    assert not any(s in earlier for s in stops)
