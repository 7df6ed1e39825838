"""Evidence a later run cannot break, end to end in a copy of the repository: the gated
cells' gate-fallthrough records name the platform's junit file and the no-gate cell's
runs, which re-running the no-gate cell alone writes again. They stay VERIFIED through
`--rerun --cell linux-cpu.none`, then `--rerun --cell linux-cpu.mlx`, then a plain verify
(which runs nothing), and the artifact store holds exactly what the records name.

Slow tier: four verifies of real builds. The default tiers prove the same path in parts:
tests/unit/test_artifact_store.py (a shared output written again leaves the record's copy
as it was; copies no record names are collected) and tests/unit/test_verify_plan.py
(a record whose shared artifact was written again runs again rather than being kept)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eliza.core.evidence import RECORD_SUFFIX
from eliza.core.report.states import GridState
from eliza.formats.evidence_json import read_records
from tests.ci.helpers import copy_tree, env_for, nox, run_only

pytestmark = pytest.mark.slow

CELLS = ("linux-cpu.none", "linux-cpu.mlx")


def states(repo: Path) -> dict[tuple[str, str], str]:
    report = json.loads((repo / "build" / "report" / "report.json").read_text())
    return {
        (e["cell"], e["check"]): e["state"]
        for row in report["rows"]
        for e in row["entries"]
        if e["cell"] in CELLS and e["check"] in ("build", "gate-fallthrough")
    }


def store_and_names(repo: Path) -> tuple[set[str], set[str]]:
    """(the files in the artifact store, the artifact paths the records name)."""
    named = {
        a.path
        for item in read_records([repo / "build" / "evidence"], {})
        if item.record is not None
        for a in item.record.artifacts
    }
    store = repo / "build" / "artifacts"
    return {p.relative_to(repo).as_posix() for p in store.rglob("*") if p.is_file()}, named


def test_rerunning_one_cell_leaves_every_other_cells_evidence_as_it_was(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, ["build", "gate-fallthrough"])
    env = env_for(repo)
    cells = [a for c in CELLS for a in ("--cell", c)]
    done = nox(repo, "-s", "verify", "--", *cells, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    first = states(repo)
    assert first and set(first.values()) == {GridState.VERIFIED.value}, first
    for argv in (["--rerun", "--cell", "linux-cpu.none"], ["--rerun", "--cell", "linux-cpu.mlx"], cells):
        done = nox(repo, "-s", "verify", "--", *argv, env=env)
        assert done.returncode == 0, done.stderr[-4000:]
        assert states(repo) == first, argv
        assert "INVALID" not in done.stderr, done.stderr[-4000:]
    stored, named = store_and_names(repo)
    assert stored and stored <= named, stored - named  # nothing the records do not name
    assert all(p.endswith(("xml", "jsonl", "json", RECORD_SUFFIX)) for p in stored), stored


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_verify_killed_part_way_then_run_again_ends_as_an_uninterrupted_one(
    tmp_path: Path, jobs: str
) -> None:
    """`kill -9` of the whole verify (its process group: nox, the builds, the suites) once the
    first record is written, then verify again: every state is the uninterrupted run's,
    and the store holds only what the records name."""
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, ["build", "gate-fallthrough"])
    env = env_for(repo)
    cells = [a for c in CELLS for a in ("--cell", c)]
    child = subprocess.Popen(
        [sys.executable, "-m", "nox", "-s", "verify", "--", *cells, "--jobs", jobs],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:
        if line.rstrip().endswith(" ok") and any(c in line for c in CELLS):
            os.killpg(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=600)
    assert child.returncode != 0, "the verify ended before it could be killed"
    done = nox(repo, "-s", "verify", "--", *cells, "--jobs", jobs, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert set(states(repo).values()) == {GridState.VERIFIED.value}, states(repo)
    stored, named = store_and_names(repo)
    assert stored <= named, stored - named


# Check kinds the kill test goes through, one record of the re-run cell each: the kill lands
# after each of their records, so in the middle of the next one (and once in the build).
KILL_CHECKS = ["build", "gate-fallthrough", "byte-identity-reference", "byte-identity-gates", "abi"]
ALL_CELLS = ("linux-cpu.none", "linux-cpu.litert", "linux-cpu.mlx", "linux-cpu.litert+mlx")


def all_states(repo: Path, env: dict[str, str]) -> dict[tuple[str, str], str]:
    """Every check's state of the linux-cpu cells, as a report rendered from the evidence
    now on disk says (a killed verify rendered none)."""
    done = nox(repo, "-s", "report", env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads((repo / "build" / "report" / "report.json").read_text())
    return {
        (e["cell"], e["check"]): e["state"]
        for row in report["rows"]
        for e in row["entries"]
        if e["cell"] in ALL_CELLS and e["check"] in KILL_CHECKS
    }


def outside_store(repo: Path) -> set[str]:
    """The files in build/'s folders but the artifact store (build/ itself holds the
    sessions' lock and stamps, one each)."""
    build = repo / "build"
    return {
        p.relative_to(build).as_posix()
        for p in build.glob("*/**/*")
        if p.is_file() and not p.is_relative_to(build / "artifacts")
    }


def killed_after(repo: Path, env: dict[str, str], argv: list[str], records: int) -> str:
    """Starts `nox -s verify -- argv` in its own process group and kills the whole group
    (`kill -9`) once `records` record lines have been printed (0: when the first line comes);
    returns what it printed."""
    child = subprocess.Popen(
        [sys.executable, "-m", "nox", "-s", "verify", "--", *argv],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert child.stdout is not None
    seen, said = 0, []
    for line in child.stdout:
        said.append(line)
        said_line = line.split("nox > ", 1)[-1]  # nox's log prefix
        if said_line.startswith("  linux-cpu.") and said_line.split()[2:3] in (["ok"], ["FAILED"]):
            seen += 1
        if seen >= records:
            os.killpg(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=900)
    assert child.returncode != 0, "the verify ended before it could be killed:\n" + "".join(said)[-3000:]
    return "".join(said)


def test_a_kill_at_any_step_of_a_rerun_leaves_every_other_cells_evidence(tmp_path: Path) -> None:
    """The four linux-cpu cells verified; then `--rerun --cell linux-cpu.none` killed after
    each of its records in turn (so once in the middle of every check kind), each time
    followed by a report of what is on disk and a plain verify. The other cells' states never
    move, the final report equals the uninterrupted one, and after ten verifies (four killed) the
    store holds only what records name and build/ holds the same other files as after the first."""
    repo = copy_tree(tmp_path / "repo")
    run_only(repo, KILL_CHECKS)
    env = env_for(repo)
    cells = [a for c in ALL_CELLS for a in ("--cell", c)]
    done = nox(repo, "-s", "verify", "--", *cells, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    first = all_states(repo, env)
    # n/a: the gate-only checks of the no-gate cell
    assert GridState.VERIFIED.value in first.values(), first
    assert set(first.values()) <= {GridState.VERIFIED.value, GridState.NOT_APPLICABLE.value}, first
    others = {k: v for k, v in first.items() if k[0] != "linux-cpu.none"}
    files_after_first = outside_store(repo)
    # the no-gate cell writes one record per check but byte-identity-gates (n/a there)
    for records in range(len(KILL_CHECKS) - 1):
        said = killed_after(repo, env, ["--rerun", "--cell", "linux-cpu.none"], records)
        now = all_states(repo, env)
        moved = {k: (others[k], now.get(k)) for k in others if now.get(k) != others[k]}
        assert not moved, f"killed after {records} record(s): {moved}\n{said[-3000:]}"
        done = nox(repo, "-s", "verify", "--", *cells, env=env)
        assert done.returncode == 0, done.stderr[-4000:]
        assert all_states(repo, env) == first, f"killed after {records} record(s)"
    done = nox(repo, "-s", "verify", "--", "--rerun", "--cell", "linux-cpu.mlx", env=env)  # the tenth
    assert done.returncode == 0, done.stderr[-4000:]
    assert all_states(repo, env) == first
    # The store holds what the records name (a re-run cell's new copies beside the ones the
    # other cells' records still name, no more); the working files are replaced, not added.
    stored, named = store_and_names(repo)
    assert stored <= named, stored - named
    assert outside_store(repo) == files_after_first


def test_two_checkouts_on_one_cache_keep_each_others_evidence(tmp_path: Path) -> None:
    """Two copies of the repository on one cache (the caller's: one Conan home, compiler
    cache, bundles and simulated-CPU counts) verify side by side, then one re-runs a cell
    while the other verifies again: every cell of both ends VERIFIED."""
    repos = [copy_tree(tmp_path / name) for name in ("a", "b")]
    for repo in repos:
        run_only(repo, ["build", "gate-fallthrough", "byte-identity-reference"])
    envs = [env_for(repo) for repo in repos]
    cells = [a for c in CELLS for a in ("--cell", c)]

    def side_by_side(argvs: list[list[str]]) -> None:
        children = [
            subprocess.Popen(
                [sys.executable, "-m", "nox", "-s", "verify", "--", *argv],
                cwd=repo,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for repo, env, argv in zip(repos, envs, argvs, strict=True)
        ]
        outputs = [child.communicate(timeout=1800)[0] for child in children]
        for child, output in zip(children, outputs, strict=True):
            assert child.returncode == 0, output[-4000:]

    side_by_side([cells, cells])
    first = [states(repo) for repo in repos]
    for found in first:
        assert found and set(found.values()) == {GridState.VERIFIED.value}, found
    side_by_side([["--rerun", "--cell", "linux-cpu.none"], cells])
    assert [states(repo) for repo in repos] == first
    for repo in repos:
        stored, named = store_and_names(repo)
        assert stored <= named, stored - named
