"""What the gRPC pipeline says to an engine and hears back, independent of the engine's runtime.

The engine adapter (`smg/pipeline/backends/grpc.py`) turns these into the vLLM or SGLang protobuf
messages and normalises the replies (per-chunk token ids, cumulative counts, no repeated final
delta), so everything above it sees one shape. Per-token paths use these slotted records, built
once per engine chunk (a chunk carries several tokens), not per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smg.core.records import record


@record  # frozen to the type checker; a plain slots init (built on every request)
class SamplingParams:
    """Sampling as the OpenAI request asked for it, validated. None means "engine default"."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # None or -1: disabled
    min_p: float | None = None
    max_tokens: int | None = None
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    n: int = 1
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logprobs: int | None = None  # top-k alternatives per output token; None: no logprobs
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # structured output: at most one is set
    json_schema: str | None = None
    json_object: bool = False
    regex: str | None = None
    grammar: str | None = None  # EBNF (SGLang's `ebnf` request field)
    logit_bias: tuple[tuple[int, float], ...] = ()


@record
class EngineRequest:
    request_id: str
    input_ids: tuple[int, ...]
    sampling: SamplingParams
    stream: bool
    original_text: str = ""
    # prefill/decode disaggregation (smg.pipeline.pd_grpc): SGLang's bootstrap rendezvous
    # (host, port, room) or vLLM's connector params as a JSON object; None outside PD mode
    bootstrap: tuple[str, int, int] | None = None
    kv_transfer_params_json: str | None = None
    # the engine's id of the LoRA adapter the request names (SGLang's lora_id); None: the base
    lora_id: str | None = None
    # the data-parallel rank the request is for (`--dp-aware`); None: the engine picks
    dp_rank: int | None = None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob) alternatives


@dataclass(slots=True)
class TokenDelta:
    """New output tokens of one choice. Counts are cumulative for the choice (normalised)."""

    index: int
    token_ids: list[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class Finished:
    """The end of one choice. `token_ids` holds tokens not yet delivered as deltas: all of them
    for a non-streaming call, normally none for a stream (the adapter drops the repeated final
    delta an engine sends)."""

    index: int
    finish_reason: str  # "stop" | "length" | "abort" | "error"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    matched_stop: int | str | None = None
    logprobs: list[TokenLogprob] | None = None
    error: str | None = None
    kv_transfer_params_json: str | None = None  # vLLM PD: what a prefill hands the decode


EngineEvent = TokenDelta | Finished


@dataclass(frozen=True, slots=True)
class EngineModelInfo:
    model_id: str
    runtime: str  # "vllm" | "sglang"
    max_context_length: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    served_model_name: str | None = None
    tokenizer_path: str | None = None
