"""The vLLM or SGLang reply messages of smg-grpc-proto 0.4.28 -> our engine types. Pure.

The per-request `ResponseNormaliser` turns either runtime's stream of `GenerateResponse` messages
into one shape of `TokenDelta` / `Finished` events; the control-plane helpers read model info and
loads. How the two runtimes differ on the way out, and what this module does about it:

* Counts. vLLM's `GenerateStreamChunk.completion_tokens` is the size of that chunk; SGLang's is
  cumulative. Our `TokenDelta.completion_tokens` is always cumulative per choice.
* The final message. Streaming, both servicers send the last chunk and then a `GenerateComplete`
  whose `output_ids` (and logprobs) repeat that chunk; the repeat is dropped, so
  `Finished.token_ids` is empty. vLLM's streaming `GenerateComplete.completion_tokens` is also just
  that chunk's size: the count is carried over from the chunks. Not streaming, there are no chunks
  and `Finished.token_ids` carries every output id.
* Logprobs: both answer with `OutputLogProbs`; vLLM's top-k lists come in its dict order (the
  sampled token first), so every list is sorted by logprob, best first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from smg.pipeline.backends.grpc_contract import SGLANG, VLLM
from smg.pipeline.engine_types import EngineModelInfo, Finished, TokenDelta, TokenLogprob

_new = object.__new__

_FINISH_REASONS = {
    "stop": "stop",
    "eos": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "abort": "abort",
    "cancelled": "abort",
    "error": "error",
}


def finish_reason(raw: str) -> str:
    """An engine's finish reason as one of ours; empty or unknown reasons are a normal stop (both
    servicers default to "stop")."""
    return _FINISH_REASONS.get(raw.lower(), "stop")


def logprobs_from_proto(lp: Any) -> list[TokenLogprob]:
    """`OutputLogProbs` (same shape in both runtimes) -> one record per position."""
    tops = lp.top_logprobs
    out: list[TokenLogprob] = []
    for i, (token_id, value) in enumerate(zip(lp.token_ids, lp.token_logprobs, strict=False)):
        top: tuple[tuple[int, float], ...] = ()
        if i < len(tops):
            alts = zip(tops[i].token_ids, tops[i].values, strict=False)
            top = tuple(sorted(alts, key=lambda pair: -pair[1]))
        out.append(TokenLogprob(token_id, value, top))
    return out


@dataclass(slots=True)
class _Choice:
    delivered: list[int] = field(default_factory=list)  # streamed ids (streaming only)
    last: list[int] = field(default_factory=list)  # the latest chunk's ids
    completion: int = 0
    prompt: int = 0
    cached: int = 0
    done: bool = False


class ResponseNormaliser:
    """The state of one Generate call: feed it each `GenerateResponse`, get our events.
    `logprobs`: the request asked for them (else an answer's are not read)."""

    __slots__ = (
        "_choices",
        "_cumulative",
        "_done",
        "_logprobs",
        "_n",
        "_stream",
        "_vllm",
        "all_finished",
    )

    def __init__(self, runtime: str, *, stream: bool, n: int, logprobs: bool = True) -> None:
        self._cumulative = runtime == SGLANG  # SGLang counts are cumulative, vLLM's per chunk
        self._vllm = runtime == VLLM
        self._stream = stream
        self._n = max(n, 1)
        self._logprobs = logprobs
        self._choices: dict[int, _Choice] = {}
        self._done = 0  # choices finished
        self.all_finished = False  # every choice is (an attribute: read once a read per call)

    def feed(self, response: Any) -> TokenDelta | Finished | None:
        events = self.feed_all((response,))
        return events[0] if events else None

    def feed_all(self, responses: Iterable[Any]) -> list[TokenDelta | Finished]:
        """The events of `responses` (those that arrived together), in order. Per token (a
        chunk): one loop turn, each protobuf field read once (a upb getattr is not free)."""
        events: list[TokenDelta | Finished] = []
        choices, stream, cumulative = self._choices, self._stream, self._cumulative
        for response in responses:
            kind = response.WhichOneof("response")
            if kind != "chunk":
                if kind == "complete":
                    done = self._complete(response.complete)
                    if done is not None:
                        events.append(done)
                continue
            c = response.chunk
            index = c.index
            ch = choices.get(index)
            if ch is None:
                ch = choices[index] = _Choice()
            elif ch.done:
                continue
            ids = c.token_ids[:]  # a list (a slice of upb's container: half of list()'s cost)
            if cumulative:
                ch.completion = c.completion_tokens or ch.completion + len(ids)
            else:  # count the ids themselves: right whether an engine sends per-chunk or running
                ch.completion += len(ids)
            prompt = ch.prompt = c.prompt_tokens or ch.prompt
            cached = ch.cached = c.cached_tokens or ch.cached
            if not ids:
                continue
            if stream:
                ch.delivered.extend(ids)
                ch.last = ids
            if self._logprobs and c.HasField("output_logprobs"):
                lps = logprobs_from_proto(c.output_logprobs)
                events.append(TokenDelta(index, ids, prompt, ch.completion, cached, lps))
            else:  # (built field by field: no type call and __init__ frame a message)
                ev = _new(TokenDelta)
                ev.index = index
                ev.token_ids = ids
                ev.prompt_tokens = prompt
                ev.completion_tokens = ch.completion
                ev.cached_tokens = cached
                ev.logprobs = None
                events.append(ev)
        return events

    def fail(self, error: str) -> list[Finished]:
        """`Finished(error)` for every choice not finished yet (the call broke mid-way)."""
        out = []
        for index in sorted(set(range(self._n)) | self._choices.keys()):
            ch = self._choice(index)
            if ch.done:
                continue
            ch.done = True
            self._done += 1
            self.all_finished = self._done >= self._n
            out.append(
                Finished(
                    index=index,
                    finish_reason="error",
                    prompt_tokens=ch.prompt,
                    completion_tokens=ch.completion,
                    cached_tokens=ch.cached,
                    error=error,
                )
            )
        return out

    def _choice(self, index: int) -> _Choice:
        ch = self._choices.get(index)
        if ch is None:
            ch = self._choices[index] = _Choice()
        return ch

    def _complete(self, c: Any) -> Finished | None:
        ch = self._choice(c.index)
        if ch.done:
            return None
        ids = list(c.output_ids)
        logprobs = None
        if self._logprobs and c.HasField("output_logprobs"):
            logprobs = logprobs_from_proto(c.output_logprobs)
        ch.prompt = c.prompt_tokens or ch.prompt
        ch.cached = c.cached_tokens or ch.cached
        if self._stream:
            new = _unseen(ids, ch)
            logprobs = logprobs[-len(new) :] if logprobs and new else None
            if self._cumulative:
                ch.completion = c.completion_tokens or ch.completion + len(new)
            else:  # vLLM's streaming Complete counts only its repeated chunk
                ch.completion += len(new)
        else:
            new = ids
            ch.completion = c.completion_tokens or len(ids)
        ch.done = True
        self._done += 1
        self.all_finished = self._done >= self._n
        which = c.WhichOneof("matched_stop")
        matched: int | str | None = None
        if which == "matched_token_id":
            matched = c.matched_token_id
        elif which == "matched_stop_str":
            matched = c.matched_stop_str
        reason = finish_reason(c.finish_reason)
        kv_params = None
        if self._vllm:
            kv_params = kv_transfer_params_of(c)
        return Finished(
            index=c.index,
            finish_reason=reason,
            prompt_tokens=ch.prompt,
            completion_tokens=ch.completion,
            cached_tokens=ch.cached,
            token_ids=new,
            matched_stop=matched,
            logprobs=logprobs or None,
            error=f"the engine finished with {c.finish_reason!r}" if reason == "error" else None,
            kv_transfer_params_json=kv_params,
        )


def kv_transfer_params_of(complete: Any) -> str | None:
    """vLLM's `GenerateComplete` KV-transfer params as a JSON object: `kv_transfer_params_json`,
    else the deprecated typed `kv_transfer_params` (Mooncake's remote host and port)."""
    if complete.HasField("kv_transfer_params_json"):
        return str(complete.kv_transfer_params_json)
    if complete.HasField("kv_transfer_params"):
        kv = complete.kv_transfer_params
        return json.dumps({"remote_host": kv.remote_host, "remote_port": kv.remote_port})
    return None


def _unseen(ids: list[int], ch: _Choice) -> list[int]:
    """The ids of a streaming Complete not already delivered as deltas."""
    if not ids or ids == ch.last:
        return []  # the documented repeat of the last chunk
    done = ch.delivered
    if len(ids) >= len(done) and ids[: len(done)] == done:
        return ids[len(done) :]  # a cumulative list: only its unseen tail
    return ids  # tokens that were never streamed


# --- control plane -----------------------------------------------------------------------------


def model_info_from(runtime: str, info: Any, server_info: Any = None) -> EngineModelInfo:
    max_context = int(info.max_context_length) or None
    if max_context is None and server_info is not None and runtime == SGLANG:
        args = server_info.server_args
        if "context_length" in args.fields:
            value = args.fields["context_length"]
            if value.WhichOneof("kind") == "number_value" and value.number_value > 0:
                max_context = int(value.number_value)
    served = info.served_model_name or None
    return EngineModelInfo(
        model_id=served or info.model_path,
        runtime=runtime,
        max_context_length=max_context,
        eos_token_ids=tuple(info.eos_token_ids),
        served_model_name=served,
        tokenizer_path=info.tokenizer_path or None,
    )


def loads_from(response: Any) -> dict[str, Any]:
    """`GetLoadsResponse` summed over DP ranks (token_usage averaged)."""
    loads = list(response.loads)
    ranks = len(loads)
    return {
        "dp_ranks": ranks,
        "running": sum(x.num_running_reqs for x in loads),
        "waiting": sum(x.num_waiting_reqs for x in loads),
        "used_tokens": sum(x.num_used_tokens for x in loads),
        "max_total_tokens": sum(x.max_total_num_tokens for x in loads),
        "token_usage": sum(x.token_usage for x in loads) / ranks if ranks else 0.0,
        "gen_throughput": sum(x.gen_throughput for x in loads),
    }
