"""Incremental detokenization: token ids in, newly final text out (pure; no IO).

Byte-level BPE splits multi-byte UTF-8 characters (emoji, CJK, accents) across tokens, and a
decode of a partial character yields U+FFFD. So we keep two offsets into the ids seen so far:

    ids[prefix_offset:read_offset]   already emitted; decoded again only as left context
    ids[read_offset:]                new, not yet emitted

On each feed we decode the context window and the window plus the new ids; the new text is the
difference. If it ends with U+FFFD the character may still be incomplete, so nothing is emitted
and the ids stay pending. Once the text is clean, read_offset moves to the end; the decoded
window plus new ids is then exactly the next step's context, so we keep its text and decode
once per feed, not twice. When the window exceeds `WINDOW_TOKENS` it slides forward
(prefix_offset takes the old read_offset; the next feed decodes its context again), so each
step decodes only a few tokens: O(1) per token, not O(n).

`finish()` flushes what is pending; an invalid trailing byte sequence comes out as U+FFFD, just
as a full decode of all the ids would give it.

A decode function that offers `stream(skip_special_tokens)` (`tokenizer.SyncDecoder`: a
byte-level tokenizer's table step, byte_decode.py, ~0.15 µs a token; else the HF tokenizer's
`DecodeStream`, the same windows kept and diffed in Rust, ~0.8 µs) is used instead, one id at a
time, against 2-6 µs for the Python windows above; a chunk of ids is one call, like one window
decode. Its deltas are the same text
(tests/pipeline/test_detokenize_stream.py holds the two to each other). Should it fail (the text
of a longer window that does not start with the shorter one's; a tokenizers release whose
`step` takes no list), the windows take over from the last two boundaries it gave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

REPLACEMENT = "\ufffd"
WINDOW_TOKENS = 5  # longest context kept before it slides (longer windows cost decode time)


class DecodeFn(Protocol):
    def __call__(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


# a stream decoder's step: the text one more id completes (None: nothing yet)
Step = Callable[["int | list[int]"], "str | None"]


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas whose concatenation equals decode(all)."""

    __slots__ = (
        "_decode",
        "_ids",
        "_opener",
        "_prefix_offset",
        "_prefix_text",
        "_read_offset",
        "_skip_special",
        "_step",
    )

    def __init__(self, decode_fn: DecodeFn, *, skip_special_tokens: bool = True) -> None:
        self._decode = decode_fn
        self._skip_special = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._prefix_text: str | None = ""  # decode(ids[prefix_offset:read_offset]) if known
        # the stream decoder, made at the first feed that is not also the last one (a whole
        # answer's single feed costs one window decode; a new DecodeStream and its step, two)
        self._opener: Callable[[bool], Step] | None = getattr(decode_fn, "stream", None)
        self._step: Step | None = None

    @property
    def ids(self) -> list[int]:
        """Every id fed so far (the engine's output tokens)."""
        return self._ids

    @property
    def pending(self) -> int:
        """Ids fed but not yet turned into emitted text."""
        return len(self._ids) - self._read_offset

    def _window_texts(self) -> tuple[str, str]:
        ids, skip = self._ids, self._skip_special
        prefix = self._prefix_text
        if prefix is None:
            prefix = self._prefix_text = self._decode(
                ids[self._prefix_offset : self._read_offset], skip
            )
        full = self._decode(ids[self._prefix_offset :], skip)
        return prefix, full

    def _advance(self, full: str) -> None:
        """Everything fed is emitted: `full` is the text of the new context window."""
        n = len(self._ids)
        if n - self._prefix_offset > WINDOW_TOKENS:
            self._prefix_offset = self._read_offset
            self._prefix_text = None
        else:
            self._prefix_text = full
        self._read_offset = n

    def feed(self, new_ids: Sequence[int], *, last: bool = False) -> str:
        """Add ids from the engine; returns the text they complete (possibly ""). `last`: no
        feed follows (only `finish`)."""
        step = self._step
        if step is None:  # the first feed, or no stream decoder
            if not new_ids:
                return ""
            ids = self._ids
            ids += new_ids
            if self._opener is None or last or len(ids) != len(new_ids):
                return self._windows()
            step = self._step = self._opener(self._skip_special)
        elif new_ids:  # a stream's every other feed: the step first, one check
            ids = self._ids
            ids += new_ids
        else:
            return ""
        try:  # a chunk's ids in one call, as the windows decode them
            piece = step(new_ids[0] if len(new_ids) == 1 else list(new_ids))
        except Exception:  # the windows take over (see the module doc)
            return self._windows_from_here()
        if piece is None:
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(ids)
        return piece

    def _windows_from_here(self) -> str:
        """The stream decoder failed: the windows go on from the last text it gave (its end and
        the one before are clean boundaries)."""
        self._step = self._opener = None
        self._prefix_text = None
        return self._windows()

    def _windows(self) -> str:
        prefix, full = self._window_texts()
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT):
            self._advance(full)
            return full[len(prefix) :]
        return ""

    def finish(self) -> str:
        """The rest of the text at the end of the stream (U+FFFD for invalid trailing bytes)."""
        if self._read_offset == len(self._ids):
            return ""
        if self._step is not None:  # the windows from the last two boundaries the stream gave
            self._step = self._opener = None
            self._prefix_text = None
        prefix, full = self._window_texts()
        self._advance(full)
        return full[len(prefix) :]
