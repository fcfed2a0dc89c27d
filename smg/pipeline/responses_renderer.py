"""The flow's render factory for one Responses request (`ResponsesRenderer`): it makes the
attempt's `ResponsesShaper` (smg/pipeline/responses_output.py), or a tool loop's round renderer
(smg/pipeline/responses_rounds.py) when the request runs tools, and keeps the one that answered."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from smg.pipeline.choice import OutputSpec
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.responses_output import ResponsesShaper
from smg.pipeline.responses_request import ResponsesRequest


class ShaperFactory(Protocol):
    def __call__(
        self, req: ResponsesRequest, response_id: str, spec: OutputSpec, decode: DecodeFn
    ) -> ResponsesShaper: ...


class ResponsesRenderer:
    """The flow's render factory for one Responses request (`response_id`: `resp_…`)."""

    __slots__ = ("loop", "made", "req", "response_id")

    def __init__(self, req: ResponsesRequest, response_id: str) -> None:
        self.req = req
        self.response_id = response_id
        # a tool loop's renderers, one per model round (smg.pipeline.responses_rounds)
        self.loop: ShaperFactory | None = None
        self.made: ResponsesShaper | None = None  # the renderer of the attempt that answered

    def __call__(
        self, spec: OutputSpec, decode: DecodeFn, now: Callable[[], float]
    ) -> ResponsesShaper:
        self.made = self._shaper(spec, decode)
        return self.made

    def _shaper(self, spec: OutputSpec, decode: DecodeFn) -> ResponsesShaper:
        make = ResponsesShaper if self.loop is None else self.loop
        return make(self.req, self.response_id, spec, decode)

    def for_chat(self, created: int) -> ResponsesShaper:
        """HTTP mode: the shaper of a worker's chat answer (read back as `ChatStep`s: the worker
        has parsed the text already, so no detokenizer and no parser run here)."""
        spec = OutputSpec(self.response_id, self.req.model, created, chat=True)
        self.made = self._shaper(spec, _no_tokens)
        return self.made


def _no_tokens(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    raise AssertionError("a chat answer carries text, not tokens")
