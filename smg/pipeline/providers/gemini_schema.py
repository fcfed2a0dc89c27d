"""A JSON Schema (a tool's parameters, a json_schema response format) as Gemini's `Schema`, the
OpenAPI 3.0 subset its `functionDeclarations[].parameters` and `responseSchema` take (pure).

Types are upper-case (`OBJECT`, `STRING`...); `type: [T, "null"]` becomes `nullable: true`;
`additionalProperties: false`, `strict` and `$schema` are dropped (Gemini adds no keys a schema
does not name); any other keyword outside the subset (`$ref`, `oneOf`, `const`...) is a
`ProviderRequestError` naming where it is, never silently dropped.
"""

from __future__ import annotations

from typing import Any

from smg.pipeline.providers.base import ProviderRequestError

# the keywords of Gemini's `Schema` (an OpenAPI 3.0 subset); `additionalProperties: false` and
# `strict` are OpenAI's way of asking for no extra keys, which `responseSchema` already gives
SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})


def gemini_schema(schema: Any, where: str) -> dict[str, Any]:
    """A JSON Schema as Gemini's `Schema` (an OpenAPI 3.0 subset): `type: [T, "null"]` becomes
    `nullable`; a keyword outside the subset is refused rather than dropped."""
    if not isinstance(schema, dict):
        raise ProviderRequestError(where, f"{where} must be an object")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "additionalProperties" and value is False:
            continue
        if key in ("$schema", "strict"):
            continue
        if key not in SCHEMA_KEYS:
            raise ProviderRequestError(
                f"{where}.{key}", f"the schema keyword '{key}' is not supported by Gemini"
            )
        if key == "type":
            out.update(_schema_type(value, f"{where}.type"))
        elif key == "properties":
            if not isinstance(value, dict):
                raise ProviderRequestError(f"{where}.properties", "properties must be an object")
            out[key] = {
                name: gemini_schema(sub, f"{where}.properties.{name}")
                for name, sub in value.items()
            }
        elif key == "items":
            out[key] = gemini_schema(value, f"{where}.items")
        elif key == "anyOf":
            if not isinstance(value, list) or not value:
                raise ProviderRequestError(f"{where}.anyOf", "anyOf must be a non-empty list")
            out[key] = [gemini_schema(s, f"{where}.anyOf[{k}]") for k, s in enumerate(value)]
        else:
            out[key] = value
    return out


def _schema_type(value: Any, where: str) -> dict[str, Any]:
    types = value if isinstance(value, list) else [value]
    nullable = "null" in types
    rest = [t for t in types if t != "null"]
    if len(rest) != 1 or rest[0] not in SCHEMA_TYPES:
        raise ProviderRequestError(where, f"the schema type {value!r} has no Gemini form")
    out: dict[str, Any] = {"type": rest[0].upper()}
    if nullable:
        out["nullable"] = True
    return out
