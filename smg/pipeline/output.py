"""Engine events → OpenAI responses (pure; no IO).

`OutputShaper` keeps one `ChoiceState` per choice: an incremental detokenizer and a stop matcher.
For a stream, `on_event` returns the SSE frames to write for one engine event; for a whole
answer, `collect` accumulates and `body()` builds the final JSON (`whole()`: its bytes). It is
the OpenAI surfaces' renderer in the request flow (smg/flow/render.py; SGLang's /generate has
`GenerateShaper`, smg/pipeline/generate_output.py). The two paths share the same
per-choice text machine, so streamed text always equals non-streamed text for the same tokens.
A choice stops when the engine finishes it or when a stop string completes (then the engine call
is no longer needed: `all_done` tells the caller to cancel it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from smg.errors import ApiError
from smg.pipeline.choice import DONE_FRAME, ChoiceState, OutputSpec
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta, TokenLogprob
from smg.pipeline.parsers.types import CallDelta, ParseDelta

# what follows a plain content delta's text in its frame (see `OutputShaper._content_heads`)
_CONTENT_TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'


def openai_renderer(spec: OutputSpec, decode: DecodeFn, now: Callable[[], float]) -> OutputShaper:
    """The OpenAI chat and completions renderer (`now` unused: these shapes carry no latency)."""
    return OutputShaper(spec, decode)


class OutputShaper:
    def __init__(
        self,
        spec: OutputSpec,
        decode: DecodeFn,
        token_text: Callable[[int], str] | None = None,
    ) -> None:
        self.spec = spec
        self.choices = [ChoiceState(i, decode, spec) for i in range(spec.n)]
        self._by_index = dict(enumerate(self.choices))  # an engine event's choice: one lookup
        self.token_text = token_text or (lambda tid: decode([tid], False))
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.error: str | None = None
        # every choice has ended (the engine call is no longer needed): an attribute, set where
        # a choice ends (`_ended`), as the stream's pipe reads it after every engine read
        self.all_done = not self.choices
        kind = "chat.completion.chunk" if spec.chat else "text_completion"
        head = {"id": spec.response_id, "object": kind, "created": spec.created}
        head["model"] = spec.model
        if spec.system_fingerprint is not None:
            head["system_fingerprint"] = spec.system_fingerprint
        self._head = head
        self._plain_chat = spec.chat and spec.parser is None and not spec.logprobs
        # a stream's frame heads, made by its first frame (`_streaming`): a whole answer,
        # which never writes a frame, does not pay for them
        self._prefix = b""
        self._content_heads: list[bytes] = []

    def _streaming(self) -> None:
        # every frame is `data: {<head>,"choices":[<choice>]}`: serialise the head once
        self._prefix = prefix = b"data: " + orjson.dumps(self._head)[:-1] + b',"choices":['
        # a plain content delta's frame around its text, per choice: only the text is encoded
        # per token (a dict built and dumped per token was a third of `on_event`)
        self._content_heads = [
            prefix + b'{"index":' + str(i).encode() + b',"delta":{"content":'
            for i in range(self.spec.n)
        ]

    # --- shared ----------------------------------------------------------------------------------
    def _ended(self) -> None:
        """A choice ended: is every one?"""
        self.all_done = all(c.done for c in self.choices)

    def _choice(self, index: int) -> ChoiceState | None:
        return self._by_index.get(index)

    def _account(self, ev: EngineEvent, state: ChoiceState) -> None:
        self.prompt_tokens = max(self.prompt_tokens, ev.prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, ev.cached_tokens)
        state.completion_tokens = max(state.completion_tokens, ev.completion_tokens)
        if self.spec.logprobs and ev.logprobs:
            state.logprobs.extend(ev.logprobs)

    def usage(self) -> dict[str, Any]:
        completion = sum(c.completion_tokens for c in self.choices)
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }
        if self.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    # --- streaming -------------------------------------------------------------------------------
    def on_event(self, ev: EngineEvent) -> list[bytes]:
        state = self._by_index.get(ev.index)
        if state is None or state.done:
            return []
        if self._plain_chat and state.started and type(ev) is TokenDelta:
            return self.on_events((ev,))
        return self._event(ev, state)

    def on_events(self, batch: Iterable[EngineEvent]) -> list[bytes]:
        """The frames of events that arrived together, in order, up to the one that ends the
        last choice (as `on_event` one at a time): the per-token common case, chat text without
        parser or logprobs, inline (one call a batch, not one an event)."""
        frames: list[bytes] = []
        by_index, plain = self._by_index, self._plain_chat
        for ev in batch:
            state = by_index.get(ev.index)
            if state is None or state.done:
                continue
            if plain and state.started and type(ev) is TokenDelta:  # (started: heads made)
                if ev.prompt_tokens > self.prompt_tokens:
                    self.prompt_tokens = ev.prompt_tokens
                if ev.cached_tokens > self.cached_tokens:
                    self.cached_tokens = ev.cached_tokens
                if ev.completion_tokens > state.completion_tokens:
                    state.completion_tokens = ev.completion_tokens
                text = state.text_of(ev.token_ids)
                if text:
                    state.text.append(text)
                    frames.append(
                        self._content_heads[ev.index] + orjson.dumps(text) + _CONTENT_TAIL
                    )
                if not state.done:
                    continue
                frames.append(self._frame(ev.index, None, finish=state))  # a stop string ended it
                self._ended()
            else:
                frames += self._event(ev, state)
            if self.all_done:
                break
        return frames

    def _event(self, ev: EngineEvent, state: ChoiceState) -> list[bytes]:
        """One event's frames, any case (`state`: its choice's, not done)."""
        if not self._prefix:
            self._streaming()
        frames: list[bytes] = []
        if not state.started:
            state.started = True
            if self.spec.chat:
                frames.append(self._frame(state.index, {"role": "assistant", "content": ""}))
        if isinstance(ev, Finished) and ev.finish_reason == "error":
            self.error = ev.error or "the engine failed"
        lp_start = len(state.logprobs)
        self._account(ev, state)
        text = state.feed(ev.token_ids) if isinstance(ev, TokenDelta) else state.finish(ev)
        new_lp = state.logprobs[lp_start:] if self.spec.logprobs else None
        if self.spec.chat:
            delta = state.parse(text, final=state.done)
            content = _chat_delta(delta)
            if content or new_lp:
                frames.append(self._frame(state.index, content, logprobs=new_lp))
        elif text or new_lp:
            state.text.append(text)
            frames.append(self._frame(state.index, text, logprobs=new_lp))
        if state.done:
            frames.append(self._frame(state.index, None, finish=state))
            self._ended()
        return frames

    def closing_frames(self) -> list[bytes]:
        """After the last event: finish choices the engine never finished, usage, [DONE]."""
        if not self._prefix:
            self._streaming()
        frames: list[bytes] = []
        for state in self.choices:
            if not state.done:
                state.done = True
                state.finish_reason = state.finish_reason or "abort"
                if self.spec.chat:
                    content = _chat_delta(state.parse(state.stop.finish(), final=True))
                    if content:
                        frames.append(self._frame(state.index, content))
                frames.append(self._frame(state.index, None, finish=state))
        self.all_done = True
        if self.spec.include_usage:
            payload = {**self._head, "choices": [], "usage": self.usage()}
            frames.append(b"data: " + orjson.dumps(payload) + b"\n\n")
        frames.append(DONE_FRAME)
        return frames

    def _frame(
        self,
        index: int,
        content: str | dict[str, Any] | None,
        *,
        finish: ChoiceState | None = None,
        logprobs: list[TokenLogprob] | None = None,
    ) -> bytes:
        choice: dict[str, Any] = {"index": index}
        if self.spec.chat:
            if isinstance(content, dict):
                choice["delta"] = content
            else:
                choice["delta"] = {} if content is None else {"content": content}
            choice["logprobs"] = self._chat_logprobs(logprobs) if logprobs else None
        else:
            choice["text"] = "" if content is None or isinstance(content, dict) else content
            choice["logprobs"] = self._completion_logprobs(logprobs) if logprobs else None
        choice["finish_reason"] = finish.finish_reason if finish is not None else None
        if finish is not None and finish.matched_stop is not None:
            choice["matched_stop"] = finish.matched_stop
        return self._prefix + orjson.dumps(choice) + b"]}\n\n"

    def failure_frames(self, err: ApiError) -> list[bytes]:
        """The error event that tells a streaming client the engine failed (before [DONE])."""
        return [b"data: " + err.to_json() + b"\n\n"]

    # --- whole answers ---------------------------------------------------------------------------
    def whole(self) -> bytes | None:
        """The whole answer's body; None when the engine failed before any text (the client
        gets an error instead)."""
        if self.error is not None and not any(c.text for c in self.choices):
            return None
        return orjson.dumps(self.body())

    def collect(self, ev: EngineEvent) -> None:
        state = self._choice(ev.index)
        if state is None:
            return
        if state.done:
            return
        if isinstance(ev, Finished) and ev.finish_reason == "error":
            self.error = ev.error or "the engine failed"
        self._account(ev, state)
        text = state.feed(ev.token_ids) if isinstance(ev, TokenDelta) else state.finish(ev)
        if self.spec.chat:
            state.parse(text, final=state.done)
        else:
            state.text.append(text)
        if state.done:
            self._ended()

    def body(self) -> dict[str, Any]:
        choices = []
        for state in self.choices:
            if not state.done:
                state.done = True
                state.finish_reason = state.finish_reason or "abort"
                if self.spec.chat:
                    state.parse(state.stop.finish(), final=True)
                else:
                    state.text.append(state.stop.finish())
            text = "".join(state.text)
            choice: dict[str, Any] = {"index": state.index}
            lp = state.logprobs if self.spec.logprobs else None
            if self.spec.chat:
                choice["message"] = _message(state, text, parsing=self.spec.parser is not None)
                choice["logprobs"] = self._chat_logprobs(lp) if lp else None
            else:
                if self.spec.echo_prompt is not None:
                    text = self.spec.echo_prompt + text
                choice["text"] = text
                choice["logprobs"] = self._completion_logprobs(lp) if lp else None
            choice["finish_reason"] = state.finish_reason
            if state.matched_stop is not None:
                choice["matched_stop"] = state.matched_stop
            choices.append(choice)
        self.all_done = True
        kind = "chat.completion" if self.spec.chat else "text_completion"
        return {**self._head, "object": kind, "choices": choices, "usage": self.usage()}

    # --- logprobs --------------------------------------------------------------------------------
    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    def _chat_logprobs(self, lps: list[TokenLogprob]) -> dict[str, Any]:
        content = []
        for lp in lps:
            entry = self._entry(lp.token_id, lp.logprob)
            entry["top_logprobs"] = [
                self._entry(tid, val) for tid, val in lp.top[: self.spec.top_logprobs]
            ]
            content.append(entry)
        return {"content": content}

    def _completion_logprobs(self, lps: list[TokenLogprob]) -> dict[str, Any]:
        tokens = [self.token_text(lp.token_id) for lp in lps]
        return {
            "tokens": tokens,
            "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [
                {self.token_text(tid): val for tid, val in lp.top[: self.spec.top_logprobs]}
                for lp in lps
            ],
            "text_offset": [],
        }


def _chat_delta(delta: ParseDelta) -> dict[str, Any] | None:
    """A parse delta as an OpenAI chat `delta` object (None when there is nothing to send)."""
    if not delta:
        return None
    out: dict[str, Any] = {}
    if delta.reasoning_text:
        out["reasoning_content"] = delta.reasoning_text
    if delta.normal_text:
        out["content"] = delta.normal_text
    if delta.calls:
        out["tool_calls"] = [_call_delta(c) for c in delta.calls]
    return out


def _call_delta(c: CallDelta) -> dict[str, Any]:
    if c.id is None:
        return {"index": c.index, "function": {"arguments": c.arguments}}
    return {
        "index": c.index,
        "id": c.id,
        "type": "function",
        "function": {"name": c.name, "arguments": c.arguments},
    }


def _message(state: ChoiceState, text: str, *, parsing: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if not parsing:
        return message
    if state.calls:
        if not text:
            message["content"] = None
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for _, (cid, name, args) in sorted(state.calls.items())
        ]
    message["reasoning_content"] = "".join(state.reasoning) or None
    return message
