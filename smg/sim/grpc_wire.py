"""Each runtime's wire format: GenerateRequest -> `GenParams`, and the response messages.

What each runtime looks like on the wire (the gateway adapter must hide it):
- vLLM streams each chunk's `completion_tokens` as the tokens in that chunk; SGLang's are
  cumulative. Streaming, the last delta goes out as a chunk and again as the final
  `GenerateComplete.output_ids` (vLLM's `completion_tokens` there is that delta's length,
  SGLang's the total). Non-streaming, one `GenerateComplete` per choice carries every id.
- Unset temperature: vLLM 1.0 (an `optional` field), SGLang 0 = greedy (its plain float is
  passed through). vLLM top_k 0 = disabled. SGLang refuses, as its own SamplingParams check
  does, top_p outside (0, 1] and, when sampling, top_k other than -1 (disabled) or >= 1: the
  proto3 zero defaults are not SGLang's defaults.
- Unset max tokens: vLLM runs to the context length, SGLang stops at 128 (its default).
  max_tokens 0: vLLM refuses it; SGLang answers no tokens with "length".
- EOS: SGLang sets `matched_token_id` to the EOS id; vLLM leaves `matched_stop` unset (its
  stop_reason is None for EOS). stop_token_ids set `matched_token_id`, stop strings
  `matched_stop_str`, on both.
- Logprobs: vLLM `logprobs` = alternatives per token (0: the sampled token only, -1: 20, more
  than 20 refused); SGLang `return_logprob` + `top_logprobs_num`. The last vLLM stream message
  repeats the last delta's logprobs; SGLang's GenerateComplete carries all of them. Prompt
  logprobs (vLLM `prompt_logprobs`; SGLang `return_logprob` with `logprob_start_len >= 0`) go
  in each choice's first chunk and in its GenerateComplete; the first prompt token has none.
- SGLang's GenerateResponse carries `request_id`; it has no seed field (choices differ by
  index only). An aborted request ends with `finish_reason="abort"`.
- Greedy requests (temperature 0 or top_k 1) give the same output for every choice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from smg_grpc_proto.generated import sglang_scheduler_pb2 as sgl
from smg_grpc_proto.generated import vllm_engine_pb2 as vll

from smg.sim import script as sc
from smg.sim.engine_actor import Choice, GenParams, Job, SimEngine
from smg.sim.tokenizer_files import Vocab


def parse_vllm(req: vll.GenerateRequest, ctx_len: int) -> tuple[Sequence[int] | str, GenParams]:
    kind = req.WhichOneof("input")
    if kind is None:
        raise ValueError("GenerateRequest needs tokenized input or text")
    prompt: Sequence[int] | str = req.tokenized.input_ids if kind == "tokenized" else req.text
    sp = req.sampling_params
    if sp.HasField("max_tokens") and sp.max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {sp.max_tokens}.")
    for name in ("logprobs", "prompt_logprobs"):
        if sp.HasField(name) and getattr(sp, name) > sc.MAX_TOP_LOGPROBS:
            raise ValueError(
                f"Requested {name} of {getattr(sp, name)}, which is greater than max allowed: "
                f"{sc.MAX_TOP_LOGPROBS}"
            )
    temperature = sp.temperature if sp.HasField("temperature") else 1.0
    return prompt, GenParams(
        max_tokens=sp.max_tokens if sp.HasField("max_tokens") else ctx_len,
        min_tokens=sp.min_tokens,
        stop_token_ids=frozenset(sp.stop_token_ids),
        stop=tuple(sp.stop),
        ignore_eos=sp.ignore_eos,
        n=sp.n or 1,
        seed=sp.seed if sp.HasField("seed") else None,
        greedy=temperature < 1e-5 or sp.top_k == 1,
        logprobs=_top_k(sp.logprobs) if sp.HasField("logprobs") else None,
        input_logprobs=_top_k(sp.prompt_logprobs) if sp.HasField("prompt_logprobs") else None,
    )


def _top_k(value: int) -> int:
    return sc.MAX_TOP_LOGPROBS if value < 0 else value


def parse_sglang(req: sgl.GenerateRequest, ctx_len: int) -> tuple[Sequence[int], GenParams]:
    if not req.HasField("tokenized"):
        raise ValueError("Tokenized input must be provided")
    sp = req.sampling_params
    greedy = sp.temperature < 1e-6
    if sp.temperature < 0:
        raise ValueError(f"temperature must be non-negative, got {sp.temperature}.")
    if not 0.0 < sp.top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {sp.top_p}.")
    if not greedy and (sp.top_k < -1 or sp.top_k == 0):
        raise ValueError(f"top_k must be -1 (disable), or at least 1, got {sp.top_k}.")
    k = req.top_logprobs_num if req.return_logprob else None
    return req.tokenized.input_ids, GenParams(
        max_tokens=sp.max_new_tokens if sp.HasField("max_new_tokens") else 128,
        min_tokens=sp.min_new_tokens,
        stop_token_ids=frozenset(sp.stop_token_ids),
        stop=tuple(sp.stop),
        ignore_eos=sp.ignore_eos,
        n=sp.n or 1,
        greedy=greedy or sp.top_k == 1,
        logprobs=k,
        input_logprobs=k if req.return_logprob and req.logprob_start_len >= 0 else None,
        input_logprobs_start=max(0, req.logprob_start_len),
    )


class Wire:
    """Builds one runtime's GenerateResponse messages (both protos share these shapes)."""

    def __init__(self, pb: Any, vocab: Vocab) -> None:
        self.pb = pb
        self.sglang = pb is sgl  # cumulative counts and logprobs; request_id on responses
        self.cumulative = self.sglang
        self.words = vocab.words

    def _response(self, job: Job, **message: Any) -> Any:
        if self.sglang:
            return self.pb.GenerateResponse(request_id=job.request_id, **message)
        return self.pb.GenerateResponse(**message)

    def output_logprobs(self, job: Job, c: Choice, start: int, end: int) -> Any:
        k = job.params.logprobs
        if k is None or start >= end:
            return None
        msg = self.pb.OutputLogProbs()
        for pos in range(start, end):
            tid = c.output.token_ids[pos]
            msg.token_logprobs.append(sc.token_logprob(tid, pos))
            msg.token_ids.append(tid)
            if k > 0:
                values, ids = sc.top_alternatives(tid, pos, k, self.words)
                msg.top_logprobs.append(self.pb.TopLogProbs(values=values, token_ids=ids))
        return msg

    def input_logprobs(self, job: Job) -> Any:
        k = job.params.input_logprobs
        if k is None:
            return None
        msg = self.pb.InputLogProbs()
        for pos in range(job.params.input_logprobs_start, len(job.prompt)):
            tid = job.prompt[pos]
            entry = msg.token_logprobs.add()
            if pos > 0:
                entry.value = sc.token_logprob(tid, -pos)
            msg.token_ids.append(tid)
            if k > 0:
                top = msg.top_logprobs.add()
                if pos > 0:
                    values, ids = sc.top_alternatives(tid, -pos, k, self.words)
                    top.values.extend(values)
                    top.token_ids.extend(ids)
        return msg

    def chunk(self, job: Job, c: Choice, start: int, end: int) -> Any:
        msg = self.pb.GenerateStreamChunk(
            token_ids=c.output.token_ids[start:end],
            prompt_tokens=len(job.prompt),
            completion_tokens=end if self.cumulative else end - start,
            cached_tokens=job.cached,
            index=c.index,
        )
        lp = self.output_logprobs(job, c, start, end)
        if lp is not None:
            msg.output_logprobs.CopyFrom(lp)
        if start == 0:
            ilp = self.input_logprobs(job)
            if ilp is not None:
                msg.input_logprobs.CopyFrom(ilp)
        return self._response(job, chunk=msg)

    def complete(self, job: Job, c: Choice, start: int, end: int, reason: str | None = None) -> Any:
        """The final message of a choice carrying ids [start, end) (the last delta when
        streaming, everything otherwise); `reason` overrides the planned finish ("abort")."""
        out = c.output
        msg = self.pb.GenerateComplete(
            output_ids=out.token_ids[start:end],
            finish_reason=reason or out.finish_reason,
            prompt_tokens=len(job.prompt),
            completion_tokens=end if self.cumulative else end - start,
            cached_tokens=job.cached,
            index=c.index,
        )
        if reason is None and out.matched_token_id is not None:
            msg.matched_token_id = out.matched_token_id
        elif reason is None and out.matched_stop_str is not None:
            msg.matched_stop_str = out.matched_stop_str
        lp = self.output_logprobs(job, c, 0 if self.cumulative else start, end)
        if lp is not None:
            msg.output_logprobs.CopyFrom(lp)
        ilp = self.input_logprobs(job)
        if ilp is not None:
            msg.input_logprobs.CopyFrom(ilp)
        return self._response(job, complete=msg)


async def answer(engine: SimEngine, wire: Wire, job: Job, stream: bool) -> AsyncIterator[Any]:
    """The response messages of one Generate call, as the engine produces tokens."""
    step = max(1, engine.cfg.chunk_tokens)
    choices = job.choices
    while True:
        job.wake.clear()
        moved = False
        for c in choices:
            if c.reported:
                continue
            total = len(c.output.token_ids)
            if stream and c.sent < c.ready:
                start, end = c.sent, min(c.ready, c.sent + step)
                c.sent = end
                moved = True
                yield wire.chunk(job, c, start, end)
                if c.done and end == total:
                    c.reported = True
                    yield wire.complete(job, c, start, end)
            elif c.done and c.sent == (total if stream else 0):
                c.reported = True
                moved = True
                yield wire.complete(job, c, c.sent, total)
        if all(c.reported for c in choices):
            return
        if job.aborted:
            for c in choices:
                if not c.reported:
                    c.reported = True
                    start = c.sent if stream else 0
                    yield wire.complete(job, c, start, c.sent if stream else c.ready, "abort")
            return
        if not moved:
            await job.wake.wait()
