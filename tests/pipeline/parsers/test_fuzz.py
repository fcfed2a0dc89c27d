"""Seeded fuzz: random marker soup never raises and never depends on chunking."""

from __future__ import annotations

import random

import pytest

from smg.pipeline.parsers import REASONING_PARSERS, TOOL_PARSERS, reasoning_parser, tool_parser

from .chunking import chunkings, run_chunks

PIECES = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<|python_tag|>", "\u25c1/think\u25b7",
    "<|END_THINKING|>", "{", "}", "[", "]", '"name"', '"arguments"', '"parameters"', ":", ",",
    ";", '"f"', '"\\""', "\\", '"', " ", "\n", "x", "\u00e9", "1", "{}", "<", "</", "<tool",
]  # fmt: skip

MAKERS = [(f"tool:{n}", lambda n=n: tool_parser(n)) for n in TOOL_PARSERS] + [
    (f"reasoning:{n}", lambda n=n: reasoning_parser(n)) for n in REASONING_PARSERS
]


@pytest.mark.parametrize(("label", "make"), MAKERS, ids=[m[0] for m in MAKERS])
def test_random_soup_is_chunk_invariant(label: str, make) -> None:
    rng = random.Random(label)
    for _ in range(60):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 25)))
        whole = make().parse(text)
        for chunks in list(chunkings(text, seeds=3)):
            assert run_chunks(make, chunks) == whole, (text, chunks)
