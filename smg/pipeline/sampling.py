"""OpenAI request body -> `SamplingParams`, validated the way the Rust gateway validates it.

Pure: a dict in, a frozen record or an `ApiError` (400, `param` set) out. The generic typed field
readers (numbers, unsigned integers, booleans, strings) are in `body_fields`.

Ranges and codes were probed against smg 1.13.0 (chat / completions where they differ):

    temperature          number, 0 <= t <= 2          decimal_below_min_value / _above_max_value
    top_p                number, 0 < p <= 1           (0 itself is refused: below min)
    top_k                integer, -1 (off) or >= 1    invalid_value
    min_p                number, 0 <= p <= 1
    presence_penalty,    number, -2 <= x <= 2
      frequency_penalty
    repetition_penalty   number, 0 <= x <= 2          (the Rust range; engines treat 0 as 1)
    max_completion_tokens / max_tokens
                         integer, chat >= 1, completions >= 0, <= u32    integer_below_min_value
                         (chat: max_completion_tokens wins when both are set)
    min_tokens           integer >= 0, and <= the max when both set   min_tokens_exceeds_max
    n                    integer, chat 1..10, completions 1..128   integer_above_max_value
    seed                 integer (i64)
    stop                 string or list of strings, at most 4, none empty, each at most 1024
                         characters (our cap: the Rust gateway has none; stop strings are
                         delimiters, and the cap bounds what matching may cost)
                                 array_above_max_length / invalid_value / string_above_max_length
    stop_token_ids       list of integers >= 0
    logprobs             chat: bool, with top_logprobs 0..20 (top_logprobs without logprobs:
                         top_logprobs_requires_logprobs); completions: integer 0..20
    logit_bias           object of "<token id>": number   logit_bias_invalid_key (no value range,
                         as in the Rust gateway; engines clamp to +-100)
    response_format      chat only (completions ignore it, as the Rust gateway does):
                         text | json_object | json_schema{name, schema: object}
    regex, ebnf          strings (SGLang extensions); completions also take `json_schema` (a
                         string); at most one constraint: multiple_constraints; chat refuses
                         regex/ebnf with a JSON response_format: regex_/ebnf_conflicts_with_json
    ignore_eos, skip_special_tokens, include_stop_str_in_output (vLLM) / no_stop_trim (SGLang)
                         booleans

A wrong JSON type is `invalid_type`; null means "not given" for every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from smg.errors import ApiError, invalid_type, invalid_value
from smg.pipeline.body_fields import (
    bool_field,
    check_uint,
    is_int,
    is_number,
    kind_of,
    number_field,
    string_field,
    uint_field,
)
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.structured_output import check_constraints, response_format

I32_MAX = 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
MAX_STOP = 4
MAX_STOP_CHARS = 1024
MAX_TOP_LOGPROBS = 20
MAX_N_CHAT = 10
MAX_N_COMPLETIONS = 128


# Every body field `_sampling_from_openai` reads (tests/pipeline/test_sampling_cache.py checks
# the list against what it reads).
SAMPLING_FIELDS = (
    "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "top_k", "seed", "n", "min_tokens", "max_tokens",
    "max_completion_tokens", "logprobs", "top_logprobs", "response_format", "regex", "ebnf",
    "json_schema", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
    "include_stop_str_in_output", "no_stop_trim", "logit_bias",
)  # fmt: skip
_FIELD_SET = frozenset(SAMPLING_FIELDS)
_SCALARS = frozenset({str, int, float, bool})
_KEY_CHARS = 256  # a longer string (a regex, a schema) is validated every time, never kept


def sampling_from_openai(body: Mapping[str, Any], *, chat: bool) -> SamplingParams:
    """Validate the sampling fields of a chat (`chat=True`) or completions request body."""
    given: list[tuple[str, type, Any]] = []
    for name, value in body.items():  # the fields present (a body has a few), not all 25
        if value is not None and name in _FIELD_SET:
            kind = type(value)
            if kind not in _SCALARS or (kind is str and len(value) > _KEY_CHARS):
                return _sampling_from_openai(body, chat=chat)
            given.append((name, kind, value))
    if len(given) > 1:
        given.sort()  # one record whatever order the client wrote its fields in
    return _from_scalars(chat, tuple(given))


# Clients repeat a handful of sampling settings (an SDK's defaults, an app's), and validating
# them cost ~10 µs a request: the records of bodies whose sampling fields are all scalars are
# kept, keyed by those fields. The type is in the key so that 1, 1.0 and True (equal in Python)
# stay apart; a record is frozen, so sharing it is safe; a refused body raises, which is not
# kept. Bounded: 1,024 records (least recently used out) of short keys.
@lru_cache(maxsize=1024)
def _from_scalars(chat: bool, given: tuple[tuple[str, type, Any], ...]) -> SamplingParams:
    return _sampling_from_openai({name: value for name, _, value in given}, chat=chat)


def _sampling_from_openai(body: Mapping[str, Any], *, chat: bool) -> SamplingParams:
    temperature = number_field(body, "temperature", 0.0, 2.0)
    top_p = number_field(body, "top_p", 0.0, 1.0, lo_exclusive=True)
    min_p = number_field(body, "min_p", 0.0, 1.0)
    presence = number_field(body, "presence_penalty", -2.0, 2.0)
    frequency = number_field(body, "frequency_penalty", -2.0, 2.0)
    repetition = number_field(body, "repetition_penalty", 0.0, 2.0)
    top_k = _top_k(body)
    seed = _seed(body)
    n = uint_field(body, "n", lo=1, hi=MAX_N_CHAT if chat else MAX_N_COMPLETIONS)
    min_tokens = uint_field(body, "min_tokens")

    if chat:
        max_tokens = uint_field(body, "max_tokens", lo=1)
        newer = uint_field(body, "max_completion_tokens", lo=1)
        if newer is not None:
            max_tokens = newer
        logprobs = _chat_logprobs(body)
    else:
        max_tokens = uint_field(body, "max_tokens")
        logprobs = uint_field(body, "logprobs", hi=MAX_TOP_LOGPROBS)

    if min_tokens is not None and max_tokens is not None and min_tokens > max_tokens:
        names = "max_tokens/max_completion_tokens" if chat else "max_tokens"
        raise ApiError(400, "min_tokens_exceeds_max", f"min_tokens cannot exceed {names}")

    json_schema, json_object = response_format(body) if chat else (None, False)
    regex = string_field(body, "regex")
    grammar = string_field(body, "ebnf")
    if not chat:
        json_schema = string_field(body, "json_schema")
    check_constraints(regex, grammar, json_schema, json_object, chat=chat)

    return SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        max_tokens=max_tokens,
        min_tokens=min_tokens or 0,
        stop=_stop(body),
        stop_token_ids=_stop_token_ids(body),
        n=n if n is not None else 1,
        seed=seed,
        presence_penalty=presence,
        frequency_penalty=frequency,
        repetition_penalty=repetition,
        logprobs=logprobs,
        ignore_eos=bool_field(body, "ignore_eos", False),
        skip_special_tokens=bool_field(body, "skip_special_tokens", True),
        include_stop_str_in_output=(
            bool_field(body, "include_stop_str_in_output", False)
            or bool_field(body, "no_stop_trim", False)
        ),
        json_schema=json_schema,
        json_object=json_object,
        regex=regex,
        grammar=grammar,
        logit_bias=_logit_bias(body),
    )


# SGLang's /generate `sampling_params`: its names for the OpenAI ones the validator knows
_SGLANG_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}
_SGLANG_PASSTHROUGH = (
    "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "n", "seed",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
    "skip_special_tokens", "logit_bias",
)  # fmt: skip


def sampling_from_sglang(params: object) -> SamplingParams:
    """Validate SGLang's /generate `sampling_params` (an object; absent, null or empty:
    defaults) with the completions rules, SGLang's names mapped to the OpenAI ones; other fields
    are ignored."""
    params = params or {}
    if not isinstance(params, dict):
        raise invalid_type("'sampling_params' must be an object", param="sampling_params")
    openai_like: dict[str, Any] = {k: params[k] for k in _SGLANG_PASSTHROUGH if k in params}
    for native, name in _SGLANG_NAMES.items():
        if native in params:
            openai_like[name] = params[native]
    return sampling_from_openai(openai_like, chat=False)


# --- sampling-specific scalars -----------------------------------------------------------------


def _top_k(body: Mapping[str, Any]) -> int | None:
    value = body.get("top_k")
    if value is None:
        return None
    if not is_int(value):
        raise invalid_type(
            f"Invalid type for 'top_k': expected an integer, but got {kind_of(value)} instead.",
            param="top_k",
        )
    if value == -1:
        return None  # one spelling of "disabled" below this point
    if value < 1 or value > I32_MAX:
        raise invalid_value(
            f"Invalid 'top_k': must be -1 (disabled) or at least 1, but got {value} instead.",
            param="top_k",
        )
    return int(value)


def _seed(body: Mapping[str, Any]) -> int | None:
    value = body.get("seed")
    if value is None:
        return None
    if not is_int(value):
        raise invalid_type(
            f"Invalid type for 'seed': expected an integer, but got {kind_of(value)} instead.",
            param="seed",
        )
    if not I64_MIN <= value <= I64_MAX:
        raise invalid_value(
            f"Invalid 'seed': {value} is out of range for a signed 64-bit integer.", param="seed"
        )
    return int(value)


# --- structured fields -------------------------------------------------------------------------


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise invalid_type(
            "Invalid type for 'stop': expected a string or an array of strings, "
            f"but got {kind_of(value)} instead.",
            param="stop",
        )
    if len(items) > MAX_STOP:
        raise ApiError(
            400,
            "array_above_max_length",
            f"Invalid 'stop': array too long. Expected an array with maximum length {MAX_STOP}, "
            f"but got an array with length {len(items)} instead.",
            param="stop",
        )
    if any(s == "" for s in items):
        raise invalid_value("Invalid 'stop': stop sequences cannot be empty.", param="stop")
    longest = max(map(len, items), default=0)
    if longest > MAX_STOP_CHARS:
        raise ApiError(
            400,
            "string_above_max_length",
            f"Invalid 'stop': string too long. Expected a string with maximum length "
            f"{MAX_STOP_CHARS}, but got a string with length {longest} instead.",
            param="stop",
        )
    return tuple(items)


def _stop_token_ids(body: Mapping[str, Any]) -> tuple[int, ...]:
    value = body.get("stop_token_ids")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid_type(
            "Invalid type for 'stop_token_ids': expected an array of integers, "
            f"but got {kind_of(value)} instead.",
            param="stop_token_ids",
        )
    return tuple(check_uint(v, f"stop_token_ids[{i}]") for i, v in enumerate(value))


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    enabled = bool_field(body, "logprobs", False)
    top = uint_field(body, "top_logprobs", hi=MAX_TOP_LOGPROBS)
    if top is not None and not enabled:
        raise ApiError(
            400,
            "top_logprobs_requires_logprobs",
            "top_logprobs is only allowed when logprobs is enabled",
        )
    if not enabled:
        return None
    return top or 0


def _logit_bias(body: Mapping[str, Any]) -> tuple[tuple[int, float], ...]:
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise invalid_type(
            f"Invalid type for 'logit_bias': expected an object, but got {kind_of(value)} instead.",
            param="logit_bias",
        )
    out: list[tuple[int, float]] = []
    for key, bias in value.items():
        # token ids: ASCII digits only, and within int32 (vLLM's map key type)
        if not (key.isascii() and key.isdigit()) or int(key) > I32_MAX:
            raise ApiError(
                400,
                "logit_bias_invalid_key",
                f"Invalid key in 'logit_bias': '{key}'; keys must be non-negative integer "
                "token ids",
                param="logit_bias",
            )
        if not is_number(bias):
            raise invalid_type(
                f"Invalid type for 'logit_bias.{key}': expected a number, "
                f"but got {kind_of(bias)} instead.",
                param=f"logit_bias.{key}",
            )
        out.append((int(key), float(bias)))
    return tuple(out)
