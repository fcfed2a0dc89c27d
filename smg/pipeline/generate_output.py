"""Engine events → SGLang's native `/generate` answers (pure; no IO).

The same per-choice text machine as the OpenAI shapes (`ChoiceState`: incremental detokenizer,
stop strings), rendered the way SGLang's own server answers `/generate`: per choice an item
`{text, output_ids, meta_info: {id, finish_reason, prompt_tokens, completion_tokens,
cached_tokens, e2e_latency}}`, the text and ids so far; a stream sends the item again each time
a choice grows or ends, then `[DONE]`. A whole answer is the one item, or the list of items for
`n > 1`. An engine failure is not an error here (SGLang answers what it has): the choice ends
with the engine's finish reason and `error` is set for the caller's outcome.

`GenerateShaper` has `OutputShaper`'s interface (`on_event`, `closing_frames`, `collect`,
`whole`, `failure_frames`, `all_done`, `error`), so the flow streams either the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from smg.errors import ApiError
from smg.pipeline.choice import DONE_FRAME, ChoiceState, OutputSpec
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta


class GenerateShaper:
    def __init__(self, spec: OutputSpec, decode: DecodeFn, now: Callable[[], float]) -> None:
        self.spec = spec
        self.choices = [ChoiceState(i, decode, spec) for i in range(spec.n)]
        self.now = now
        self.started = now()
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.error: str | None = None

    @property
    def all_done(self) -> bool:
        return all(c.done for c in self.choices)

    def _feed(self, ev: EngineEvent) -> ChoiceState | None:
        """Account one event; the choice it grew or ended (None: nothing new to show)."""
        index = ev.index
        state = self.choices[index] if 0 <= index < len(self.choices) else None
        if state is None or state.done:
            return None
        self.prompt_tokens = max(self.prompt_tokens, ev.prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, ev.cached_tokens)
        state.completion_tokens = max(state.completion_tokens, ev.completion_tokens)
        ids_before = len(state.detok.ids)
        if isinstance(ev, TokenDelta):
            state.text.append(state.feed(ev.token_ids))
        elif isinstance(ev, Finished):
            if ev.error is not None and self.error is None:
                self.error = ev.error
            state.text.append(state.finish(ev))
        return state if len(state.detok.ids) > ids_before or state.done else None

    # --- streaming -------------------------------------------------------------------------------
    def on_event(self, ev: EngineEvent) -> list[bytes]:
        state = self._feed(ev)
        if state is None:
            return []
        return [b"data: " + orjson.dumps(self._item(state)) + b"\n\n"]

    def closing_frames(self) -> list[bytes]:
        return [DONE_FRAME]

    def failure_frames(self, err: ApiError) -> list[bytes]:
        """SGLang ends a failed stream like any other: no error event."""
        return []

    # --- whole answers ---------------------------------------------------------------------------
    def collect(self, ev: EngineEvent) -> None:
        self._feed(ev)

    def whole(self) -> bytes:
        items = [self._item(c) for c in self.choices]
        return orjson.dumps(items[0] if len(items) == 1 else items)

    def _item(self, state: ChoiceState) -> dict[str, Any]:
        finish: dict[str, Any] | None = None
        if state.done:
            finish = {"type": state.finish_reason}
            if state.matched_stop is not None:
                finish["matched"] = state.matched_stop
        return {
            "text": "".join(state.text),
            "output_ids": list(state.detok.ids),
            "meta_info": {
                "id": self.spec.response_id,
                "finish_reason": finish,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": state.completion_tokens,
                "cached_tokens": self.cached_tokens,
                "e2e_latency": round(self.now() - self.started, 6),
            },
        }
