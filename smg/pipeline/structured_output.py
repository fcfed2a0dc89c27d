"""The structured-output fields of an OpenAI request: `response_format` (chat) and the rule
that at most one constraint (regex, EBNF, JSON schema) is active. Pure; `sampling` calls these
while it validates a body."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from smg.errors import ApiError, invalid_type, invalid_value, missing_field
from smg.pipeline.body_fields import kind_of


def response_format(body: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(json schema as a JSON string or None, json_object)."""
    rf = body.get("response_format")
    if rf is None:
        return None, False
    if not isinstance(rf, dict):
        raise invalid_type(
            "Invalid type for 'response_format': expected an object, "
            f"but got {kind_of(rf)} instead.",
            param="response_format",
        )
    kind = rf.get("type")
    if kind is None:
        raise missing_field("response_format.type")
    if not isinstance(kind, str):
        raise invalid_type(
            "Invalid type for 'response_format.type': expected a string, "
            f"but got {kind_of(kind)} instead.",
            param="response_format.type",
        )
    if kind == "text":
        return None, False
    if kind == "json_object":
        return None, True
    if kind != "json_schema":
        raise invalid_value(
            f"Invalid 'response_format.type': unknown variant '{kind}', "
            "expected one of 'text', 'json_object', 'json_schema'.",
            param="response_format.type",
        )
    spec = rf.get("json_schema")
    if spec is None:
        raise missing_field("response_format.json_schema")
    if not isinstance(spec, dict):
        raise invalid_type(
            "Invalid type for 'response_format.json_schema': expected an object, "
            f"but got {kind_of(spec)} instead.",
            param="response_format.json_schema",
        )
    name = spec.get("name")
    if name is None:
        raise missing_field("response_format.json_schema.name")
    if not isinstance(name, str):
        raise invalid_type(
            "Invalid type for 'response_format.json_schema.name': expected a string, "
            f"but got {kind_of(name)} instead.",
            param="response_format.json_schema.name",
        )
    schema = spec.get("schema")
    if schema is None:
        raise missing_field("response_format.json_schema.schema")
    if not isinstance(schema, dict):
        raise ApiError(
            400,
            "json_schema_schema_not_object",
            "JSON schema 'schema' must be a JSON object",
            param="response_format.json_schema.schema",
        )
    return orjson.dumps(schema).decode(), False


def check_constraints(
    regex: str | None,
    grammar: str | None,
    json_schema: str | None,
    json_object: bool,
    *,
    chat: bool,
) -> None:
    if chat and (json_schema is not None or json_object):
        if regex is not None:
            raise ApiError(
                400,
                "regex_conflicts_with_json",
                "cannot use regex constraint with JSON response format",
            )
        if grammar is not None:
            raise ApiError(
                400,
                "ebnf_conflicts_with_json",
                "cannot use EBNF constraint with JSON response format",
            )
    if sum(c is not None for c in (regex, grammar, json_schema)) > 1:
        raise ApiError(
            400,
            "multiple_constraints",
            "only one structured output constraint (regex, ebnf, or json_schema) "
            "can be active at a time",
        )
