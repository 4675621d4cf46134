"""The simulator's named modes share one lookup and its error."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from agentconsole.server.runtime.sim.crossmodel import SHARED_PREFILL, get_cross_model
from agentconsole.server.runtime.sim.modes import mode_named
from agentconsole.server.runtime.sim.prefixcache import RELATIVE, get_prefix_cache


def test_each_table_finds_its_modes() -> None:
    assert get_prefix_cache("relative") is RELATIVE
    assert get_cross_model("shared-prefill") is SHARED_PREFILL
    assert mode_named({"a": 1, "b": 2}, "b", "thing") == 2


@pytest.mark.parametrize(
    ("lookup", "message"),
    [
        (get_prefix_cache, "unknown prefix cache 'x'; choose from ordinary, relative"),
        (get_cross_model, "unknown cross-model KV mode 'x'; choose from none, shared-prefill"),
    ],
)
def test_an_unknown_name_lists_the_choices(lookup: Callable[[str], object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        lookup("x")
