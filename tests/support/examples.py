"""Hypothesis example counts that follow the loaded profile.

`default` runs every property with its own count; `fast` (the fast command passes
`--hypothesis-profile=fast`) runs a fifth of it, at least 10, and 20 where a test sets no count.
`./scripts/test.sh` (CI) loads no profile, so it always runs the full counts.
"""

from __future__ import annotations

from hypothesis import settings

FAST = "fast"
FULL_COUNT = 100  # hypothesis's own default max_examples: the scale of every count below
settings.register_profile(FAST, max_examples=20)


def examples(full: int) -> int:
    """`full` under the default profile, scaled down with the loaded profile's max_examples."""
    return max(10, full * settings.default.max_examples // FULL_COUNT)
