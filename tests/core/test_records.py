"""`record` (smg/core/records.py): the per-request records keep a frozen dataclass's value
semantics (equality, hash, `replace`) with a plain slots `__init__`."""

from __future__ import annotations

import dataclasses

import pytest

from smg.core.records import record
from smg.pipeline.choice import OutputSpec
from smg.pipeline.engine_types import EngineRequest, SamplingParams
from smg.pipeline.policies.base import RouteRequest

pytestmark = pytest.mark.unit


@record
class _Point:
    x: int
    y: int = 0
    note: str = dataclasses.field(default="", compare=False)


def test_a_record_compares_and_hashes_by_value() -> None:
    a, b = _Point(1, 2, "first"), _Point(1, 2, "second")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1  # `note` is not compared
    assert a != _Point(1, 3)
    assert dataclasses.replace(a, y=5) == _Point(1, 5)
    assert not hasattr(a, "__dict__")  # slots
    assert [f.name for f in dataclasses.fields(a)] == ["x", "y", "note"]


def test_the_request_records_keep_their_value_semantics() -> None:
    s = SamplingParams(temperature=0.5, max_tokens=8, stop=("x",))
    assert s == SamplingParams(temperature=0.5, max_tokens=8, stop=("x",))
    assert hash(s) == hash(SamplingParams(temperature=0.5, max_tokens=8, stop=("x",)))
    assert dataclasses.replace(s, json_schema="{}").json_schema == "{}"
    e = EngineRequest("r", (1, 2), s, False)
    assert e == EngineRequest("r", (1, 2), s, False) and hash(e) == hash(dataclasses.replace(e))
    assert RouteRequest(text="t") == RouteRequest(text="t")
    spec = OutputSpec(response_id="r", model="m", created=1, chat=True, stop=("a",))
    assert spec.stop_automaton is not None  # __post_init__ still fills it
    assert spec == OutputSpec(response_id="r", model="m", created=1, chat=True, stop=("a",))
