"""Engine events → OpenAI Responses answers (pure; no IO).

`ResponsesShaper` is the Responses surface's renderer in the request flow (smg/flow/render.py):
the same per-choice text machine as chat (`ChoiceState`: detokenizer, stop strings, reasoning
and tool-call parsers) feeds one output-item state machine. What the parsers say becomes output
items in the order the model said it:

    reasoning text  → a `reasoning` item (its `content` a `reasoning_text` part)    rs_…
    normal text     → a `message` item (its `content` one `output_text` part)       msg_…
    a tool call     → a `function_call` item (`call_id`, `name`, `arguments`)       fc_…

An item opens when its kind of output starts and closes when another kind starts or the answer
ends. A stream is the typed event sequence OpenAI sends (each with its `sequence_number`):
`response.created`, `response.in_progress`, per item `response.output_item.added`, its
`content_part.added`, `output_text.delta` / `reasoning_text.delta` /
`function_call_arguments.delta`, their `.done`, `content_part.done`, `output_item.done`, then
`response.completed` (`response.incomplete` when max_output_tokens cut it, `response.failed`
when the engine failed). A whole answer runs the very same machine without writing events, so
the final `response` object of a stream equals the non-streamed one (ids aside).

Text that is only whitespace (what a template leaves between a think block and a tool call) is
held back and opens no message of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from smg.errors import ApiError
from smg.pipeline.chat_answer import ChatStep
from smg.pipeline.choice import ChoiceState, OutputSpec
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta
from smg.pipeline.framed import FramedShaper, usage_count
from smg.pipeline.parsers.types import ParseDelta
from smg.pipeline.responses_object import failure, response_object, usage_object
from smg.pipeline.responses_request import ResponsesRequest

REASONING, MESSAGE, CALL = "reasoning", "message", "function_call"
PREFIX = {REASONING: "rs_", MESSAGE: "msg_", CALL: "fc_"}  # an item's id: prefix, base, index


class ResponsesShaper(FramedShaper):
    prefixes = PREFIX  # item kind -> id prefix

    def __init__(
        self, req: ResponsesRequest, response_id: str, spec: OutputSpec, decode: DecodeFn
    ) -> None:
        self.req = req
        self.id = response_id
        self.spec = spec
        self.state = ChoiceState(0, decode, spec)
        self.error: str | None = None
        self.items: list[dict[str, Any]] = []  # output items, open ones still growing
        self.texts: list[list[str]] = []  # per item: its text (or arguments) so far
        self.open: int | None = None  # the item output goes to now
        self.calls: dict[int, int] = {}  # a parser's call index -> its output index
        self.held = ""  # whitespace not yet shown (no message opened for it alone)
        self.seq = 0
        self.begun = False
        self.ended = False
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.reasoning_tokens = 0
        # the model has said something besides reasoning (without a parser it never reasons)
        self.past_reasoning = spec.parser is None
        self.final: dict[str, Any] = {}  # the terminal response object, once ended
        self._frames: list[bytes] | None = None  # None: a whole answer (no events written)
        self._base = response_id.removeprefix("resp_")

    # --- the flow's renderer interface -----------------------------------------------------------
    def failure_frames(self, err: ApiError) -> list[bytes]:
        self._frames = frames = list[bytes]()
        self._begin()
        self._close("incomplete")
        self.ended = True
        self._event("response.failed", response=self.response("failed", err))
        return frames

    def cancelled(self) -> dict[str, Any]:
        """The response as it stands, cancelled (its request is being ended: no more events are
        rendered; an item cut short is `incomplete`)."""
        self._frames = None
        self.ended = True
        self._close("incomplete")
        self._unfinished("incomplete", "The response was cancelled before the call was run")
        return self.response("cancelled", None)

    def whole(self) -> bytes | None:
        """The final response object; None when the engine failed with nothing to show."""
        self._frames = None
        if self.error is not None and not self.items and not self.held:
            return None
        self._end()
        if self.error is not None:
            return orjson.dumps(self.response("failed", None))
        return orjson.dumps(self.final)

    # --- HTTP mode: a worker's chat answer -------------------------------------------------------
    def _chat(self, step: ChatStep) -> None:
        state = self.state
        self._begin()
        if not state.done:
            self._apply(step.delta)
            if step.finish_reason is not None:
                state.done = True
                state.finish_reason = step.finish_reason
        usage = step.usage
        if usage is not None:  # the worker's counts (a stream sends them after the finish)
            self.prompt_tokens = usage_count(usage, "prompt_tokens")
            self.cached_tokens = usage_count(usage.get("prompt_tokens_details"), "cached_tokens")
            state.completion_tokens = usage_count(usage, "completion_tokens")
            details = usage.get("completion_tokens_details")
            self.reasoning_tokens = usage_count(details, "reasoning_tokens")

    # --- the machine -----------------------------------------------------------------------------
    def _feed(self, ev: EngineEvent) -> None:
        state = self.state
        if state.done or ev.index != 0:
            return
        self._begin()
        if isinstance(ev, Finished) and ev.finish_reason == "error":
            self.error = ev.error or "the engine failed"
        self.prompt_tokens = max(self.prompt_tokens, ev.prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, ev.cached_tokens)
        state.completion_tokens = max(state.completion_tokens, ev.completion_tokens)
        if isinstance(ev, TokenDelta):
            self._tokens(ev.token_ids)
            return
        if ev.token_ids:  # a whole answer's tokens come with its end
            self._tokens(ev.token_ids)
            if state.done:
                return
            ev = dataclasses.replace(ev, token_ids=[])
        self._step(state.finish(ev), 0)

    def _tokens(self, ids: list[int]) -> None:
        """Feed output tokens. Until the reasoning has ended they go one at a time, so the
        reasoning token count is exact and the same however the engine batched them (a stream
        of single tokens or a whole answer in one event); the rest goes at once."""
        state = self.state
        if self.past_reasoning or len(ids) == 1:
            self._step(state.feed(ids), len(ids))
            return
        for k in range(len(ids)):
            self._step(state.feed(ids[k : k + 1]), 1)
            if state.done:
                return
            if self.past_reasoning:
                rest = ids[k + 1 :]
                if rest:
                    self._step(state.feed(rest), len(rest))
                return

    def _step(self, text: str, tokens: int) -> None:
        delta = self.state.parse(text, final=self.state.done)
        if delta.calls or delta.normal_text.strip():
            self.past_reasoning = True
        self.reasoning_tokens += self._thinking(delta, tokens)
        self._apply(delta)

    def _thinking(self, delta: ParseDelta, tokens: int) -> int:
        """How many of `tokens` (those that said `delta`) were reasoning: all when they said
        only reasoning (or nothing yet, inside an open reasoning item); a share by characters
        when they said reasoning and more."""
        said = len(delta.normal_text) + sum(
            len(c.arguments) + len(c.name or "") for c in delta.calls
        )
        thought = len(delta.reasoning_text)
        if not said:
            return tokens if thought or self._open_kind() == REASONING else 0
        return round(tokens * thought / (thought + said))

    def _apply(self, delta: ParseDelta) -> None:
        if delta.reasoning_text:
            index = self._ensure(REASONING)
            self._grow(index, delta.reasoning_text, "response.reasoning_text.delta")
        if delta.normal_text:
            text = self.held + delta.normal_text
            if self._open_kind() != MESSAGE and not text.strip():
                self.held = text
            else:
                self.held = ""
                index = self._ensure(MESSAGE)
                self._grow(index, text, "response.output_text.delta")
        for call in delta.calls:
            if call.id is not None:
                self.held = ""
                self._close()
                self.calls[call.index] = self._add_call(call.id, call.name or "")
            index = self.calls.get(call.index, -1)
            if call.arguments and index >= 0:
                self.texts[index].append(call.arguments)
                event = self._arguments_event(self.items[index]["type"])
                if event is not None:
                    self._event(
                        event,
                        item_id=self.items[index]["id"],
                        output_index=index,
                        delta=call.arguments,
                    )

    # --- what a tool loop's renderer changes (smg.pipeline.responses_rounds) ---------------------
    def _add_call(self, call_id: str, name: str) -> int:
        """A tool call's item: a `function_call` for the client."""
        return self._add(CALL, {"call_id": call_id, "name": name, "arguments": ""})

    def _arguments_event(self, kind: str) -> str | None:
        """The event a call's arguments stream as (None: said whole when it is done)."""
        return "response.function_call_arguments.delta"

    def _close_other(self, index: int, text: str) -> bool:
        """Finish an item of a kind this class does not know (True: done)."""
        return False

    def _announce_first(self) -> None:
        """Events of items made before the first token (after `response.in_progress`)."""

    def _unfinished(self, status: str, why: str) -> None:
        """The answer ends early (`status` incomplete or failed, `why`): items left open."""

    def _pause(self) -> bool:
        """True when the answer must not end the response yet (its terminal event is not sent)."""
        return False

    def _open_kind(self) -> str | None:
        return None if self.open is None else self.items[self.open]["type"]

    def _ensure(self, kind: str) -> int:
        if self.open is not None and self.items[self.open]["type"] == kind:
            return self.open
        self._close()
        if kind == REASONING:
            index = self._add(REASONING, {"summary": []})
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            index = self._add(MESSAGE, {"role": "assistant", "content": []})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        self._event(
            "response.content_part.added",
            item_id=self.items[index]["id"],
            output_index=index,
            content_index=0,
            part=part,
        )
        return index

    def _add(self, kind: str, fields: dict[str, Any]) -> int:
        index = len(self.items)
        item = {"id": f"{self.prefixes[kind]}{self._base}{index:02x}", "type": kind, **fields}
        item["status"] = "in_progress"
        self.items.append(item)
        self.texts.append([])
        self.open = index
        self._event("response.output_item.added", output_index=index, item=item)
        return index

    def _grow(self, index: int, text: str, event: str) -> None:
        self.texts[index].append(text)
        extra: dict[str, Any] = {"logprobs": []} if event == "response.output_text.delta" else {}
        self._event(
            event,
            item_id=self.items[index]["id"],
            output_index=index,
            content_index=0,
            delta=text,
            **extra,
        )

    def _close(self, status: str = "completed") -> None:
        """Finish the open item: its `.done` events and its final shape."""
        index = self.open
        if index is None:
            return
        self.open = None
        item = self.items[index]
        item_id, text = item["id"], "".join(self.texts[index])
        if self._close_other(index, text):
            return
        if item["type"] == CALL:
            item["arguments"] = text
            self._event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=item["name"],
                arguments=text,
            )
        else:
            if item["type"] == REASONING:
                part: dict[str, Any] = {"type": "reasoning_text", "text": text}
                self._event(
                    "response.reasoning_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=text,
                )
            else:
                part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            item["content"] = [part]
            self._event(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=part,
            )
        item["status"] = status
        self._event("response.output_item.done", output_index=index, item=item)

    def _begin(self) -> None:
        if self.begun:
            return
        self.begun = True
        head = self.response("in_progress", None)
        self._event("response.created", response=head)
        self._event("response.in_progress", response=head)
        self._announce_first()

    def _end(self) -> None:
        """The answer has ended: close what is open and send the terminal event (once)."""
        if self.ended:
            return
        self._begin()
        self.ended = True
        state = self.state
        if not state.done:  # the engine never finished this answer
            state.done = True
            state.finish_reason = state.finish_reason or "abort"
            self._apply(state.parse(state.stop.finish(), final=True))
        cut = state.finish_reason == "length"
        self._close("incomplete" if cut else "completed")
        if self.error is not None:
            self._unfinished("incomplete", "The engine failed before the call was run")
            return  # the flow sends failure_frames (stream) or whole() answers failed
        if cut:
            self._unfinished("incomplete", "The call was cut short by max_output_tokens")
        elif self._pause():
            return
        self.final = self.response("incomplete" if cut else "completed", None)
        kind = "response.incomplete" if cut else "response.completed"
        self._event(kind, response=self.final)

    def _event(self, kind: str, **fields: Any) -> None:
        seq = self.seq
        self.seq = seq + 1
        if self._frames is None:
            return
        payload = {"type": kind, **fields, "sequence_number": seq}
        self._frames.append(
            b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
        )

    # --- the response object ---------------------------------------------------------------------
    def usage(self) -> dict[str, Any]:
        return usage_object(
            self.prompt_tokens, self.cached_tokens, self.state.completion_tokens,
            self.reasoning_tokens,
        )  # fmt: skip

    def response(
        self, status: str, err: ApiError | None, error: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """OpenAI's `response` object as it stands (`status`: in_progress, completed, ...)."""
        return response_object(
            self.req,
            self.id,
            self.spec.created,
            status,
            [dict(item) for item in self.items] if status != "in_progress" else [],
            self.usage() if status != "in_progress" else None,
            error=(error or failure(err)) if status == "failed" else None,
        )
