"""`record`: the class decorator of the small value records built on every request
(`SamplingParams`, `EngineRequest`, `OutputSpec`, `RouteRequest`).

To the type checker a record is a frozen dataclass (assigning a field is an error, copies are
made with `dataclasses.replace`); at run time it is a slots dataclass, compared and hashed by
value as a frozen one is, whose `__init__` stores its fields directly. A frozen dataclass's
`__init__` sets every field through `object.__setattr__`: `SamplingParams` (26 fields) took
4.3 µs that way against 0.6 µs, and a request in gRPC mode builds three such records.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[T]) -> type[T]:
    return dataclasses.dataclass(slots=True, unsafe_hash=True)(cls)
