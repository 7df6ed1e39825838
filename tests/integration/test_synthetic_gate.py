"""Adding a gate is one matrix.yaml entry plus one factory file: a copy of the repository
gets a synthetic gate `qnn` that way and nothing else, and then lists its session, builds
its cell with the factory compiled in, passes the matrix-driven factory tests and gets its
CI job. Without the factory file the build stops at CMake configure, naming the file.

The copy's builds reuse llama.cpp from the caller's Conan cache (ELIZA_CACHE_DIR as the
caller has it), so only libelizainference itself is compiled."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from eliza.core.layout import LIBRARY_NAME
from tests.ci.helpers import copy_tree

pytestmark = pytest.mark.native

GATE = {
    "id": "qnn",
    "description": "Synthetic gate of tests/integration/test_synthetic_gate.py",
    "cmake_option": "ELIZA_ENABLE_QNN",
    "conan_option": "with_qnn",
    "factory": "qnn-npu",
    "preference_rank": 70,
    # one of each form: an extension, a directory, a plain file
    "artifacts": ["text/*.qnnctx", "text/qnn/", "text/qnn-model.bin"],
    "runtime_platforms": ["android-arm64"],
}
PLATFORM = "linux-cpu"
CELL = f"{PLATFORM}.{GATE['id']}"
FACTORY_FILE = f"native/src/backends/{GATE['id']}.cpp"

# Modelled on the factory files of native/src/backends/: what a new gate's author writes.
FACTORY_SOURCE = """\
// QNN backend (synthetic, written by tests/integration/test_synthetic_gate.py).
#include <string>

#include "llm-backend.h"
#include "status.h"

namespace eliza::backends {
namespace {

class QnnFactory final : public GateFactory {
public:
    using GateFactory::GateFactory;

    bool available() const override { return false; }

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * /*cfg*/,
                             char ** out_error) override {
        fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
             std::string(name()) + ": the QNN runtime is not linked into this build; cannot serve bundle '" +
                 (ctx ? llm_backend_context_bundle_dir(ctx) : "") + "'");
        return nullptr;
    }
};

}  // namespace

LlmBackendFactory & qnn_factory(const GateSpec & spec) {
    static QnnFactory instance(spec);
    return instance;
}

}  // namespace eliza::backends
"""


def add_gate_to_matrix(repo: Path) -> None:
    """The one matrix.yaml edit: the gate, allowed on linux-cpu, with a linux-cpu cell."""
    path = repo / "matrix.yaml"
    data = yaml.safe_load(path.read_text())
    data["gates"].append(GATE)
    platform = next(p for p in data["platforms"] if p["id"] == PLATFORM)
    platform["allowed_gates"].append(GATE["id"])
    data["cells"]["product"].append({"platforms": [PLATFORM], "gate_sets": [[GATE["id"]]]})
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def copy_env(repo: Path) -> dict[str, str]:
    """The caller's environment (its ELIZA_CACHE_DIR included), pointed at the copy."""
    env = {k: v for k, v in os.environ.items() if k not in ("ELIZA_MATRIX", "ELIZA_TEST_CELL")}
    env["PYTHONPATH"] = str(repo)
    env["ELIZA_TEST_PLATFORM"] = PLATFORM
    env["ELIZA_TEST_CELLS"] = CELL
    return env


def run(repo: Path, *argv: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`python argv...` in the copy: its noxfile, its eliza, its tests."""
    return subprocess.run(
        [sys.executable, *argv], cwd=repo, env=dict(env), capture_output=True, text=True, timeout=600
    )


def make_copy(root: Path, *, with_factory: bool) -> tuple[Path, dict[str, str]]:
    repo = copy_tree(root / "repo")
    add_gate_to_matrix(repo)
    if with_factory:
        (repo / FACTORY_FILE).write_text(FACTORY_SOURCE)
    env = copy_env(repo)
    which = run(repo, "-c", "import eliza; print(eliza.__file__)", env=env)
    assert Path(which.stdout.strip()).is_relative_to(repo), which.stdout + which.stderr
    return repo, env


@pytest.fixture(scope="module", autouse=True)
def _can_build_linux_cpu() -> Iterator[None]:
    from eliza.app.project import capability, load_project_matrix

    can = capability(load_project_matrix().platform(PLATFORM))
    if not can.can_build:
        pytest.skip(f"{PLATFORM} cannot be built on this host: {can.build_reason}")
    yield


# The slow tier (19 s: a copy configures and compiles a cell of a new gate); the default tier
# keeps the refusal below, and a verify builds and checks every real gate's cells.
@pytest.mark.slow
def test_a_gate_is_one_matrix_entry_and_one_factory_file(tmp_path: Path) -> None:
    repo, env = make_copy(tmp_path, with_factory=True)

    listed = run(repo, "-m", "nox", "-l", env=env)
    assert listed.returncode == 0, listed.stderr
    assert f"build-{CELL}" in listed.stdout.split()

    built = run(repo, "-m", "nox", "-s", f"build-{CELL}", env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]
    out = repo / "build" / PLATFORM / GATE["id"] / "build"
    assert json.loads((out / "build-info.json").read_text())["gates"] == [GATE["id"]]
    assert str(GATE["factory"]).encode() + b"\0" in (out / LIBRARY_NAME).read_bytes()

    tests = run(
        repo, "-m", "pytest", "tests/gates/test_gate_factories.py", "-v", "-p", "no:cacheprovider", env=env
    )
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-2000:]
    passed = re.search(r"(\d+) passed", tests.stdout.splitlines()[-1])
    assert passed and int(passed.group(1)) > 0, tests.stdout[-2000:]
    assert f"[cell={CELL}-gate={GATE['id']}] PASSED" in tests.stdout, tests.stdout[-5000:]

    ci = run(repo, "-m", "eliza.cli", "ci-files", env=env)
    assert ci.returncode == 0, ci.stderr
    workflow = "\n".join(p.read_text() for p in sorted((repo / ".github" / "workflows").glob("*.yml")))
    assert f'name: "{CELL}"' in workflow
    assert f"--cell {CELL}" in workflow

    report = run(repo, "-m", "nox", "-s", "report", env=env)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    rows = json.loads((repo / "build" / "report" / "report.json").read_text())["rows"]
    [row] = [r for r in rows if r["cell"] == CELL]
    assert {e["check"] for e in row["entries"]} >= {"build", "gate-fallthrough", "byte-identity-gates"}


def test_a_gate_without_its_factory_file_fails_at_configure(tmp_path: Path) -> None:
    repo, env = make_copy(tmp_path, with_factory=False)
    built = run(repo, "-m", "nox", "-s", f"build-{CELL}", env=env)
    output = built.stdout + built.stderr
    assert built.returncode != 0, output[-3000:]
    assert FACTORY_FILE in output, output[-5000:]
    assert f"gate '{GATE['id']}'" in output, output[-5000:]
    assert not (repo / "build" / PLATFORM / GATE["id"] / "build" / LIBRARY_NAME).exists()
