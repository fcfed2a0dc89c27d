"""StopMatcher: table tests, then chunk invariance (whole, per character, random chunks)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.stop import StopMatcher, compile_stops


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


def reference(stops: list[str], text: str, include: bool) -> tuple[str, str | None]:
    """Brute force: at each end position, the longest stop string ending there, first end wins."""
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if s and text[:end].endswith(s)]
        if ending:
            stop = max(ending, key=len)
            return (text[:end] if include else text[: end - len(stop)]), stop
    return text, None


@settings(max_examples=examples(400), deadline=None)
@given(
    stops=st.lists(st.text("ab", min_size=1, max_size=12), min_size=1, max_size=6),
    text=st.text("abc", max_size=80),
    include=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_the_brute_force_reference(
    stops: list[str], text: str, include: bool, seed: int
) -> None:
    """A small alphabet makes overlapping, nested and repeated stop strings common."""
    expected = reference(stops, text, include)
    for chunks in chunkings(text, random.Random(seed)):
        assert run(stops, chunks, include) == expected


@settings(max_examples=examples(200), deadline=None)
@given(
    stops=st.lists(st.text(ALPHABET, min_size=1, max_size=6), min_size=1, max_size=4),
    text=st.text(ALPHABET, max_size=60),
    seed=st.integers(0, 2**16),
)
def test_held_back_text_is_bounded_by_the_longest_stop(
    stops: list[str], text: str, seed: int
) -> None:
    m = StopMatcher(stops)
    out: list[str] = []
    fed = ""
    for chunk in chunkings(text, random.Random(seed))[-1]:
        emit, stopped, _ = m.feed(chunk)
        out.append(emit)
        fed += chunk
        if stopped:
            return
        held = len(fed) - len("".join(out))
        assert held <= max(map(len, stops)) - 1
        assert fed.startswith("".join(out))


def test_one_automaton_serves_several_choices() -> None:
    auto = compile_stops(["END", "</s>"])
    assert auto is not None and auto is compile_stops(["END", "</s>"])  # small sets: cached
    a, b = StopMatcher(auto), StopMatcher(auto)
    assert a.feed("xx EN") == ("xx ", False, None)
    assert b.feed("yy </s") == ("yy ", False, None)
    assert a.feed("D zz") == ("", True, "END")
    assert b.feed(">") == ("", True, "</s>")
    assert compile_stops([]) is None and compile_stops([""]) is None
    big = ["x" * 300]
    assert compile_stops(big) is not compile_stops(big)  # large sets are not kept


def test_a_long_partial_match_is_held_then_released() -> None:
    stop = "a" * 1000 + "Z"
    m = StopMatcher([stop])
    out = [m.feed("a" * 7) for _ in range(300)]  # 2100 'a's: only the last 1000 are held
    assert "".join(e for e, _, _ in out) == "a" * 1100
    assert m.feed("aZ!") == ("a", True, stop)  # the 1001st last "a" starts nothing
    m = StopMatcher([stop])
    m.feed("a" * 2000)
    assert m.feed("b") == ("a" * 1000 + "b", False, None)
    assert m.finish() == ""


@settings(max_examples=examples(300), deadline=None)
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
