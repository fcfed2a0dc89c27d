"""Output types shared by every reasoning and tool-call parser (pure data, no IO).

A parser turns model text into three streams: normal text (`content`), reasoning text
(`reasoning_content`) and tool calls. Streaming yields `ParseDelta`s; `aggregate` folds any
sequence of deltas into the one-shot `ParseResult`, so "streaming equals non-streaming" is simply
`aggregate(deltas) == parser.parse(text)`.

Tool-call deltas follow the OpenAI streaming shape: the first `CallDelta` of a call carries its
`index`, `id` and `name`; later deltas for the same index carry only `arguments` fragments. The
fragments of one call concatenate to its full arguments, a JSON object serialised canonically
(`canonical_json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

IdFactory = Callable[[int], str]
"""Maps a call's index within the response to its id. Inject a request-scoped one in the gateway
(e.g. `lambda i: f"call_{request_id}_{i}"`) so ids stay unique across conversation turns."""


def default_call_id(index: int) -> str:
    """Deterministic ids (`call_0`, `call_1`, ...): equal for streaming and non-streaming."""
    return f"call_{index}"


def canonical_json(value: Any) -> str:
    """The one serialisation of arguments every parser emits: model key order, unicode kept."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class CallDelta:
    """One streamed piece of a tool call. `id`/`name` are set only on the call's first delta."""

    index: int
    id: str | None
    name: str | None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ParseDelta:
    """What one `feed`/`finish` produced. Text fields are increments, not totals."""

    normal_text: str = ""
    reasoning_text: str = ""
    calls: tuple[CallDelta, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.normal_text or self.reasoning_text or self.calls)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete call: `arguments` is a JSON object as a string (OpenAI `function.arguments`)."""

    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The whole response, parsed: what `parse(text)` returns and what deltas aggregate to."""

    normal_text: str = ""
    reasoning_text: str = ""
    calls: tuple[ToolCall, ...] = ()


class Parser(Protocol):
    """What every format implements. A parser instance serves exactly one response."""

    def feed(self, text: str) -> ParseDelta:
        """Consume the next piece of model text; return what is now certain."""
        ...

    def finish(self) -> ParseDelta:
        """End of the response: release or resolve whatever was held back."""
        ...

    def parse(self, text: str) -> ParseResult:
        """One shot, on a fresh parser: `aggregate([feed(text), finish()])`."""
        ...


def aggregate(deltas: Iterable[ParseDelta]) -> ParseResult:
    """Fold deltas into a result. Raises ValueError if the call deltas break the protocol."""
    normal: list[str] = []
    reasoning: list[str] = []
    heads: dict[int, tuple[str, str]] = {}
    args: dict[int, list[str]] = {}
    for delta in deltas:
        normal.append(delta.normal_text)
        reasoning.append(delta.reasoning_text)
        for call in delta.calls:
            if call.index not in heads:
                if call.id is None or call.name is None:
                    raise ValueError(f"call {call.index}: first delta lacks id or name")
                heads[call.index] = (call.id, call.name)
                args[call.index] = []
            elif call.id is not None or call.name is not None:
                raise ValueError(f"call {call.index}: id/name repeated after the first delta")
            args[call.index].append(call.arguments)
    calls = tuple(
        ToolCall(index, heads[index][0], heads[index][1], "".join(args[index]))
        for index in sorted(heads)
    )
    return ParseResult("".join(normal), "".join(reasoning), calls)
