"""sampling_from_openai keeps the records of scalar-only bodies: the kept answer must be the one
the validator gives, for every body, valid or not."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.errors import ApiError
from smg.pipeline import sampling
from smg.pipeline.sampling import SAMPLING_FIELDS, sampling_from_openai

pytestmark = pytest.mark.unit

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 30),
    st.floats(-3, 3, allow_nan=False),
    st.sampled_from([0, 1, 1.0, True, False, 0.0, -0.0, 2**40, "x", "", "a" * 300]),
    st.lists(st.sampled_from(["a", "b", 3]), max_size=3),
    st.just({"type": "json_object"}),
)
_bodies = st.dictionaries(st.sampled_from(SAMPLING_FIELDS), _values, max_size=5)


def _outcome(fn: Any, body: dict[str, Any], chat: bool) -> object:
    try:
        return fn(body, chat=chat)
    except ApiError as err:
        return (err.status, err.code, str(err))


@settings(max_examples=examples(400), deadline=None)
@given(bodies=st.lists(_bodies, min_size=1, max_size=6), chat=st.booleans())
def test_kept_records_are_what_the_validator_says(bodies: list[dict[str, Any]], chat: bool) -> None:
    for body in bodies + bodies:  # the second pass meets what the first one kept
        want = _outcome(sampling._sampling_from_openai, body, chat)
        assert _outcome(sampling_from_openai, body, chat) == want


def test_equal_values_of_other_types_stay_apart() -> None:
    ok = sampling_from_openai({"n": 1}, chat=True)
    assert ok.n == 1
    with pytest.raises(ApiError):
        sampling_from_openai({"n": True}, chat=True)  # a bool is not an integer
    assert sampling_from_openai({"max_tokens": 5}, chat=True).max_tokens == 5
    with pytest.raises(ApiError):
        sampling_from_openai({"max_tokens": 5.0}, chat=True)


class _Recording(dict[str, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


@pytest.mark.parametrize("chat", [True, False])
def test_the_key_names_every_field_the_validator_reads(chat: bool) -> None:
    body = _Recording()
    sampling._sampling_from_openai(body, chat=chat)
    assert body.read <= set(SAMPLING_FIELDS)
    assert body.read, "the validator read nothing: the recording missed its reads"


def test_the_kept_records_are_bounded() -> None:
    for i in range(3000):
        sampling_from_openai({"max_tokens": i + 1}, chat=True)
    assert sampling._from_scalars.cache_info().currsize <= 1024
