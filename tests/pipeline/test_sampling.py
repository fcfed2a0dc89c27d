"""OpenAI body -> SamplingParams: the mapping of every field and every refusal (code + param),
with the ranges and codes the Rust gateway (smg 1.13.0) answers with."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from smg.errors import ApiError
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.sampling import sampling_from_openai

CHAT, COMP = True, False


def test_defaults() -> None:
    assert sampling_from_openai({}, chat=True) == SamplingParams()
    assert sampling_from_openai({}, chat=False) == SamplingParams()


def test_nulls_mean_not_given() -> None:
    fields = [
        "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens",
        "min_tokens", "stop", "stop_token_ids", "n", "seed", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "logprobs", "top_logprobs", "ignore_eos",
        "skip_special_tokens", "response_format", "logit_bias", "regex", "ebnf",
    ]  # fmt: skip
    assert sampling_from_openai(dict.fromkeys(fields), chat=True) == SamplingParams()


MAPPING: list[tuple[bool, dict[str, Any], dict[str, Any]]] = [
    (CHAT, {"temperature": 0}, {"temperature": 0.0}),
    (CHAT, {"temperature": 2}, {"temperature": 2.0}),
    (CHAT, {"temperature": 0.7}, {"temperature": 0.7}),
    (CHAT, {"top_p": 1}, {"top_p": 1.0}),
    (CHAT, {"top_p": 0.01}, {"top_p": 0.01}),
    (CHAT, {"top_k": -1}, {"top_k": None}),
    (CHAT, {"top_k": 1}, {"top_k": 1}),
    (CHAT, {"top_k": 50}, {"top_k": 50}),
    (CHAT, {"min_p": 0}, {"min_p": 0.0}),
    (CHAT, {"min_p": 1}, {"min_p": 1.0}),
    (CHAT, {"max_tokens": 7}, {"max_tokens": 7}),
    (CHAT, {"max_completion_tokens": 9}, {"max_tokens": 9}),
    (CHAT, {"max_tokens": 5, "max_completion_tokens": 3}, {"max_tokens": 3}),
    (COMP, {"max_tokens": 0}, {"max_tokens": 0}),
    (COMP, {"max_completion_tokens": 3}, {"max_tokens": None}),  # chat's name only
    (CHAT, {"min_tokens": 0}, {"min_tokens": 0}),
    (CHAT, {"min_tokens": 4, "max_tokens": 4}, {"min_tokens": 4, "max_tokens": 4}),
    (CHAT, {"stop": "a"}, {"stop": ("a",)}),
    (CHAT, {"stop": ["a", "b", "c", "d"]}, {"stop": ("a", "b", "c", "d")}),
    (CHAT, {"stop": ["x" * 1024, "é" * 1024]}, {"stop": ("x" * 1024, "é" * 1024)}),  # the cap
    (CHAT, {"stop": []}, {"stop": ()}),
    (CHAT, {"stop_token_ids": [1, 2]}, {"stop_token_ids": (1, 2)}),
    (CHAT, {"n": 10}, {"n": 10}),
    (COMP, {"n": 128}, {"n": 128}),
    (CHAT, {"seed": -5}, {"seed": -5}),
    (CHAT, {"seed": 99999999999}, {"seed": 99999999999}),
    (CHAT, {"presence_penalty": -2}, {"presence_penalty": -2.0}),
    (CHAT, {"frequency_penalty": 2}, {"frequency_penalty": 2.0}),
    (CHAT, {"repetition_penalty": 0}, {"repetition_penalty": 0.0}),
    (CHAT, {"repetition_penalty": 2}, {"repetition_penalty": 2.0}),
    (CHAT, {"logprobs": True}, {"logprobs": 0}),
    (CHAT, {"logprobs": True, "top_logprobs": 20}, {"logprobs": 20}),
    (CHAT, {"logprobs": False}, {"logprobs": None}),
    (COMP, {"logprobs": 0}, {"logprobs": 0}),
    (COMP, {"logprobs": 20}, {"logprobs": 20}),
    (COMP, {"top_logprobs": 3}, {"logprobs": None}),  # not a completions field: ignored
    (CHAT, {"ignore_eos": True}, {"ignore_eos": True}),
    (CHAT, {"skip_special_tokens": False}, {"skip_special_tokens": False}),
    (CHAT, {"include_stop_str_in_output": True}, {"include_stop_str_in_output": True}),
    (CHAT, {"no_stop_trim": True}, {"include_stop_str_in_output": True}),
    (CHAT, {"response_format": {"type": "text"}}, {"json_schema": None, "json_object": False}),
    (CHAT, {"response_format": {"type": "json_object"}}, {"json_object": True}),
    (
        CHAT,
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "strict": True, "schema": {"type": "object"}},
            }
        },
        {"json_schema": '{"type":"object"}', "json_object": False},
    ),
    (COMP, {"response_format": {"type": "json_object"}}, {"json_object": False}),  # ignored
    (COMP, {"json_schema": '{"type":"object"}'}, {"json_schema": '{"type":"object"}'}),
    (CHAT, {"json_schema": "{}"}, {"json_schema": None}),  # a completions extension only
    (CHAT, {"regex": "[a-z]+"}, {"regex": "[a-z]+"}),
    (CHAT, {"ebnf": "root ::= 'a'"}, {"grammar": "root ::= 'a'"}),
    (COMP, {"regex": "a", "response_format": {"type": "json_object"}}, {"regex": "a"}),
    (CHAT, {"logit_bias": {"5": 10, "7": -100.5}}, {"logit_bias": ((5, 10.0), (7, -100.5))}),
    (CHAT, {"logit_bias": {"5": 101}}, {"logit_bias": ((5, 101.0),)}),  # no range, as in Rust
]


@pytest.mark.parametrize(("chat", "body", "expected"), MAPPING, ids=lambda v: repr(v)[:60])
def test_mapping(chat: bool, body: dict[str, Any], expected: dict[str, Any]) -> None:
    params = sampling_from_openai(body, chat=chat)
    for name, value in expected.items():
        assert getattr(params, name) == value, name


ERRORS: list[tuple[bool, dict[str, Any], str, str | None]] = [
    (CHAT, {"temperature": -0.1}, "decimal_below_min_value", "temperature"),
    (CHAT, {"temperature": 2.01}, "decimal_above_max_value", "temperature"),
    (CHAT, {"temperature": "x"}, "invalid_type", "temperature"),
    (CHAT, {"temperature": True}, "invalid_type", "temperature"),
    (CHAT, {"top_p": 0}, "decimal_below_min_value", "top_p"),
    (CHAT, {"top_p": -0.1}, "decimal_below_min_value", "top_p"),
    (CHAT, {"top_p": 1.01}, "decimal_above_max_value", "top_p"),
    (CHAT, {"top_p": "1"}, "invalid_type", "top_p"),
    (CHAT, {"top_k": 0}, "invalid_value", "top_k"),
    (CHAT, {"top_k": -2}, "invalid_value", "top_k"),
    (CHAT, {"top_k": 1.5}, "invalid_type", "top_k"),
    (CHAT, {"min_p": -0.1}, "decimal_below_min_value", "min_p"),
    (CHAT, {"min_p": 1.1}, "decimal_above_max_value", "min_p"),
    (CHAT, {"max_tokens": 0}, "integer_below_min_value", "max_tokens"),
    (CHAT, {"max_tokens": -1}, "integer_below_min_value", "max_tokens"),
    (CHAT, {"max_tokens": 1.5}, "invalid_type", "max_tokens"),
    (CHAT, {"max_tokens": 2.0}, "invalid_type", "max_tokens"),
    (CHAT, {"max_tokens": True}, "invalid_type", "max_tokens"),
    (CHAT, {"max_tokens": 2**32}, "invalid_value", "max_tokens"),
    (CHAT, {"max_completion_tokens": 0}, "integer_below_min_value", "max_completion_tokens"),
    (COMP, {"max_tokens": -1}, "integer_below_min_value", "max_tokens"),
    (CHAT, {"min_tokens": -1}, "integer_below_min_value", "min_tokens"),
    (CHAT, {"min_tokens": 1.5}, "invalid_type", "min_tokens"),
    (CHAT, {"min_tokens": 5, "max_tokens": 2}, "min_tokens_exceeds_max", None),
    (CHAT, {"min_tokens": 5, "max_completion_tokens": 2}, "min_tokens_exceeds_max", None),
    (COMP, {"min_tokens": 5, "max_tokens": 2}, "min_tokens_exceeds_max", None),
    (CHAT, {"n": 0}, "integer_below_min_value", "n"),
    (CHAT, {"n": -1}, "integer_below_min_value", "n"),
    (CHAT, {"n": 11}, "integer_above_max_value", "n"),
    (COMP, {"n": 129}, "integer_above_max_value", "n"),
    (CHAT, {"n": True}, "invalid_type", "n"),
    (CHAT, {"n": 2.0}, "invalid_type", "n"),
    (CHAT, {"seed": 1.5}, "invalid_type", "seed"),
    (CHAT, {"seed": "1"}, "invalid_type", "seed"),
    (CHAT, {"seed": True}, "invalid_type", "seed"),
    (CHAT, {"seed": 2**63}, "invalid_value", "seed"),
    (CHAT, {"presence_penalty": 2.01}, "decimal_above_max_value", "presence_penalty"),
    (CHAT, {"presence_penalty": -2.01}, "decimal_below_min_value", "presence_penalty"),
    (CHAT, {"frequency_penalty": 2.5}, "decimal_above_max_value", "frequency_penalty"),
    (CHAT, {"frequency_penalty": -2.5}, "decimal_below_min_value", "frequency_penalty"),
    (CHAT, {"repetition_penalty": -1}, "decimal_below_min_value", "repetition_penalty"),
    (CHAT, {"repetition_penalty": 2.01}, "decimal_above_max_value", "repetition_penalty"),
    (CHAT, {"stop": ["a", "b", "c", "d", "e"]}, "array_above_max_length", "stop"),
    (COMP, {"stop": ["a", "b", "c", "d", "e"]}, "array_above_max_length", "stop"),
    (CHAT, {"stop": ""}, "invalid_value", "stop"),
    (CHAT, {"stop": "x" * 1025}, "string_above_max_length", "stop"),
    (COMP, {"stop": ["a", "é" * 1025]}, "string_above_max_length", "stop"),
    (CHAT, {"stop": ["a", ""]}, "invalid_value", "stop"),
    (CHAT, {"stop": 5}, "invalid_type", "stop"),
    (CHAT, {"stop": [1]}, "invalid_type", "stop"),
    (CHAT, {"stop": ["a", None]}, "invalid_type", "stop"),
    (CHAT, {"stop": {"a": 1}}, "invalid_type", "stop"),
    (CHAT, {"stop_token_ids": [-1]}, "integer_below_min_value", "stop_token_ids[0]"),
    (CHAT, {"stop_token_ids": [1, 1.5]}, "invalid_type", "stop_token_ids[1]"),
    (CHAT, {"stop_token_ids": "x"}, "invalid_type", "stop_token_ids"),
    (CHAT, {"logprobs": 1}, "invalid_type", "logprobs"),
    (CHAT, {"logprobs": "yes"}, "invalid_type", "logprobs"),
    (CHAT, {"logprobs": True, "top_logprobs": 21}, "integer_above_max_value", "top_logprobs"),
    (CHAT, {"logprobs": True, "top_logprobs": -1}, "integer_below_min_value", "top_logprobs"),
    (CHAT, {"top_logprobs": 5}, "top_logprobs_requires_logprobs", None),
    (CHAT, {"top_logprobs": 0}, "top_logprobs_requires_logprobs", None),
    (CHAT, {"logprobs": False, "top_logprobs": 5}, "top_logprobs_requires_logprobs", None),
    (COMP, {"logprobs": 21}, "integer_above_max_value", "logprobs"),
    (COMP, {"logprobs": -1}, "integer_below_min_value", "logprobs"),
    (COMP, {"logprobs": True}, "invalid_type", "logprobs"),
    (COMP, {"logprobs": 1.5}, "invalid_type", "logprobs"),
    (CHAT, {"ignore_eos": 1}, "invalid_type", "ignore_eos"),
    (CHAT, {"skip_special_tokens": "no"}, "invalid_type", "skip_special_tokens"),
    (CHAT, {"response_format": "json"}, "invalid_type", "response_format"),
    (CHAT, {"response_format": {}}, "missing_required_parameter", "response_format.type"),
    (CHAT, {"response_format": {"type": 5}}, "invalid_type", "response_format.type"),
    (CHAT, {"response_format": {"type": "xml"}}, "invalid_value", "response_format.type"),
    (
        CHAT,
        {"response_format": {"type": "json_schema"}},
        "missing_required_parameter",
        "response_format.json_schema",
    ),
    (
        CHAT,
        {"response_format": {"type": "json_schema", "json_schema": "x"}},
        "invalid_type",
        "response_format.json_schema",
    ),
    (
        CHAT,
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
        "missing_required_parameter",
        "response_format.json_schema.name",
    ),
    (
        CHAT,
        {"response_format": {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}},
        "invalid_type",
        "response_format.json_schema.name",
    ),
    (
        CHAT,
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "missing_required_parameter",
        "response_format.json_schema.schema",
    ),
    (
        CHAT,
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "s"}}},
        "json_schema_schema_not_object",
        "response_format.json_schema.schema",
    ),
    (CHAT, {"regex": 5}, "invalid_type", "regex"),
    (CHAT, {"ebnf": []}, "invalid_type", "ebnf"),
    (COMP, {"json_schema": {}}, "invalid_type", "json_schema"),
    (CHAT, {"regex": "a", "ebnf": "b"}, "multiple_constraints", None),
    (COMP, {"regex": "a", "json_schema": "{}"}, "multiple_constraints", None),
    (
        CHAT,
        {"regex": "a", "response_format": {"type": "json_object"}},
        "regex_conflicts_with_json",
        None,
    ),
    (
        CHAT,
        {
            "regex": "a",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        },
        "regex_conflicts_with_json",
        None,
    ),
    (
        CHAT,
        {"ebnf": "x", "response_format": {"type": "json_object"}},
        "ebnf_conflicts_with_json",
        None,
    ),
    (CHAT, {"logit_bias": [1]}, "invalid_type", "logit_bias"),
    (CHAT, {"logit_bias": {"x": 1}}, "logit_bias_invalid_key", "logit_bias"),
    (CHAT, {"logit_bias": {"-1": 1}}, "logit_bias_invalid_key", "logit_bias"),
    (CHAT, {"logit_bias": {"2147483648": 1}}, "logit_bias_invalid_key", "logit_bias"),
    (COMP, {"logit_bias": {"x": 1}}, "logit_bias_invalid_key", "logit_bias"),
    (CHAT, {"logit_bias": {"5": "a"}}, "invalid_type", "logit_bias.5"),
    (CHAT, {"logit_bias": {"5": True}}, "invalid_type", "logit_bias.5"),
]


@pytest.mark.parametrize(("chat", "body", "code", "param"), ERRORS, ids=lambda v: repr(v)[:60])
def test_errors(chat: bool, body: dict[str, Any], code: str, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        sampling_from_openai(body, chat=chat)
    err = info.value
    assert (err.status, err.code, err.param) == (400, code, param)
    assert err.type == "invalid_request_error"
    assert err.message


def test_values_from_json_parse_the_same() -> None:
    body = orjson.loads(b'{"temperature": 1, "top_p": 0.5, "n": 3, "stop": ["x"], "seed": 7}')
    params = sampling_from_openai(body, chat=True)
    assert (params.temperature, params.top_p, params.n, params.stop, params.seed) == (
        1.0,
        0.5,
        3,
        ("x",),
        7,
    )


def test_schema_is_compact_json() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    }
    params = sampling_from_openai(body, chat=True)
    assert params.json_schema is not None
    assert orjson.loads(params.json_schema) == schema
