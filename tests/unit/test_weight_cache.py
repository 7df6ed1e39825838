"""LiteRT-LM's weight-cache file names as the engine writes them (eliza.core.weight_cache):
warm only for the model as it is now, and the caches of earlier versions found for removal."""

from __future__ import annotations

from eliza.core.weight_cache import cache_name, cache_state, leftover_caches

MODEL = "gemma-3-270m-q4_k_m.litertlm"


def test_the_name_is_the_engines_model_mtime_and_size() -> None:
    # as litert-lm-api 0.18.1 wrote it beside a 310,671,872-byte model of mtime 1796402229
    assert cache_name(MODEL, 1796402229, 310671872) == f"{MODEL}_1796402229_310671872.xnnpack_cache"


def test_a_cache_is_warm_only_for_the_model_as_it_is_now() -> None:
    present = [MODEL, f"{MODEL}.json", cache_name(MODEL, 100, 5000)]
    assert cache_state(MODEL, 100, 5000, present) == "warm"
    assert cache_state(MODEL, 101, 5000, present) == "cold"  # written again: another mtime
    assert cache_state(MODEL, 100, 5001, present) == "cold"
    assert cache_state(MODEL, 100, 5000, [MODEL]) == "cold"
    assert cache_state("other.litertlm", 100, 5000, present) == "cold"


def test_only_the_caches_of_earlier_versions_of_this_model_are_leftovers() -> None:
    present = [
        MODEL,
        cache_name(MODEL, 100, 5000),  # the current one
        cache_name(MODEL, 90, 5000),
        cache_name(MODEL, 100, 4000),
        cache_name("other.litertlm", 90, 5000),  # another model's
        f"{MODEL}_notes_x.xnnpack_cache",  # not the engine's name
        f"{MODEL}.json",
    ]
    assert leftover_caches(MODEL, 100, 5000, present) == sorted(
        [cache_name(MODEL, 90, 5000), cache_name(MODEL, 100, 4000)]
    )
