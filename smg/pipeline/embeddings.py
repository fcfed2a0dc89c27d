"""OpenAI embeddings over gRPC engines: the request's inputs and the answer's body. Pure.

An engine's Embed call takes one tokenized input and returns one vector, so a request of N inputs
is N calls; this module reads the inputs (`embedding_inputs`: a string, an array of strings, one
array of token ids, or an array of token-id arrays, as OpenAI accepts them) and builds the answer
in OpenAI's shape (`embeddings_body`: `object: list`, one `embedding` item per input in input
order, `usage` with prompt and total tokens; floats, or base64 of little-endian float32 as the
`openai` SDK asks by default). A client's mistake is an `ApiError` 400 here, before any engine
is asked.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any

from smg import errors

ENCODINGS = ("float", "base64")
MAX_INPUTS = 2048  # OpenAI's limit on the array of inputs
TOKEN_ID_MAX = 2**32 - 1  # the contract's input_ids are uint32

Input = str | list[int]


def embedding_inputs(body: dict[str, Any]) -> list[Input]:
    """The inputs to embed, in order: each a string (to tokenize) or token ids (as they are)."""
    value = body.get("input")
    if value is None:
        raise errors.missing_field("input")
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in ENCODINGS:
        raise errors.invalid_value(
            "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
        )
    if body.get("dimensions") is not None:
        raise errors.invalid_request(
            "'dimensions' is not supported by gRPC engines: they return the model's own size",
            param="dimensions",
            code="unsupported_parameter",
        )
    if isinstance(value, str):
        return [_text(value, "input")]
    if not isinstance(value, list):
        raise errors.invalid_type(
            "'input' must be a string, an array of strings, or token ids", param="input"
        )
    if not value:
        raise errors.empty_array("input", "input")
    if len(value) > MAX_INPUTS:
        raise errors.invalid_value(f"'input' holds more than {MAX_INPUTS} items", param="input")
    if all(type(t) is int for t in value):
        return [_ids(value, "input")]
    out: list[Input] = []
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if isinstance(item, str):
            out.append(_text(item, param))
        elif isinstance(item, list) and all(type(t) is int for t in item):
            out.append(_ids(item, param))
        else:
            raise errors.invalid_type(
                f"'{param}' must be a string or an array of token ids", param=param
            )
    return out


def _text(value: str, param: str) -> str:
    if not value:
        raise errors.invalid_request(
            f"'{param}' is empty: there is nothing to embed", param=param, code="empty_input"
        )
    return value


def _ids(value: list[int], param: str) -> list[int]:
    if not value:
        raise errors.invalid_request(
            f"'{param}' is empty: there is nothing to embed", param=param, code="empty_input"
        )
    if any(t < 0 or t > TOKEN_ID_MAX for t in value):
        raise errors.invalid_value(f"'{param}' holds a token id out of range", param=param)
    return list(value)


def routing_text(inputs: Sequence[Input]) -> str:
    """The text a text-keyed policy sees: the string inputs, joined (as the Rust gateway)."""
    return " ".join(i for i in inputs if isinstance(i, str))


def embeddings_body(
    model: str, vectors: Sequence[Sequence[float]], prompt_tokens: int, encoding: str | None
) -> dict[str, Any]:
    """The OpenAI answer for `vectors` (one per input, in input order)."""
    data = []
    for index, vec in enumerate(vectors):
        value: Any = list(vec)
        if encoding == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
