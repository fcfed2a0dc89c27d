"""What the simulated gRPC engine says: scripted replies, default word output, stop rules, fake
logprobs. Pure: no IO, no clock, no tokenizer object (the shell hands in token tables).

Scripted replies. A `Script` is a rule table: the first rule whose `when` substring occurs in the
decoded prompt gives the exact reply text; the shell tokenizes it with the real tokenizer and the
engine emits those ids, then EOS. A magic rule is checked before the table: when the last user
message (Qwen/ChatML `<|im_start|>user ... <|im_end|>`; the whole prompt when there is no such
marker) contains `SIM_REPLY:`, the rest of that message is the reply (one space right after the
colon is dropped). `--script FILE` holds a JSON list of {"when": "...", "reply": "..."}.

Default output. Each engine seed fixes a cyclic stream of `STREAM_LEN` plain-word token ids
(" the", " house", ...) drawn from the vocabulary; a choice starts at an offset given by a 64-bit
key mixed from (engine seed, request seed, prompt ids, choice index) and runs for a "natural"
length in [NATURAL_MIN, NATURAL_MAX) taken from the same key, then EOS. Greedy requests
(temperature 0 or top_k 1) ignore the request seed and the choice index, so all n choices agree.
Unseeded sampling uses seed 0: the simulator is deterministic on purpose.

Stop rules (`finish`), as vLLM's and SGLang's schedulers apply them after each token:
- length first: the token that reaches max_tokens ends the output with "length", even if it is
  EOS or completes a stop string;
- EOS (unless ignore_eos) and stop_token_ids end with "stop"; both are suppressed before
  min_tokens (the engine masks them, so the content just continues); the stop token is kept in
  the output ids. matched_token_id is set for stop_token_ids; for EOS only when
  `eos_reports_match` (SGLang reports the EOS id, vLLM leaves matched_stop unset);
- stop strings are found in the byte-decoded output; the output ends with the token that
  completes the match (ids are not trimmed; trimming text is the detokenizer's job, i.e. the
  gateway's: include_stop_str_in_output / no_stop_trim) and matched_stop_str is set;
- ignore_eos: no EOS is emitted; words continue to max_tokens.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, islice

STREAM_LEN = 4096
NATURAL_MIN = 16
NATURAL_MAX = 256
MAGIC = "SIM_REPLY:"
USER_OPEN = "<|im_start|>user\n"
TURN_END = "<|im_end|>"
MAX_TOP_LOGPROBS = 20
_MASK64 = (1 << 64) - 1
_WORD = re.compile(rb"^ [a-z]*[aeiouy][a-z]*$")


def mix64(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash of an int."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


# ---------------------------------------------------------------- scripted replies


@dataclass(frozen=True, slots=True)
class ScriptRule:
    when: str
    reply: str


@dataclass(frozen=True, slots=True)
class Script:
    rules: tuple[ScriptRule, ...] = ()
    magic: bool = True

    def reply_for(self, prompt_text: str) -> str | None:
        """The exact reply for this decoded prompt, or None for default output."""
        if self.magic:
            reply = magic_reply(prompt_text)
            if reply is not None:
                return reply
        for rule in self.rules:
            if rule.when in prompt_text:
                return rule.reply
        return None


def magic_reply(prompt_text: str) -> str | None:
    start = prompt_text.rfind(USER_OPEN)
    if start >= 0:
        message = prompt_text[start + len(USER_OPEN) :]
        end = message.find(TURN_END)
        if end >= 0:
            message = message[:end]
    else:
        message = prompt_text
    at = message.find(MAGIC)
    if at < 0:
        return None
    reply = message[at + len(MAGIC) :]
    return reply[1:] if reply.startswith(" ") else reply


def parse_script(text: str) -> Script:
    """A `Script` from JSON text: a list of {"when": str, "reply": str}. ValueError if malformed."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("script must be a JSON list of {'when': ..., 'reply': ...}")
    rules = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"script entry {i} is not an object")
        when, reply = item.get("when"), item.get("reply")
        if not isinstance(when, str) or not when or not isinstance(reply, str):
            raise ValueError(f"script entry {i} needs a non-empty 'when' and a 'reply' string")
        rules.append(ScriptRule(when, reply))
    return Script(tuple(rules))


# ---------------------------------------------------------------- vocabulary tables


def _byte_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet: printable char -> byte (GPT-2 style mapping)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def byte_table(vocab: Mapping[str, int], added: Mapping[int, str]) -> tuple[bytes, ...]:
    """Token id -> the bytes it decodes to (added tokens: their text), for byte-level BPE."""
    alphabet = _byte_alphabet()
    size = max(max(vocab.values(), default=-1), max(added, default=-1)) + 1
    table: list[bytes] = [b""] * size
    for piece, tid in vocab.items():
        try:
            table[tid] = bytes(alphabet[c] for c in piece)
        except KeyError:
            table[tid] = piece.encode()
    for tid, text in added.items():
        table[tid] = text.encode()
    return tuple(table)


def word_pool(table: Sequence[bytes], size: int = 4096) -> tuple[int, ...]:
    """The `size` lowest ids whose token looks like a plain word: a space, then 3-12 lowercase
    letters with a vowel (low ids are the most frequent merges, mostly whole words)."""
    found = (t for t, raw in enumerate(table) if 4 <= len(raw) <= 13 and _WORD.match(raw))
    return tuple(islice(found, size))


def decode_bytes(table: Sequence[bytes], ids: Sequence[int]) -> str:
    return b"".join([table[t] for t in ids]).decode("utf-8", "replace")


# ---------------------------------------------------------------- default output


class WordStream:
    """The cyclic word stream of one engine seed (stored twice so windows are plain slices)."""

    __slots__ = ("doubled",)

    def __init__(self, seed: int, pool: Sequence[int]) -> None:
        if not pool:
            raise ValueError("empty word pool")
        stream = tuple(pool[mix64(seed * STREAM_LEN + i) % len(pool)] for i in range(STREAM_LEN))
        self.doubled = stream + stream

    def take(self, offset: int, count: int) -> list[int]:
        start = offset % STREAM_LEN
        out: list[int] = []
        while count > 0:
            step = min(count, STREAM_LEN)
            out.extend(self.doubled[start : start + step])
            count -= step
            start = (start + step) % STREAM_LEN
        return out


def choice_key(
    engine_seed: int, request_seed: int | None, prompt_ids: Sequence[int], choice: int, greedy: bool
) -> int:
    if greedy:
        request_seed, choice = None, 0
    x = mix64(hash(tuple(prompt_ids)) ^ (engine_seed * 0x9E3779B97F4A7C15))
    x = mix64(x ^ (((request_seed or 0) & _MASK64) + 1) * 0x165667B19E3779F9)
    return mix64(x ^ (choice + 1) * 0xC2B2AE3D27D4EB4F)


def natural_length(key: int) -> int:
    return NATURAL_MIN + (key >> 17) % (NATURAL_MAX - NATURAL_MIN)


# ---------------------------------------------------------------- stop rules


@dataclass(frozen=True, slots=True)
class StopRule:
    max_tokens: int
    eos_ids: frozenset[int]
    min_tokens: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    eos_reports_match: bool = False


@dataclass(frozen=True, slots=True)
class Output:
    """One choice's whole output, fixed when the request arrives."""

    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length"
    matched_token_id: int | None = None
    matched_stop_str: str | None = None


def finish(
    content: Sequence[int], words: WordStream, key: int, rule: StopRule, table: Sequence[bytes]
) -> Output:
    """Apply the stop rules to `content` (scripted or default ids, without EOS)."""
    cap = rule.max_tokens
    eos = min(rule.eos_ids) if rule.eos_ids else None
    cand = list(content[:cap])
    fill = max(rule.min_tokens, cap if rule.ignore_eos or eos is None else 0) - len(cand)
    if fill > 0:
        cand += words.take(key + len(content), min(fill, cap - len(cand)))
    at: int | None = None  # index of the token that ends the output
    matched: int | str | None = None
    if eos is not None and not rule.ignore_eos and len(cand) < cap:
        at, matched = len(cand), (eos if rule.eos_reports_match else None)
        cand.append(eos)
    if rule.stop_token_ids:
        first = rule.min_tokens
        hit = next((i for i, t in enumerate(cand[first:], first) if t in rule.stop_token_ids), None)
        if hit is not None and (at is None or hit < at):
            at, matched = hit, cand[hit]
    if rule.stop:
        searched = cand if at is None else cand[:at]  # EOS text is never part of a match
        hit_str = _first_stop_string(searched, rule.stop, rule.min_tokens, table)
        if hit_str is not None and (at is None or hit_str[0] < at):
            at, matched = hit_str
    if at is None or at + 1 >= cap:
        return Output(tuple(cand[:cap]), "length")
    ids = tuple(cand[: at + 1])
    if isinstance(matched, str):
        return Output(ids, "stop", matched_stop_str=matched)
    return Output(ids, "stop", matched_token_id=matched)


def _first_stop_string(
    ids: Sequence[int], stops: Sequence[str], min_tokens: int, table: Sequence[bytes]
) -> tuple[int, str] | None:
    pieces = [table[t] for t in ids]
    text = b"".join(pieces)
    ends = list(accumulate(map(len, pieces)))
    best: tuple[int, str] | None = None
    for stop in stops:
        needle = stop.encode()
        if not needle:
            continue
        start = 0
        while (pos := text.find(needle, start)) >= 0:
            index = bisect_left(ends, pos + len(needle))  # the token completing the match
            if index >= min_tokens:
                if best is None or index < best[0]:
                    best = (index, stop)
                break
            start = pos + 1
    return best


# ---------------------------------------------------------------- fake logprobs


def token_logprob(token_id: int, position: int) -> float:
    """A plausible log-probability in (-2, 0), fixed per (token, position)."""
    return -0.001 - (mix64(token_id * 0x9E3779B1 + position) % 2000) / 1000.0


def top_alternatives(
    token_id: int, position: int, k: int, pool: Sequence[int]
) -> tuple[list[float], list[int]]:
    """k (logprob, token) pairs, best first; the sampled token leads (as in vLLM's dict)."""
    if k <= 0:
        return [], []
    lp = token_logprob(token_id, position)
    values, ids = [lp], [token_id]
    x = mix64(token_id ^ (position << 20))
    for j in range(1, k):
        x = mix64(x + j)
        ids.append(pool[x % len(pool)])
        values.append(lp - 0.25 * j - (x % 97) / 1000.0)
    return values, ids
