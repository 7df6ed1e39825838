"""The bench session's options: what of them keys the bench evidence's fingerprint, and the
mistakes they refuse before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eliza.app.errors import UsageError
from eliza.app.services.bench_options import (
    MIN_OVERHEAD_PAIRS,
    default_settings_description,
    options_description,
    parse_bench_args,
    verify_bench_options,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    prompts = tmp_path / "bench" / "prompts.txt"
    prompts.parent.mkdir()
    prompts.write_text("Once upon a time\n")
    return tmp_path


def test_default_options_describe_what_verify_fingerprints(repo: Path) -> None:
    opts = parse_bench_args(
        ["--prompts", str(repo / "bench" / "prompts.txt")], default_bundle=repo / "tiny", repo=repo
    )
    # verify and the report judge bench evidence against the default description: a bench
    # session run with the defaults must produce evidence they accept as fresh.
    assert options_description(opts, {}) == default_settings_description({})


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (["--draft-max", "7"], "draft_max", 7),
        (["--drafter-pairs", "4"], "drafter_pairs", 4),
        (["--max-tokens", "9"], "max_tokens", 9),
    ],
)
def test_every_option_that_changes_the_figures_changes_the_description(
    repo: Path, argv: list[str], key: str, value: int
) -> None:
    base = ["--prompts", str(repo / "bench" / "prompts.txt")]
    opts = parse_bench_args([*base, *argv], default_bundle=repo / "tiny", repo=repo)
    described = options_description(opts, {})
    assert described != default_settings_description({})
    assert json.loads(described)[key] == value


def test_a_bench_session_measures_the_speedup_on_every_cell(repo: Path) -> None:
    opts = parse_bench_args(
        ["--prompts", str(repo / "bench" / "prompts.txt")], default_bundle=repo / "tiny", repo=repo
    )
    assert opts.speedup_on_every_cell and opts.drafter_pairs >= 3


def test_verify_times_the_drafter_speedup_on_the_no_gate_cell_only(repo: Path) -> None:
    # The bench session's defaults otherwise: the same fingerprinted description.
    root = Path(__file__).resolve().parents[2]  # the repository: its default prompts
    opts = verify_bench_options(default_bundle=repo / "tiny", repo=root, baseline="v1")
    assert not opts.speedup_on_every_cell and opts.baseline == "v1"
    assert options_description(opts, {}) == default_settings_description({})


def test_verify_measures_the_seam_overhead_in_the_fewest_pairs_a_session_accepts(repo: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    session = parse_bench_args([], default_bundle=repo / "tiny", repo=root)
    verify = verify_bench_options(default_bundle=repo / "tiny", repo=root, baseline=None)
    assert verify.overhead_pairs == MIN_OVERHEAD_PAIRS == 5 < session.overhead_pairs
    with pytest.raises(UsageError, match="at least 5"):
        parse_bench_args(
            ["--overhead-pairs", str(verify.overhead_pairs - 1)], default_bundle=repo / "tiny", repo=root
        )


def test_the_context_override_is_part_of_the_description() -> None:
    assert default_settings_description({"ELIZA_N_CTX": "512"}) != default_settings_description({})


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--drafter-pairs", "2"], "--drafter-pairs 2: must be at least 3"),
        (["--overhead-pairs", "4"], "--overhead-pairs 4: must be at least 5"),
        (["--draft-max", "0"], "--draft-max"),
    ],
)
def test_bad_values_name_the_option(repo: Path, argv: list[str], named: str) -> None:
    base = ["--prompts", str(repo / "bench" / "prompts.txt")]
    with pytest.raises(UsageError, match=named):
        parse_bench_args([*base, *argv], default_bundle=repo / "tiny", repo=repo)


def test_a_bundle_without_a_text_model_is_refused(repo: Path) -> None:
    (repo / "other").mkdir()
    base = ["--prompts", str(repo / "bench" / "prompts.txt")]
    with pytest.raises(UsageError, match=r"--bundle .*other: no text/\*\.gguf"):
        parse_bench_args([*base, "--bundle", str(repo / "other")], default_bundle=repo / "tiny", repo=repo)
