"""Reasoning ("thinking") block formats: one start/end marker pair, one block (pure).

Every format here is the same state machine with different markers and a different initial state:

    before --start--> inside --end--> after

* before: text is normal content; `start` opens the block. Formats that `starts_inside`
  (DeepSeek-R1, Qwen3-thinking, Step3, MiniMax, Nemotron nano) skip this state, as does any
  format given `start_in_reasoning=True` (the chat template already opened the block, e.g. Qwen3
  with `enable_thinking`).
* inside: text is reasoning; `end` closes the block. A redundant `start` at the very beginning of
  the block (before any non-space reasoning) is tolerated and dropped.
* after: everything is normal content; markers are no longer recognised (one block per
  response, as in the Rust gateway).

Whitespace touching a marker is dropped: reasoning is stripped at both ends, content after the
block is left-stripped, and whitespace before a `start` is dropped when nothing else precedes
it. Text with no markers at all passes through untouched.

Unterminated reasoning (the stream ends inside the block, e.g. `max_tokens` hit) is returned as
reasoning, not content: the model never said it was done thinking.
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import NO_MARKERS, Markers, StreamParser, WsTrim

_BEFORE, _INSIDE, _AFTER = 0, 1, 2


class ThinkFormat:
    """A think-block format; calling it makes a fresh parser (the registry's factory)."""

    __slots__ = ("end", "inside_empty", "inside_markers", "name", "start", "starts_inside")

    def __init__(self, name: str, start: str, end: str, *, starts_inside: bool) -> None:
        self.name = name
        self.start = start
        self.end = end
        self.starts_inside = starts_inside
        self.inside_markers = Markers(end)
        self.inside_empty = Markers(start, end)

    def __repr__(self) -> str:
        return f"ThinkFormat({self.name!r})"

    def __call__(self, *, start_in_reasoning: bool = False) -> ThinkParser:
        return ThinkParser(self, start_in_reasoning=start_in_reasoning)


class ThinkParser(StreamParser):
    """Splits one think block out of the text stream."""

    def __init__(self, fmt: ThinkFormat, *, start_in_reasoning: bool = False) -> None:
        super().__init__()
        self.format = fmt
        self._before_markers = Markers(fmt.start)
        if fmt.starts_inside or start_in_reasoning:
            self._enter_inside()
        else:
            self._state = _BEFORE
            self._trim = WsTrim(hold_trailing=True)

    def _enter_inside(self) -> None:
        self._state = _INSIDE
        self._trim = WsTrim(strip_leading=True, hold_trailing=True)

    def active_markers(self) -> Markers:
        if self._state == _BEFORE:
            return self._before_markers
        if self._state == _INSIDE:
            fmt = self.format
            return fmt.inside_markers if self._trim.seen_content else fmt.inside_empty
        return NO_MARKERS

    def on_text(self, text: str) -> None:
        if self._state == _INSIDE:
            self.out.reasoning(self._trim.feed(text))
        else:
            self.out.normal(self._trim.feed(text))

    def on_marker(self, marker: str) -> None:
        if self._state == _BEFORE:  # the start marker
            held = self._trim.take_held()
            if self._trim.seen_content:  # "text <think>": keep the space; "\n<think>": drop it
                self.out.normal(held)
            self._enter_inside()
        elif marker == self.format.end:  # inside: close the block
            self._trim.take_held()
            self._state = _AFTER
            self._trim = WsTrim(strip_leading=True)
        # else: a redundant start marker at the top of the block; dropped

    def on_finish(self) -> None:
        held = self._trim.take_held()
        if self._state == _BEFORE:
            self.out.normal(held)  # no block at all: the text is returned untouched


DEEPSEEK_R1 = ThinkFormat("deepseek_r1", "<think>", "</think>", starts_inside=True)
QWEN3 = ThinkFormat("qwen3", "<think>", "</think>", starts_inside=False)
QWEN3_THINKING = ThinkFormat("qwen3_thinking", "<think>", "</think>", starts_inside=True)
KIMI = ThinkFormat("kimi", "\u25c1think\u25b7", "\u25c1/think\u25b7", starts_inside=False)
GLM45 = ThinkFormat("glm45", "<think>", "</think>", starts_inside=False)
STEP3 = ThinkFormat("step3", "<think>", "</think>", starts_inside=True)
MINIMAX = ThinkFormat("minimax", "<think>", "</think>", starts_inside=True)
NANO_V3 = ThinkFormat("nano_v3", "<think>", "</think>", starts_inside=True)
COHERE_CMD = ThinkFormat(
    "cohere_cmd", "<|START_THINKING|>", "<|END_THINKING|>", starts_inside=False
)
