"""`tool_choice` naming one function: the engine was constrained to that function's parameters
schema, so the whole output is the call's arguments (pure; no IO).

The text is held until the end: valid JSON becomes one call with the forced name, anything else
comes back as normal text (a constraint the engine could not honour must not vanish).
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import ToolParserBase
from smg.pipeline.parsers.json_calls import loads_strict
from smg.pipeline.parsers.types import IdFactory, canonical_json


class ForcedCallParser(ToolParserBase):
    def __init__(
        self,
        name: str,
        tools: list[dict] | None = None,
        *,
        id_factory: IdFactory | None = None,
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._name = name
        self._parts: list[str] = []

    def on_text(self, text: str) -> None:
        self._parts.append(text)

    def on_finish(self) -> None:
        body = "".join(self._parts).strip()
        try:
            args = loads_strict(body) if body else {}
        except ValueError:
            args = None
        if isinstance(args, dict):
            self.out.begin_call(self._name, canonical_json(args))
        elif body:
            self.out.normal("".join(self._parts))
