"""LiteRT-LM's weight cache as its engine ships it (litert-lm-api 0.18.1, no cache directory
set): the weights XNNPACK packs are written beside the model as
`<model file name>_<mtime in whole seconds>_<size in bytes>.xnnpack_cache` by the first
engine that loads the model, and mapped by every later one instead of packing them again.

The name is the engine's only check: a model written anew (another mtime) finds no cache
and writes its own, and the old one stays behind. These are the rules the checks read the
state by (a run starting cold or warm) and bundle making removes such leftovers by.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

SUFFIX = ".xnnpack_cache"

CacheState = Literal["cold", "warm"]


def cache_name(model_name: str, mtime_s: int, size: int) -> str:
    return f"{model_name}_{mtime_s}_{size}{SUFFIX}"


def cache_state(model_name: str, mtime_s: int, size: int, present: Iterable[str]) -> CacheState:
    """warm when the model as it is now (its mtime and size) has its cache among `present`."""
    return "warm" if cache_name(model_name, mtime_s, size) in set(present) else "cold"


def leftover_caches(model_name: str, mtime_s: int, size: int, present: Iterable[str]) -> list[str]:
    """The caches of earlier versions of the model (another mtime or size) among `present`."""
    current = cache_name(model_name, mtime_s, size)
    prefix = f"{model_name}_"
    return sorted(
        name
        for name in present
        if name.startswith(prefix) and name.endswith(SUFFIX) and name != current
        and _is_stamp(name[len(prefix) : -len(SUFFIX)])
    )  # fmt: skip


def _is_stamp(middle: str) -> bool:
    mtime, _, size = middle.partition("_")
    return mtime.isdigit() and size.isdigit()
