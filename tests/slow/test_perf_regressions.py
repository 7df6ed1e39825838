"""The perf check end to end, in a copy of the repository (llama.cpp from the caller's Conan
cache; only libelizainference is rebuilt), against the copy's own unchanged library as
`--perf-reference DIR`:

- the unchanged tree is VERIFIED in three consecutive runs (other rounds each time, so
  only perf re-runs), its simulated counts the same each time, and a verify with nothing
  changed keeps that evidence;
- a planted 2 ms sleep per decoded token FAILS decode tok/s on wall time while the
  simulated CPU sees no change (a sleep executes nothing), and `nox -s report -- --compare
  OLD/report.json --fail-on-regression` lists it and exits 1;
- a perf_waivers entry turns the failure into VERIFIED (waived), and its expiry back;
- about 10 % more work per decoded token FAILS the simulated CPU's instructions;
- 64 MB more resident memory at `_create` FAILS peak RSS (the default tiers' e2e test
  tests/integration/test_perf_rss.py shows it under a plain verify's conditions too).

Slow tier: four library builds and five verifies of one cell (several minutes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from eliza.formats.matrix_yaml import load_matrix
from tests.ci.helpers import copy_tree, env_for
from tests.integration.test_synthetic_gate import run
from tests.plants import (
    BIGGER_CREATE,
    CREATED,
    FFI,
    INCLUDES,
    MORE_INCLUDES,
    MORE_WORK_NEXT,
    NEXT,
    SLEEP_INCLUDES,
    SLEEPY_NEXT,
    edit,
    plant_more_work_per_token,
)
from tests.signing import predicate

CELL = "linux-cpu.none"


@pytest.fixture(scope="module", autouse=True)
def _can_build_linux_cpu() -> None:
    from eliza.app.project import capability, load_project_matrix

    can = capability(load_project_matrix().platform("linux-cpu"))
    if not can.can_build:
        pytest.skip(f"linux-cpu cannot be built on this host: {can.build_reason}")


def perf_record(repo: Path) -> dict[str, Any]:
    return predicate(repo / "build" / "evidence" / f"{CELL}__perf.json")


def verdicts(record: dict[str, Any]) -> dict[str, str]:
    return {m["metric"]: m["verdict"] for m in record["details"]["perf"]["metrics"]}


def say(label: str, record: dict[str, Any]) -> None:
    """The figures, for whoever reads the test's output (-s)."""
    print(f"{label}: {record['status']} in {record['duration_s']:.1f} s")
    for m in record["details"]["perf"]["metrics"]:
        print(f"  {m['words']}")


def failures(repo: Path) -> list[str]:
    """The failed records of the copy's evidence, with their reasons."""
    out = []
    for path in sorted((repo / "build" / "evidence").glob("*__*.json")):
        record = predicate(path)
        if record.get("status") in ("failed", "error"):
            out.append(f"{record['check']}: {record['reason'][:800]} {record.get('log_tail', '')[-1500:]}")
    return out


def verify(repo: Path, env: dict[str, str], reference: Path, *extra: str) -> tuple[int, str]:
    done = run(
        repo,
        "-m",
        "nox",
        "-s",
        "verify",
        "--",
        "--cell",
        CELL,
        "--perf-reference",
        str(reference),
        *extra,
        env=env,
    )
    return done.returncode, done.stdout + done.stderr


def report_state(repo: Path) -> dict[str, Any]:
    data = json.loads((repo / "build" / "report" / "report.json").read_text())
    return next(
        e for row in data["rows"] for e in row["entries"] if (e["cell"], e["check"]) == (CELL, "perf")
    )


def test_planted_slowdown_and_memory_growth_fail_and_the_unchanged_tree_never_does(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    env = env_for(repo)  # the caller's Conan cache: llama.cpp is not rebuilt
    built = run(repo, "-m", "nox", "-s", f"build-{CELL}", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    reference = tmp_path / "release"
    reference.mkdir()
    shutil.copy2(repo / "build" / "linux-cpu" / "none" / "build" / "libelizainference.so", reference)

    # The unchanged tree, three times: other rounds each time re-run perf only.
    counts = []
    for rounds in (9, 10, 11):
        code, out = verify(repo, env, reference, "--rounds", str(rounds))
        record = perf_record(repo)
        say(f"unchanged, {rounds} rounds", record)
        assert record["status"] == "passed", out[-3000:]
        assert code == 0, failures(repo)
        counts.append(
            {
                side: record["details"]["perf"]["simulated"][side]["decode"]
                for side in ("candidate", "reference")
            }
        )
    assert counts[0] == counts[1] == counts[2]
    # Nothing changed: the fresh perf evidence is kept, like any other.
    code, out = verify(repo, env, reference, "--rounds", "11")
    assert code == 0 and perf_record(repo)["finished_at"] == record["finished_at"], out[-3000:]
    assert (
        "keep   perf"
        in run(
            repo,
            "-m",
            "nox",
            "-s",
            "verify",
            "--",
            "--cell",
            CELL,
            "--perf-reference",
            str(reference),
            "--rounds",
            "11",
            "--dry-run",
            env=env,
        ).stdout
    )
    old = tmp_path / "old-report.json"
    shutil.copy2(repo / "build" / "report" / "report.json", old)

    # A sleep per token in the library: time, and no work.
    edit(repo, FFI, INCLUDES, SLEEP_INCLUDES)
    edit(repo, FFI, NEXT, SLEEPY_NEXT)
    code, out = verify(repo, env, reference, "--rounds", "9")
    record = perf_record(repo)
    say("per-token sleep", record)
    assert record["status"] == "failed", out[-3000:]
    assert code == 1 and [f for f in failures(repo) if f.startswith("perf:")], failures(repo)
    assert verdicts(record)["decode_tok_s"] == "failed"
    assert verdicts(record)["decode_instructions_per_token"] == "verified"
    assert record["details"]["perf"]["decided_by"] == ["wall time"]
    assert "decode_tok_s ratio" in record["reason"] and "REGRESSION" in record["reason"]
    # The declared rounds as a plain verify runs them: the first look cannot settle it, the
    # rest runs, and the rule fails it.
    code, out = verify(repo, env, reference)
    record = perf_record(repo)
    say("per-token sleep, the declared rounds", record)
    assert record["status"] == "failed" and code == 1, out[-3000:]
    assert verdicts(record)["decode_tok_s"] == "failed"
    about = record["details"]["perf"]
    assert "settled_after" not in about
    assert about["rounds_run"] == about["rounds"] == load_matrix(repo / "matrix.yaml").check("perf").rounds

    compared = run(
        repo, "-m", "nox", "-s", "report", "--", "--compare", str(old), "--fail-on-regression", env=env
    )
    said = compared.stdout + compared.stderr
    assert compared.returncode == 1, said[-3000:]
    assert f"regressed: {CELL} · perf: verified -> failed" in said
    markdown = (repo / "build" / "report" / "report.md").read_text()
    assert "## Since" in markdown and "decode_tok_s" in markdown

    # Waivers accept it until they expire: one per metric the delay moves (it is paid per
    # token, the first one included), each accepting twice what was measured (the ratio a
    # 2 ms sleep gives depends on how fast the host decodes the fixture: decode 0.085 and
    # first token 4.8x on an AVX-512 host, 2026-12-07).
    rows = {m["metric"]: m for m in record["details"]["perf"]["metrics"]}
    accepted = {
        "decode_tok_s": round(1 - rows["decode_tok_s"]["ci_low"] / 2, 4),  # down to half the ratio
        "first_token_ms": round(2 * rows["first_token_ms"]["ci_high"] - 1, 4),  # up to twice it
    }

    def waivers(expires: str) -> str:
        return "".join(
            f'  - {{cells: "linux-cpu.*", metric: {metric}, bound: {bound}, reason: planted delay, '
            f"expires: {expires}}}\n"
            for metric, bound in accepted.items()
        )

    edit(repo, "matrix.yaml", "\nperf_waivers:\n", "\nperf_waivers:\n" + waivers("2999-12-31"))
    assert run(repo, "-m", "nox", "-s", "report", env=env).returncode == 0
    entry = report_state(repo)
    assert entry["state"] == "verified" and entry["reason"].startswith(
        "VERIFIED (waived: decode_tok_s: planted delay"
    )
    edit(repo, "matrix.yaml", waivers("2999-12-31"), waivers("2000-01-01"))
    assert run(repo, "-m", "nox", "-s", "report", env=env).returncode == 0
    entry = report_state(repo)
    assert entry["state"] == "failed" and any("expired" in n for n in entry["notes"])
    edit(repo, "matrix.yaml", "\nperf_waivers:\n" + waivers("2000-01-01"), "\nperf_waivers:\n")

    # More work per token, without the sleep.
    edit(repo, FFI, SLEEPY_NEXT, NEXT)
    edit(repo, FFI, SLEEP_INCLUDES, INCLUDES)
    plant_more_work_per_token(repo)
    code, out = verify(repo, env, reference, "--rounds", "9")
    record = perf_record(repo)
    say("10 % more work per token", record)
    assert record["status"] == "failed" and code == 1, out[-3000:]
    assert verdicts(record)["decode_instructions_per_token"] == "failed"
    assert "simulated CPU" in record["details"]["perf"]["decided_by"]
    edit(repo, FFI, MORE_WORK_NEXT, NEXT)

    # 64 MB more resident memory at _create, without the rest.
    edit(repo, FFI, INCLUDES, MORE_INCLUDES)
    edit(repo, FFI, CREATED, BIGGER_CREATE)
    code, out = verify(repo, env, reference, "--rounds", "9")
    record = perf_record(repo)
    say("64 MB at _create", record)
    assert record["status"] == "failed", out[-3000:]
    assert code == 1, failures(repo)
    assert verdicts(record)["peak_rss_kb"] == "failed"
    ratio = record["metrics"]["peak_rss_kb_ratio"]
    assert ratio > 1.05, ratio
