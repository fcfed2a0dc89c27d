"""The simulated engine's scheduler: continuous batching, timing, KV capacity and prefix cache.

Pure: the shell calls `add`, `cancel` and `advance(now)` and reads `next_deadline()`; nothing
here sleeps or reads a clock, so tests run it in simulated time.

Model (iteration-level, like vLLM's and SGLang's schedulers):
- The engine runs steps back to back while it has work. A step admits waiting requests in FIFO
  order while the running set is below `max_batch` and the KV cache has room, then spends its
  token budget (`step_token_budget`): one decode token for every decoding request, the rest on
  prompt chunks of prefilling requests (chunked prefill, oldest first).
- Step time = prefill tokens in the step / `prefill_tokens_per_s` (0: instant)
  + `decode_ms_per_token` + `decode_ms_per_running` x decoding requests (when any decode).
  At the end of a step each decoding request has one more token, and a request whose prompt is
  now fully prefilled has its first token. With both decode knobs at 0, a request's whole
  output is ready at the end of its prefill step (zero-latency mode: no per-token work).
- KV capacity (`kv_capacity_tokens`): admission reserves the request's exact footprint (prompt +
  planned output, minus prefix-cache hits), so no preemption is needed; a request that does not
  fit waits (it counts in `waiting`). A request larger than the whole cache is refused at `add`.
- Prefix cache (`prefix_cache.PrefixCache`): looked up at admission (`cached_tokens` is a
  multiple of the block size). A request's full prompt blocks are stored when its prefill ends,
  and the full blocks of prompt + output (minus the last token, whose KV is never computed)
  when it finishes. Evictions make room for an admission; stores, removals and clears are
  queued as `KvEvent`s for subscribers (`take_events`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from smg.sim.prefix_cache import KvEvent, PrefixCache, block_hashes


@dataclass(frozen=True, slots=True)
class CoreConfig:
    prefill_tokens_per_s: float = 0.0  # 0: prefill is instant
    decode_ms_per_token: float = 0.0  # base inter-token latency
    decode_ms_per_running: float = 0.0  # added per decoding request in the batch
    kv_capacity_tokens: int = 4_000_000  # large enough that nothing waits by default
    block_size: int = 16
    max_batch: int = 1024  # the running window (vLLM --max-num-seqs)
    step_token_budget: int = 8192  # tokens per step (vLLM --max-num-batched-tokens)


# ---------------------------------------------------------------- outputs of the core


@dataclass(frozen=True, slots=True)
class Progress:
    """A sequence's state after a step: `generated` tokens are ready (cumulative)."""

    seq_id: Hashable
    generated: int
    cached_tokens: int
    finished: bool


@dataclass(frozen=True, slots=True)
class Load:
    running: int
    waiting: int
    waiting_uncached_tokens: int
    prefill_pending_tokens: int
    used_tokens: int
    active_tokens: int
    capacity_tokens: int
    cache_hit_rate: float
    gen_throughput: float
    max_batch: int

    @property
    def token_usage(self) -> float:
        return self.used_tokens / self.capacity_tokens if self.capacity_tokens else 0.0

    @property
    def active_token_usage(self) -> float:
        return self.active_tokens / self.capacity_tokens if self.capacity_tokens else 0.0


class CapacityError(ValueError):
    """The request can never fit in the KV cache."""


# ---------------------------------------------------------------- internal records


class _Seq:
    __slots__ = (
        "cached",
        "chunk",
        "estimate",
        "generated",
        "hashes",
        "held",
        "output",
        "prefill_left",
        "private",
        "prompt",
        "seq_id",
    )

    def __init__(self, seq_id: Hashable, prompt: tuple[int, ...], output: tuple[int, ...]) -> None:
        self.seq_id = seq_id
        self.prompt = prompt
        self.output = output
        self.hashes: list[int] = []
        self.held: list[int] = []  # cache blocks this sequence references (a prefix chain)
        self.private = 0  # reserved KV tokens not (yet) in shared blocks
        self.cached = 0
        self.prefill_left = len(prompt)
        self.chunk = 0  # prompt tokens prefilled in the current step
        self.generated = 0
        self.estimate = 0  # uncached prompt tokens, as estimated on arrival


class EngineCore:
    """One engine's scheduler state. Not thread-safe; owned by one shell."""

    def __init__(self, config: CoreConfig) -> None:
        if config.block_size < 1 or config.max_batch < 1 or config.kv_capacity_tokens < 1:
            raise ValueError("block_size, max_batch and kv_capacity_tokens must be positive")
        self.config = config
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._seqs: dict[Hashable, _Seq] = {}
        self._cache = PrefixCache(config.block_size)
        self._private = 0
        self._step_end: float | None = None
        self._waiting_uncached = 0
        self._prompt_tokens_total = 0
        self._cached_tokens_total = 0
        self._rate: deque[tuple[float, int]] = deque()  # (step end, tokens made)
        self._zero_decode = config.decode_ms_per_token <= 0 and config.decode_ms_per_running <= 0

    # ------------------------------------------------------------ commands

    def add(
        self, now: float, seq_id: Hashable, prompt: Sequence[int], output: Sequence[int]
    ) -> None:
        """Queue a sequence whose whole output is already decided (the core only paces it)."""
        if seq_id in self._seqs:
            raise ValueError(f"duplicate sequence id {seq_id!r}")
        if len(prompt) + len(output) > self.config.kv_capacity_tokens:
            raise CapacityError(
                f"request needs {len(prompt) + len(output)} KV tokens; the engine holds "
                f"{self.config.kv_capacity_tokens}"
            )
        seq = _Seq(seq_id, tuple(prompt), tuple(output))
        seq.hashes = block_hashes(seq.prompt, self.config.block_size)
        matched = self._cache.match(seq.hashes, len(seq.prompt))
        seq.estimate = len(prompt) - matched * self.config.block_size
        self._waiting_uncached += seq.estimate
        self._seqs[seq_id] = seq
        self._waiting.append(seq)
        if self._step_end is None:
            self._start_step(now)

    def cancel(self, now: float, seq_id: Hashable) -> bool:
        """Drop a waiting or running sequence (abort, client gone); False if unknown/finished."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return False
        if seq in self._running:
            self._running.remove(seq)
            self._release(seq)
        else:
            self._waiting.remove(seq)
            self._waiting_uncached -= seq.estimate
        if self._step_end is None:
            self._start_step(now)
        return True

    def clear_cache(self) -> bool:
        """Drop every cached block (FlushCache). Refused (False) while requests are in flight."""
        if self._seqs:
            return False
        self._cache.clear()
        return True

    def advance(self, now: float) -> list[Progress]:
        """Run every step that ends by `now`; report the sequences that moved."""
        out: list[Progress] = []
        while self._step_end is not None and self._step_end <= now:
            end = self._step_end
            self._finish_step(end, out)
            self._start_step(end)
        return out

    # ------------------------------------------------------------ queries

    def next_deadline(self) -> float | None:
        return self._step_end

    def take_events(self) -> list[KvEvent]:
        return self._cache.take_events()

    def load(self, now: float, window_s: float = 5.0) -> Load:
        bs = self.config.block_size
        while self._rate and self._rate[0][0] < now - window_s:
            self._rate.popleft()
        made = sum(n for _, n in self._rate)
        blocks = len(self._cache)
        pinned = blocks - self._cache.unreferenced
        pending = self._waiting_uncached + sum(
            s.prefill_left for s in self._running if s.generated == 0
        )
        return Load(
            running=len(self._running),
            waiting=len(self._waiting),
            waiting_uncached_tokens=self._waiting_uncached,
            prefill_pending_tokens=pending,
            used_tokens=self._private + blocks * bs,
            active_tokens=self._private + pinned * bs,
            capacity_tokens=self.config.kv_capacity_tokens,
            cache_hit_rate=(
                self._cached_tokens_total / self._prompt_tokens_total
                if self._prompt_tokens_total
                else 0.0
            ),
            gen_throughput=made / window_s,
            max_batch=self.config.max_batch,
        )

    def cached_block_count(self) -> int:
        return len(self._cache)

    # ------------------------------------------------------------ steps

    def _start_step(self, now: float) -> None:
        cfg = self.config
        self._admit()
        if not self._running:
            self._step_end = None
            return
        budget = cfg.step_token_budget
        decoding = 0
        for seq in self._running:
            if seq.prefill_left == 0:
                decoding += 1
        budget -= decoding
        prefill = 0
        for seq in self._running:
            if seq.prefill_left > 0:
                take = min(seq.prefill_left, max(budget, 1 if prefill == 0 else 0))
                seq.chunk = take
                prefill += take
                budget -= take
        duration = prefill / cfg.prefill_tokens_per_s if cfg.prefill_tokens_per_s > 0 else 0.0
        if decoding:
            duration += (cfg.decode_ms_per_token + cfg.decode_ms_per_running * decoding) / 1000.0
        self._step_end = now + duration

    def _finish_step(self, now: float, out: list[Progress]) -> None:
        made = 0
        still: list[_Seq] = []
        for seq in self._running:
            before = seq.generated
            if seq.prefill_left == 0:
                self._produce(seq)
            elif seq.chunk:
                seq.prefill_left -= seq.chunk
                seq.chunk = 0
                if seq.prefill_left == 0:
                    self._store(seq, seq.prompt, len(seq.prompt) // self.config.block_size)
                    self._produce(seq)
            made += seq.generated - before
            done = seq.prefill_left == 0 and seq.generated >= len(seq.output)
            if seq.generated != before or done:
                out.append(Progress(seq.seq_id, seq.generated, seq.cached, done))
            if done:
                del self._seqs[seq.seq_id]
                full = seq.prompt + seq.output[:-1]
                self._store(seq, full, len(full) // self.config.block_size)
                self._release(seq)
            else:
                still.append(seq)
        self._running = still
        if made:
            self._rate.append((now, made))

    def _produce(self, seq: _Seq) -> None:
        if seq.generated < len(seq.output):
            seq.generated = len(seq.output) if self._zero_decode else seq.generated + 1

    def _admit(self) -> None:
        cfg = self.config
        while self._waiting and len(self._running) < cfg.max_batch:
            seq = self._waiting[0]
            matched = self._cache.match(seq.hashes, len(seq.prompt))
            need = len(seq.prompt) + len(seq.output) - matched * cfg.block_size
            free = cfg.kv_capacity_tokens - self._private - len(self._cache) * cfg.block_size
            if need > free:
                # blocks this request will reuse must not be evicted to make room for it
                reusable = self._cache.unreferenced_among(seq.hashes[:matched])
                room = (self._cache.unreferenced - reusable) * cfg.block_size
                if need > free + room:
                    return
                self._cache.evict(-(-(need - free) // cfg.block_size), set(seq.hashes[:matched]))
            self._waiting.popleft()
            self._waiting_uncached -= seq.estimate
            self._cache.hold(seq.hashes[:matched])
            seq.held = seq.hashes[:matched]
            seq.cached = matched * cfg.block_size
            seq.prefill_left = len(seq.prompt) - seq.cached
            seq.private = need
            self._private += need
            self._prompt_tokens_total += len(seq.prompt)
            self._cached_tokens_total += seq.cached
            self._running.append(seq)

    # ------------------------------------------------------------ prefix cache

    def _store(self, seq: _Seq, tokens: tuple[int, ...], upto: int) -> None:
        """Make blocks [len(held), upto) of `tokens` shared cache blocks held by `seq`."""
        bs = self.config.block_size
        if upto <= len(seq.held):
            return
        if len(seq.hashes) < upto:
            seq.hashes = block_hashes(tokens, bs)
        before = len(seq.held)
        self._cache.store(seq.held, seq.hashes, tokens, upto)
        shared = (len(seq.held) - before) * bs  # reserved tokens now counted as cache blocks
        seq.private -= shared
        self._private -= shared

    def _release(self, seq: _Seq) -> None:
        self._cache.release(seq.held)
        seq.held = []
        self._private -= seq.private
        seq.private = 0
