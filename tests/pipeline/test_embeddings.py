"""The embeddings core: which inputs are accepted as what, and the answer's shape."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from smg.errors import ApiError
from smg.pipeline.embeddings import embedding_inputs, embeddings_body, routing_text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hi", ["hi"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1], [2, 3]], [[1], [2, 3]]),
        (["a", [4]], ["a", [4]]),
    ],
)
def test_inputs(value: Any, expected: list[Any]) -> None:
    assert embedding_inputs({"input": value}) == expected


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({}, "missing_required_parameter", "input"),
        ({"input": ""}, "empty_input", "input"),
        ({"input": []}, "empty_array", "input"),
        ({"input": ["a", ""]}, "empty_input", "input[1]"),
        ({"input": [[1], []]}, "empty_input", "input[1]"),
        ({"input": [True]}, "invalid_type", "input[0]"),
        ({"input": [1.5]}, "invalid_type", "input[0]"),
        ({"input": {"a": 1}}, "invalid_type", "input"),
        ({"input": [2**32]}, "invalid_value", "input"),
        ({"input": ["x"] * 2049}, "invalid_value", "input"),
        ({"input": "x", "encoding_format": "int8"}, "invalid_value", "encoding_format"),
        ({"input": "x", "dimensions": 3}, "unsupported_parameter", "dimensions"),
    ],
)
def test_mistakes_are_400(body: dict[str, Any], code: str, param: str) -> None:
    with pytest.raises(ApiError) as err:
        embedding_inputs(body)
    assert (err.value.status, err.value.code, err.value.param) == (400, code, param)


def test_body_float_and_base64() -> None:
    vecs = [[0.5, -0.25], [1.0, 0.0]]
    body = embeddings_body("m", vecs, 7, None)
    assert body == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    b64 = embeddings_body("m", vecs, 7, "base64")["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(b64)) == (0.5, -0.25)


def test_routing_text_joins_the_strings() -> None:
    assert routing_text(["a", [1], "b"]) == "a b"
