"""The simulated gRPC engine's actor: scheduler, requests in flight, counters.

`SimEngine` owns the pure scheduler (`engine_core.EngineCore`) and is driven by one timer on
the injected clock (no task of its own). `start` plans a request's outputs with `script.py`,
queues one core sequence per choice and pumps; each pump runs the scheduler to `now`, wakes
the handlers whose choices moved, publishes KV events and re-arms the timer at the next step's
end. Handlers (see `grpc_wire.answer`) read their `Job` and stream. KV events go out through
`kv_publisher.KvPublisher` (`engine.kv`).

Tokenizer work: scripted replies are encoded (once per distinct reply), and prompts longer than
`INLINE_DECODE_TOKENS` decoded, by the tokenizer's batch calls in a thread pool, since on the
loop they would stall it. Shorter prompts are decoded inline from the byte table (~20 us for
200 tokens, less than the ~200 us thread hop); both give the same text.

Counters (`EngineStats`): requests (accepted Generate calls), completed (every choice
answered), aborted (in-flight requests ended by the Abort RPC), abort_requests (ids named by
Abort calls, found or not), cancelled (the client went away first), rejected (invalid
arguments or too big), in_flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from smg.clock import Clock, LoopClock, TimerHandle
from smg.sim import script as sc
from smg.sim.engine_core import CapacityError, CoreConfig, EngineCore, Load
from smg.sim.kv_publisher import KvPublisher
from smg.sim.tokenizer_files import Vocab

log = structlog.get_logger("smg.sim.grpc")
INLINE_DECODE_TOKENS = 1024  # longer prompts are decoded by the tokenizer in the thread pool


@dataclass(frozen=True, slots=True)
class GrpcSimConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    runtime: str = "vllm"  # "vllm" | "sglang"
    model: str = "sim-model"
    seed: int = 0
    script: sc.Script = field(default_factory=sc.Script)
    core: CoreConfig = field(default_factory=CoreConfig)
    context_length: int = 32768
    chunk_tokens: int = 8  # most tokens per streamed chunk when several are ready
    corrupt_tokenizer_sha: bool = False  # test knob: GetTokenizer sends a wrong sha256
    tokenizer_dir: Path | None = None  # None: the bundled Qwen3 files
    stats_port: int = 0  # 0: no HTTP /sim/stats
    kv_heartbeat_s: float = 1.0
    role: str = "regular"  # "prefill" | "decode" | "regular": PD disaggregation role
    bootstrap_port: int = 0  # SGLang PD: the KV bootstrap port reported by GetServerInfo
    tls_cert_path: str | None = None  # serve gRPC over TLS with this certificate and key
    tls_key_path: str | None = None
    tls_client_ca_path: str | None = None  # require client certificates signed by this CA
    # SGLang: LoRA adapter names served besides the model (ListLoadedLoRAAdapters lists each
    # with the id `lora_id_of(name)`; Generate takes that id in `lora_id`)
    adapters: tuple[str, ...] = ()
    dp_size: int = 1  # data-parallel ranks reported (vLLM data_parallel_size, SGLang dp_size)


@dataclass(slots=True)
class EngineStats:
    requests: int = 0
    completed: int = 0
    aborted: int = 0
    abort_requests: int = 0
    cancelled: int = 0
    rejected: int = 0
    in_flight: int = 0
    pd_requests: int = 0  # Generate calls carrying a bootstrap room or KV-transfer params
    last_bootstrap_port: int = 0  # SGLang PD decode: the prefill bootstrap port last named
    embed_requests: int = 0  # Embed calls answered (one per embedded input)
    lora_requests: int = 0  # Generate calls naming a loaded adapter (SGLang lora_id)
    last_traceparent: str = ""  # the W3C traceparent metadata of the last Generate call
    # requests (Generate and Embed) per data-parallel rank they named ("-1": none)
    dp_ranks: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class GenParams:
    """A generation request after its runtime's defaults: what the engine will do."""

    max_tokens: int
    min_tokens: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    n: int = 1
    seed: int | None = None
    greedy: bool = False
    logprobs: int | None = None  # top alternatives per output token; None: no logprobs
    input_logprobs: int | None = None  # the same for prompt tokens; None: none
    input_logprobs_start: int = 0


class Choice:
    __slots__ = ("done", "index", "output", "ready", "reported", "sent")

    def __init__(self, index: int, output: sc.Output) -> None:
        self.index = index
        self.output = output
        self.ready = 0  # tokens the engine has produced
        self.sent = 0  # tokens the handler has streamed
        self.done = False
        self.reported = False


class Job:
    """One Generate call in flight."""

    __slots__ = ("aborted", "cached", "choices", "key", "params", "prompt", "request_id", "wake")

    def __init__(self, key: int, request_id: str, prompt: tuple[int, ...], params: GenParams):
        self.key = key
        self.request_id = request_id
        self.prompt = prompt
        self.params = params
        self.choices: list[Choice] = []
        self.cached = 0
        self.aborted = False
        self.wake = asyncio.Event()


class SimEngine:
    """The engine actor: scheduler, request registry, counters; owns the KV-event publisher."""

    def __init__(
        self,
        cfg: GrpcSimConfig,
        vocab: Vocab,
        *,
        clock: Clock | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.vocab = vocab
        self.clock = clock or LoopClock()
        self.wall = wall
        self.started_at = wall()
        self.last_receive = 0.0
        self.stats = EngineStats()
        self.core = EngineCore(cfg.core)
        self.words = sc.WordStream(cfg.seed, vocab.words)
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sim-tokenizer")
        self._timer: TimerHandle | None = None
        self._next_key = 0
        self._jobs: dict[str, list[Job]] = {}
        self._seqs: dict[Hashable, tuple[Job, Choice]] = {}
        self._replies: dict[str, tuple[int, ...]] = {}
        self.kv = KvPublisher(
            block_size=cfg.core.block_size,
            heartbeat_s=cfg.kv_heartbeat_s,
            load=self.load,
            clock=self.clock,
            wall=wall,
        )

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ requests

    async def start(self, request_id: str, prompt: Sequence[int] | str, params: GenParams) -> Job:
        """Plan the outputs and queue the request. ValueError/CapacityError: refuse it."""
        self.last_receive = self.wall()
        loop = asyncio.get_running_loop()
        if isinstance(prompt, str) or len(prompt) > INLINE_DECODE_TOKENS:
            ids, text = await loop.run_in_executor(self.executor, self._prompt_and_text, prompt)
        else:  # a thread hop costs ~200 us; the byte table decodes a short prompt in ~20 us
            ids = list(prompt)
            text = sc.decode_bytes(self.vocab.table, ids)
        if not ids:
            raise ValueError("the prompt cannot be empty")
        if len(ids) >= self.cfg.context_length:
            raise ValueError(
                f"prompt has {len(ids)} tokens; the model's context length is "
                f"{self.cfg.context_length}"
            )
        reply = self.cfg.script.reply_for(text)
        content = None
        if reply is not None:
            content = self._replies.get(reply)
            if content is None:
                content = await loop.run_in_executor(self.executor, self._encode, reply)
                if len(self._replies) < 1024:
                    self._replies[reply] = content
        job = Job(self._next_key, request_id, tuple(ids), params)
        self._next_key += 1
        rule = sc.StopRule(
            max_tokens=min(params.max_tokens, self.cfg.context_length - len(ids)),
            eos_ids=frozenset(self.vocab.eos_ids),
            min_tokens=params.min_tokens,
            stop_token_ids=params.stop_token_ids,
            stop=params.stop,
            ignore_eos=params.ignore_eos,
            eos_reports_match=self.cfg.runtime == "sglang",
        )
        now = self.clock.now()
        for i in range(params.n):
            key = sc.choice_key(self.cfg.seed, params.seed, job.prompt, i, params.greedy)
            body = content if content is not None else self.words.take(key, sc.natural_length(key))
            out = sc.finish(body, self.words, key, rule, self.vocab.table)
            job.choices.append(Choice(i, out))
        try:
            for c in job.choices:
                self.core.add(now, (job.key, c.index), job.prompt, c.output.token_ids)
                self._seqs[(job.key, c.index)] = (job, c)
        except CapacityError:
            self._drop_seqs(job)
            raise
        self._jobs.setdefault(request_id, []).append(job)
        self.stats.requests += 1
        self.stats.in_flight += 1
        self._pump(changed=True)
        return job

    def _prompt_and_text(self, prompt: Sequence[int] | str) -> tuple[list[int], str]:
        tok = self.vocab.tokenizer
        if isinstance(prompt, str):
            return tok.encode_batch([prompt], add_special_tokens=False)[0].ids, prompt
        ids = list(prompt)
        return ids, tok.decode_batch([ids], skip_special_tokens=False)[0]

    def _encode(self, text: str) -> tuple[int, ...]:
        enc = self.vocab.tokenizer.encode_batch([text], add_special_tokens=False)[0]
        return tuple(enc.ids)

    def end(self, job: Job) -> None:
        """The handler is done with `job` (answered, aborted or cancelled)."""
        jobs = self._jobs.get(job.request_id)
        if jobs is None or job not in jobs:
            return
        jobs.remove(job)
        if not jobs:
            del self._jobs[job.request_id]
        self.stats.in_flight -= 1
        if all(c.reported for c in job.choices) and not job.aborted:
            self.stats.completed += 1
        elif not job.aborted:
            self.stats.cancelled += 1
            log.info("sim request cancelled", request_id=job.request_id, **self.stats.snapshot())
        self._drop_seqs(job)
        self._pump(changed=True)

    def _drop_seqs(self, job: Job) -> None:
        now = self.clock.now()
        for c in job.choices:
            if self._seqs.pop((job.key, c.index), None) is not None:
                self.core.cancel(now, (job.key, c.index))

    def abort(self, request_ids: Sequence[str]) -> int:
        """Abort running requests by id; the number found."""
        found = 0
        self.stats.abort_requests += len(request_ids)
        for rid in request_ids:
            for job in self._jobs.get(rid, ()):
                if not job.aborted:
                    job.aborted = True
                    job.wake.set()
                    found += 1
        self.stats.aborted += found
        log.info("sim abort", request_ids=list(request_ids), found=found, **self.stats.snapshot())
        return found

    def flush_cache(self) -> bool:
        ok = self.core.clear_cache()
        self._pump(changed=ok)
        return ok

    def load(self) -> Load:
        return self.core.load(self.clock.now())

    # ------------------------------------------------------------ the scheduler timer

    def _pump(self, changed: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self.clock.now()
        moved = changed
        for p in self.core.advance(now):
            entry = self._seqs.get(p.seq_id)
            if entry is None:
                continue
            job, choice = entry
            choice.ready = p.generated
            job.cached = p.cached_tokens
            if p.finished:
                choice.done = True
                del self._seqs[p.seq_id]
            job.wake.set()
            moved = True
        self.kv.publish(self.core.take_events(), moved)
        deadline = self.core.next_deadline()
        if deadline is not None:
            self._timer = self.clock.call_later(max(0.0, deadline - now), self._pump)
