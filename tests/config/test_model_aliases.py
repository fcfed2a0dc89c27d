"""`--model-alias ALIAS=CANONICAL` (repeatable): parsed as the Rust gateway parses it."""

from __future__ import annotations

import pytest

from smg.cli import gateway_config_from, parse
from smg.config import ConfigError, model_aliases


def test_entries_become_a_map_and_repeats_add_up() -> None:
    _, ns = parse(["--model-alias", "fast=org/model-7b", "--model-alias=m=org/model=x"])
    entries = gateway_config_from(ns).routing.model_alias
    assert entries == ("fast=org/model-7b", "m=org/model=x")
    # the first '=' splits: a canonical id may hold one
    assert model_aliases(entries) == {"fast": "org/model-7b", "m": "org/model=x"}
    assert model_aliases(("a=b", "a=b")) == {"a": "b"}  # the same entry twice is harmless


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (("fast",), "Invalid model-alias value 'fast'. Expected: <alias>=<canonical>"),
        (("=b",), "Alias and canonical model ID must be non-empty"),
        (("a=",), "Alias and canonical model ID must be non-empty"),
        (("a=a",), "Alias must differ from the canonical model ID"),
        (("a=b", "a=c"), "--model-alias a: alias maps to both 'b' and 'c'"),
    ],
)
def test_malformed_entries_are_refused(entries: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        model_aliases(entries)
    assert message in str(info.value)


def test_the_gateway_refuses_them_before_starting() -> None:
    from smg.app.gateway import Gateway

    _, ns = parse(["--model-alias", "a=b", "--model-alias", "a=c"])
    with pytest.raises(ConfigError, match="alias maps to both 'b' and 'c'"):
        Gateway(gateway_config_from(ns))
