"""The seam's overhead (FFI ÷ plain llama.h decode tok/s on the same build) is judged on the
no-gate cell's byte-identity-reference evidence with the perf check's rule for decode."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings
from eliza.app.checks import byte_identity
from eliza.app.checks.byte_identity import SEAM_OVERHEAD_RULE, _with_overhead
from eliza.app.services.bench_options import BenchOptions
from eliza.core.evidence import Status
from eliza.core.outcome import CheckOutcome

AT = datetime(2026, 12, 7, tzinfo=UTC)
IDENTICAL = CheckOutcome(
    cell="linux-vulkan.none", check="byte-identity-reference", status=Status.PASSED, ran=3, passed=3,
    started_at=AT, finished_at=AT,
)  # fmt: skip


def overhead(ffi: list[float], reference: list[float]) -> dict[str, object]:
    ratios = sorted(a / b for a, b in zip(ffi, reference, strict=True))
    ratio = {"median": ratios[len(ratios) // 2], "q1": ratios[1], "q3": ratios[-2]}
    return {"decode_tok_s": {"ffi": ffi, "reference": reference, "ratio": ratio}}


def test_a_seam_within_the_bound_keeps_the_identity_verdict() -> None:
    judged = _with_overhead(IDENTICAL, overhead([99.0, 101.0, 100.0, 98.5, 100.5], [100.0] * 4 + [99.0]))
    assert judged.status is Status.PASSED and judged.passed == 3
    assert 0.98 < float(judged.metrics["seam_overhead_ratio"]) < 1.02
    assert "seam_overhead" in judged.details and "within" not in judged.reason


def test_a_seam_decisively_slower_fails_the_evidence_naming_the_rule() -> None:
    slow = [80.0, 81.0, 79.5, 80.5, 80.2]  # 20 % slower than plain llama.h in every pair
    judged = _with_overhead(IDENTICAL, overhead(slow, [100.0, 100.5, 99.5, 100.2, 99.8]))
    assert judged.status is Status.FAILED and judged.passed == 2
    assert judged.reason.startswith("the seam costs decode speed: seam_overhead ratio 0.80")
    assert f"bound {SEAM_OVERHEAD_RULE.bound:g}" in judged.reason


def test_two_noisy_pairs_cannot_fail_it() -> None:
    # a bound no noise crosses alone: an interval that is not wholly beyond 0.95 passes
    judged = _with_overhead(IDENTICAL, overhead([90.0, 101.0, 97.0, 99.0, 100.0], [100.0] * 5))
    assert judged.status is Status.PASSED


def test_a_pairs_two_runs_go_at_once_on_a_host_with_a_core_for_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both runs of a pair decode the same model with the same llama.cpp: where the host
    gives each side a core (side_by_side_cores), a pair's FFI and reference runs start
    together (a barrier only two runs in flight can pass); without, they take turns."""
    together = threading.Barrier(2, timeout=10)
    at_once = True
    ran: list[str] = []

    def run_tool(argv: list[str], out: Path, env: dict[str, str], runner: object = None) -> Any:
        ran.append(out.stem)
        if at_once:
            together.wait()  # raises BrokenBarrierError when the other run does not come
        prompt = SimpleNamespace(tokens=(1, 2), decode_tok_s=(100.0,), first_token_ms=(5.0,))
        return SimpleNamespace(prompts=(prompt,))

    monkeypatch.setattr(byte_identity, "run_tool", run_tool)
    platform = SimpleNamespace(id="linux-cpu")
    none: Any = SimpleNamespace(
        cell=SimpleNamespace(id="linux-cpu.none", platform=platform), library=tmp_path / "lib.so"
    )
    opts = BenchOptions(settings=BenchSettings(bundle=tmp_path / "b"), out_dir=tmp_path, overhead_pairs=3)
    done = byte_identity.measure_overhead(none, replace(opts, side_by_side_cores=2), print)
    assert done["sides"] == "side by side"
    assert sorted(ran) == ["ffi-0", "ffi-1", "ffi-2", "ref-0", "ref-1", "ref-2"]
    at_once = False
    ran.clear()
    done = byte_identity.measure_overhead(none, opts, print)
    assert done["sides"] == "in turn" and ran == ["ffi-0", "ref-0", "ref-1", "ffi-1", "ffi-2", "ref-2"]
