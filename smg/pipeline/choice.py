"""What a request asked of its output, and the per-choice text machine every renderer shares.

`OutputSpec` is built once per request by the flow's prepare step. `ChoiceState` turns one
choice's token ids into text that is safe to show: an incremental detokenizer (no half
characters), the stop-string automaton (no half stop strings), and the reasoning / tool-call
parser when the request has one. The OpenAI renderer (`output.py`) and SGLang's /generate
renderer (`generate_output.py`) both feed it, so every surface shows the same text for the same
tokens. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field

from smg.core.records import record
from smg.pipeline.detokenize import DecodeFn, IncrementalDetokenizer
from smg.pipeline.engine_types import Finished, TokenLogprob
from smg.pipeline.parsers.types import ParseDelta, Parser
from smg.pipeline.stop import StopAutomaton, StopMatcher, compile_stops

DONE_FRAME = b"data: [DONE]\n\n"


@record  # frozen to the type checker; a plain slots init (built on every request)
class OutputSpec:
    """What the request asked for, as the shaper needs it."""

    response_id: str
    model: str
    created: int
    chat: bool
    n: int = 1
    stop: tuple[str, ...] = ()
    include_stop: bool = False
    skip_special_tokens: bool = True
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    system_fingerprint: str | None = None
    echo_prompt: str | None = None  # completions with echo=true
    # chat in gRPC mode: reasoning / tool-call parsing of each choice's text (None: plain text)
    parser: Callable[[], Parser] | None = None
    parallel_tool_calls: bool = True
    # built from `stop` once per request and shared by its choices (see smg.pipeline.stop)
    stop_automaton: StopAutomaton | None = field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_automaton", compile_stops(self.stop))


class ChoiceState:
    __slots__ = (
        "calls",
        "completion_tokens",
        "detok",
        "done",
        "finish_reason",
        "index",
        "logprobs",
        "matched_stop",
        "parser",
        "reasoning",
        "single_call",
        "started",
        "stop",
        "stops",
        "text",
        "text_of",
    )

    def __init__(self, index: int, decode: DecodeFn, spec: OutputSpec) -> None:
        self.parser = spec.parser() if spec.parser is not None else None
        self.single_call = not spec.parallel_tool_calls
        self.reasoning: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self.index = index
        self.detok = IncrementalDetokenizer(decode, skip_special_tokens=spec.skip_special_tokens)
        self.stop = StopMatcher(spec.stop_automaton, spec.include_stop)
        self.stops = spec.stop_automaton is not None  # else `stop` passes every text through
        # `feed` for a streamed token: without stop strings the detokenizer's own (one call less)
        self.text_of: Callable[[Sequence[int]], str] = self.feed if self.stops else self.detok.feed
        self.text: list[str] = []
        self.done = False
        self.started = False
        self.finish_reason: str | None = None
        self.matched_stop: int | str | None = None
        self.completion_tokens = 0
        self.logprobs: list[TokenLogprob] = []

    def feed(self, ids: Sequence[int], *, last: bool = False) -> str:
        """New safe-to-emit text for `ids`; marks the choice done when a stop string completes.
        `last`: the choice's final ids (the engine's Finished)."""
        text = self.detok.feed(ids, last=last)
        if not self.stops:
            return text
        emit, stopped, matched = self.stop.feed(text)
        if stopped:
            self.done = True
            self.finish_reason = "stop"
            self.matched_stop = matched
        return emit

    def parse(self, text: str, *, final: bool) -> ParseDelta:
        """Split emitted text into content, reasoning and tool calls (when a parser is set);
        the pieces are also kept for the whole-answer body."""
        parser = self.parser
        if parser is None:
            delta = ParseDelta(normal_text=text)
        else:
            delta = parser.feed(text) if text else ParseDelta()
            if final:
                tail = parser.finish()
                delta = ParseDelta(
                    delta.normal_text + tail.normal_text,
                    delta.reasoning_text + tail.reasoning_text,
                    delta.calls + tail.calls,
                )
            if self.single_call and delta.calls:  # parallel_tool_calls: false keeps the first
                kept = tuple(c for c in delta.calls if c.index == 0)
                delta = ParseDelta(delta.normal_text, delta.reasoning_text, kept)
        if delta.normal_text:
            self.text.append(delta.normal_text)
        if delta.reasoning_text:
            self.reasoning.append(delta.reasoning_text)
        for c in delta.calls:
            entry = self.calls.setdefault(c.index, ["", "", ""])
            if c.id is not None:
                entry[0] = c.id
            if c.name is not None:
                entry[1] = c.name
            entry[2] += c.arguments
        if final and self.calls and self.finish_reason == "stop":
            self.finish_reason = "tool_calls"
        return delta

    def finish(self, ev: Finished) -> str:
        tail = self.feed(ev.token_ids, last=True) if ev.token_ids else ""
        if self.done:  # a stop string completed within the last tokens
            return tail
        emit, stopped, matched = self.stop.feed(self.detok.finish())
        tail += emit
        if stopped:
            self.finish_reason, self.matched_stop = "stop", matched
        else:
            tail += self.stop.finish()
            self.finish_reason = _finish_reason(ev.finish_reason)
            self.matched_stop = ev.matched_stop
        self.done = True
        return tail


def _finish_reason(engine_reason: str) -> str:
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(engine_reason, "stop")
