"""Engine events → Anthropic Messages answers (pure; no IO).

`MessagesShaper` is the Messages surface's renderer in the request flow (smg/flow/render.py):
the per-choice text machine every surface shares (`ChoiceState`: detokenizer, stop strings,
reasoning and tool-call parsers) feeds one content-block machine. What the parsers say becomes
content blocks in the order the model said it:

    reasoning text → a `thinking` block (only when the request enabled thinking)
    normal text    → a `text` block
    a tool call    → a `tool_use` block (`id`, `name`, `input`: its arguments parsed)

A block opens when its kind of output starts and closes when another kind starts or the answer
ends. A stream is Anthropic's event sequence: `message_start`, `ping`, per block
`content_block_start`, its `content_block_delta`s (`thinking_delta`, `text_delta`,
`input_json_delta`), `content_block_stop`, then `message_delta` (stop_reason, usage) and
`message_stop`; an engine failing mid-stream ends it with an `error` event. A whole answer runs
the very same machine without writing events, so the message a stream adds up to equals the
non-streamed one (ids aside).

HTTP mode (`for_chat`): a worker's chat answer, read back as `ChatStep`s (the worker has parsed
the text already), drives the same machine.

Text that is only whitespace (what a template leaves between a think block and a tool call) is
held back and opens no text block of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from smg.errors import ApiError, anthropic_body
from smg.pipeline.chat_answer import ChatStep
from smg.pipeline.choice import ChoiceState, OutputSpec
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta
from smg.pipeline.framed import FramedShaper, usage_count
from smg.pipeline.messages_request import MessagesRequest
from smg.pipeline.parsers.types import ParseDelta

THINKING, TEXT, TOOL = "thinking", "text", "tool_use"


class MessagesRenderer:
    """The flow's render factory for one Messages request (`message_id`: `msg_…`)."""

    __slots__ = ("made", "message_id", "req")

    def __init__(self, req: MessagesRequest, message_id: str) -> None:
        self.req = req
        self.message_id = message_id
        self.made: MessagesShaper | None = None  # the renderer of the attempt that answered

    def __call__(
        self, spec: OutputSpec, decode: DecodeFn, now: Callable[[], float]
    ) -> MessagesShaper:
        self.made = MessagesShaper(self.req, self.message_id, spec, decode)
        return self.made

    def for_chat(self, created: int) -> MessagesShaper:
        """HTTP mode: the shaper of a worker's chat answer (no detokenizer, no parser here)."""
        spec = OutputSpec(self.message_id, self.req.model, created, chat=True)
        self.made = MessagesShaper(self.req, self.message_id, spec, _no_tokens)
        return self.made


def _no_tokens(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    raise AssertionError("a chat answer carries text, not tokens")


class MessagesShaper(FramedShaper):
    def __init__(
        self, req: MessagesRequest, message_id: str, spec: OutputSpec, decode: DecodeFn
    ) -> None:
        self.req = req
        self.id = message_id
        self.state = ChoiceState(0, decode, spec)
        self.error: str | None = None
        self.blocks: list[dict[str, Any]] = []  # content blocks, the open one still growing
        self.texts: list[list[str]] = []  # per block: its text (or JSON input) so far
        self.open: int | None = None  # the block output goes to now
        self.calls: dict[int, int] = {}  # a parser's call index -> its block index
        self.held = ""  # whitespace not yet shown (no text block opened for it alone)
        self.begun = False
        self.ended = False
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self._frames: list[bytes] | None = None  # None: a whole answer (no events written)

    # --- the flow's renderer interface -----------------------------------------------------------
    def failure_frames(self, err: ApiError) -> list[bytes]:
        self._frames = frames = list[bytes]()
        self.ended = True
        self._event("error", **anthropic_body(err))
        return frames

    def whole(self) -> bytes | None:
        """The message; None when the engine failed (the flow answers the error)."""
        self._frames = None
        if self.error is not None:
            return None
        self._end()
        return orjson.dumps(self.message())

    # --- HTTP mode: a worker's chat answer -------------------------------------------------------
    def _chat(self, step: ChatStep) -> None:
        state = self.state
        usage = step.usage
        if usage is not None:  # the worker's counts (a stream sends them after the finish)
            self.prompt_tokens = usage_count(usage, "prompt_tokens")
            self.cached_tokens = usage_count(usage.get("prompt_tokens_details"), "cached_tokens")
            state.completion_tokens = usage_count(usage, "completion_tokens")
        self._begin()
        if not state.done:
            self._apply(step.delta)
            if step.finish_reason is not None:
                state.done = True
                state.finish_reason = step.finish_reason
                state.matched_stop = step.matched_stop

    # --- the machine -----------------------------------------------------------------------------
    def _feed(self, ev: EngineEvent) -> None:
        state = self.state
        if state.done or ev.index != 0:
            return
        if isinstance(ev, Finished) and ev.finish_reason == "error":
            self.error = ev.error or "the engine failed"
        self.prompt_tokens = max(self.prompt_tokens, ev.prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, ev.cached_tokens)
        state.completion_tokens = max(state.completion_tokens, ev.completion_tokens)
        self._begin()
        if isinstance(ev, TokenDelta):
            self._apply(state.parse(state.feed(ev.token_ids), final=state.done))
            return
        if ev.token_ids:  # a whole answer's tokens come with its end
            self._apply(state.parse(state.feed(ev.token_ids), final=state.done))
            if state.done:
                return
            ev = dataclasses.replace(ev, token_ids=[])
        self._apply(state.parse(state.finish(ev), final=True))

    def _apply(self, delta: ParseDelta) -> None:
        if delta.reasoning_text and self.req.thinking:
            index = self._ensure(THINKING)
            self._grow(index, delta.reasoning_text, "thinking_delta", "thinking")
        if delta.normal_text:
            text = self.held + delta.normal_text
            if self._open_kind() != TEXT and not text.strip():
                self.held = text
            else:
                self.held = ""
                index = self._ensure(TEXT)
                self._grow(index, text, "text_delta", "text")
        for call in delta.calls:
            if call.id is not None:
                self.held = ""
                self._close()
                block = {"type": TOOL, "id": call.id, "name": call.name or "", "input": {}}
                self.calls[call.index] = self._add(block)
            index = self.calls.get(call.index, -1)
            if call.arguments and index >= 0:
                self._grow(index, call.arguments, "input_json_delta", "partial_json")

    def _open_kind(self) -> str | None:
        return None if self.open is None else self.blocks[self.open]["type"]

    def _ensure(self, kind: str) -> int:
        if self._open_kind() == kind:
            assert self.open is not None
            return self.open
        self._close()
        if kind == THINKING:
            return self._add({"type": THINKING, "thinking": "", "signature": ""})
        return self._add({"type": TEXT, "text": ""})

    def _add(self, block: dict[str, Any]) -> int:
        index = len(self.blocks)
        self.blocks.append(block)
        self.texts.append([])
        self.open = index
        self._event("content_block_start", index=index, content_block=dict(block))
        return index

    def _grow(self, index: int, text: str, kind: str, field: str) -> None:
        """Add `text` to a block; its delta event is a `kind` with the text as `field`."""
        self.texts[index].append(text)
        self._event("content_block_delta", index=index, delta={"type": kind, field: text})

    def _close(self) -> None:
        index = self.open
        if index is None:
            return
        self.open = None
        block = self.blocks[index]
        text = "".join(self.texts[index])
        if block["type"] == TOOL:
            block["input"] = _input(text)
        else:
            block[block["type"]] = text
        self._event("content_block_stop", index=index)

    def _begin(self) -> None:
        if self.begun:
            return
        self.begun = True
        head = self._message([], None, None)
        head["usage"]["output_tokens"] = 0
        self._event("message_start", message=head)
        self._event("ping")

    def _end(self) -> None:
        """The answer has ended: close the open block and send the last events (once)."""
        if self.ended:
            return
        self._begin()
        self.ended = True
        state = self.state
        if not state.done:  # the engine never finished this answer
            state.done = True
            state.finish_reason = state.finish_reason or "abort"
            self._apply(state.parse(state.stop.finish(), final=True))
        self._close()
        reason, sequence = self._stop_reason()
        self._event(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": sequence},
            usage=self.usage(),
        )
        self._event("message_stop")

    def _stop_reason(self) -> tuple[str, str | None]:
        state = self.state
        if state.finish_reason == "length":
            return "max_tokens", None
        if any(b["type"] == TOOL for b in self.blocks):
            return "tool_use", None
        matched = state.matched_stop
        if isinstance(matched, str) and matched in self.req.stop_sequences:
            return "stop_sequence", matched
        return "end_turn", None

    def _event(self, kind: str, **fields: Any) -> None:
        if self._frames is None:
            return
        payload = {"type": kind, **fields}
        self._frames.append(
            b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
        )

    # --- the message -----------------------------------------------------------------------------
    def usage(self) -> dict[str, Any]:
        """Anthropic's usage: `input_tokens` excludes the prompt tokens read from the cache."""
        cached = min(self.cached_tokens, self.prompt_tokens)
        return {
            "input_tokens": self.prompt_tokens - cached,
            "output_tokens": self.state.completion_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        }

    def message(self) -> dict[str, Any]:
        """The whole message, once the answer has ended."""
        reason, sequence = self._stop_reason()
        return self._message([dict(b) for b in self.blocks], reason, sequence)

    def _message(
        self, content: list[dict[str, Any]], reason: str | None, sequence: str | None
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.req.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": self.usage(),
        }


def _input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as `input` (an object; what is not one is kept under `_raw`)."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}
