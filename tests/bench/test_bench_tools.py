"""The bench tools on a real build: records, identity with the reference runner, identity
broken on purpose, and clear failures on bad bundles."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from eliza.adapters.bench_tools import (
    BenchSettings,
    BenchToolError,
    bench_argv,
    drafter_argv,
    reference_argv,
    run_tool,
)
from eliza.adapters.ffi import expected_abi_version
from eliza.core.bench_diff import compare_identity, drafter_problems, drafter_totals
from eliza.core.bench_records import parse_run


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "p.txt"
    path.write_text("# comment\nOnce upon a time\n\nThe price\nnaïve café — 東京 and\nline one\\nline two\n")
    return path


def settings(bundle: Path, prompts: Path, **kw: object) -> BenchSettings:
    return BenchSettings(bundle=bundle, prompts=prompts, max_tokens=24, repeats=2, **kw)  # type: ignore[arg-type]


def test_ffi_and_reference_are_byte_identical(
    library_path: Path, tiny_bundle: Path, prompts: Path, tmp_path: Path
) -> None:
    s = settings(tiny_bundle, prompts)
    ffi = run_tool(
        bench_argv(library_path.parent, library_path, s, "t", tmp_path / "f.jsonl"), tmp_path / "f.jsonl"
    )
    ref = run_tool(reference_argv(library_path.parent, s, "t", tmp_path / "r.jsonl"), tmp_path / "r.jsonl")
    assert [p.prompt for p in ffi.prompts] == [
        "Once upon a time",
        "The price",
        "naïve café — 東京 and",
        "line one\nline two",
    ]
    result = compare_identity(ffi, ref)
    assert result.identical, result.report()
    assert ffi.prompts[1].text == "€.".encode() and ffi.prompts[1].final_status == 1
    assert all(p.repeats_identical and len(p.decode_tok_s) == 2 for p in ffi.prompts)
    build = ffi.header["build"]
    assert build["library_sha256"] == hashlib.sha256(library_path.read_bytes()).hexdigest()
    assert build["info"]["abi_version"] == expected_abi_version() and build["info"]["llama_cpp"]["cpu_isa"]
    assert all(d == (0, 0) for p in ffi.prompts for d in p.drafter)


def test_drafter_runs_are_byte_identical_with_their_stats(
    library_path: Path, tiny_bundle: Path, prompts: Path, tmp_path: Path
) -> None:
    from eliza.formats.tiny_gguf import draft_model

    s = settings(tiny_bundle, prompts)
    plain = run_tool(
        bench_argv(library_path.parent, library_path, s, "t", tmp_path / "f.jsonl"), tmp_path / "f.jsonl"
    )
    draft, own = draft_model(tiny_bundle), next((tiny_bundle / "text").glob("*.gguf"))
    assert draft is not None
    for label, model in (("draft", draft), ("self", own)):
        out = tmp_path / f"{label}.jsonl"
        run = run_tool(drafter_argv(library_path.parent, library_path, s, "t", out, model, 4), out)
        assert run.header["drafter"] == str(model.resolve()) and run.header["draft_max"] == 4
        result = compare_identity(plain, run)
        assert result.identical, result.report()
        assert drafter_problems(label, run, must_accept_all=label == "self") == []
        drafted, accepted = drafter_totals(run)
        assert drafted > 0 and 0 < accepted <= drafted


def test_changed_sampling_parameter_breaks_identity(
    library_path: Path, tiny_bundle: Path, prompts: Path, tmp_path: Path
) -> None:
    base = settings(tiny_bundle, prompts)
    ffi = tmp_path / "f.jsonl"
    ref = tmp_path / "r.jsonl"
    run_tool(bench_argv(library_path.parent, library_path, base, "t", ffi), ffi)
    penalised = BenchSettings(**{**base.__dict__, "repeat_penalty": 1.8})
    run_tool(reference_argv(library_path.parent, penalised, "t", ref), ref)
    cli = subprocess.run(
        [sys.executable, "-m", "eliza.bench", str(ffi), str(ref)], capture_output=True, text=True
    )
    assert cli.returncode == 1
    assert "DIFFERENT" in cli.stdout and "first divergence at step" in cli.stdout
    assert "token" in cli.stdout and "⟦" in cli.stdout  # both texts shown around the divergence


def test_missing_or_corrupt_bundle_fails_clearly(library_path: Path, prompts: Path, tmp_path: Path) -> None:
    missing = settings(tmp_path / "nope", prompts)
    with pytest.raises(BenchToolError, match=r"e2e_loop_bench exited 1: .*does not exist"):
        run_tool(
            bench_argv(library_path.parent, library_path, missing, "t", tmp_path / "o.jsonl"),
            tmp_path / "o.jsonl",
        )
    corrupt = tmp_path / "corrupt"
    (corrupt / "text").mkdir(parents=True)
    (corrupt / "text" / "m.gguf").write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(BenchToolError, match="cannot load text model"):
        run_tool(
            bench_argv(
                library_path.parent, library_path, settings(corrupt, prompts), "t", tmp_path / "o.jsonl"
            ),
            tmp_path / "o.jsonl",
        )
    with pytest.raises(BenchToolError, match=r"reference_runner exited 1: .*cannot load text model"):
        run_tool(
            reference_argv(library_path.parent, settings(corrupt, prompts), "t", tmp_path / "o.jsonl"),
            tmp_path / "o.jsonl",
        )
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.part").exists()


def test_bad_arguments_exit_2(library_path: Path) -> None:
    result = subprocess.run(
        [str(library_path.parent / "e2e_loop_bench"), "--bundle", "x"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "--bundle and --prompts are required" in result.stderr


@pytest.mark.parametrize("tool", ["e2e_loop_bench", "reference_runner"])
def test_help_shows_usage_and_defaults(library_path: Path, tool: str) -> None:
    result = subprocess.run([str(library_path.parent / tool), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {tool} --bundle DIR --prompts FILE")
    assert "--max-tokens 64" in result.stdout and result.stderr == ""


# A parent that holds this much resident memory when it starts the tool. Linux carries a
# getrusage() peak over through fork and exec, so a tool that read ru_maxrss reported at
# least this; the tool's own peak on the tiny bundle is tens of MB.
BALLAST_MB = 300

# Starts argv from a Python process that first touches BALLAST_MB of its own memory.
LARGE_PARENT = f"""
import subprocess, sys
ballast = bytearray({BALLAST_MB} << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
sys.exit(subprocess.run(sys.argv[1:]).returncode)
"""


def test_peak_rss_is_the_tools_own_whoever_starts_it(
    library_path: Path, tiny_bundle: Path, prompts: Path, tmp_path: Path
) -> None:
    s = settings(tiny_bundle, prompts)
    figures = {}
    for parent in ("small", "large"):
        out = tmp_path / f"{parent}.jsonl"
        argv = bench_argv(library_path.parent, library_path, s, "t", out)
        # small: a shell that forks the tool (so not even this pytest process's size is
        # the tool's starting point); large: a Python process holding BALLAST_MB.
        wrapper = (
            ["/bin/sh", "-c", '"$@"; exit $?', "sh"]
            if parent == "small"
            else [sys.executable, "-c", LARGE_PARENT]
        )
        subprocess.run([*wrapper, *argv], check=True, capture_output=True)
        record = parse_run(out.read_text(), str(out))
        assert record.peak_rss_source == "proc-status-vmhwm"
        figures[parent] = max(p.peak_rss_kb for p in record.prompts)
    small, large = figures["small"], figures["large"]
    assert 0 < small < BALLAST_MB * 1024 / 2, figures  # the tool's own size, not a parent's
    assert abs(large - small) < 8 * 1024, figures  # within a few MB, whoever started it
