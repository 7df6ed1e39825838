"""`nox -s release` on this checkout's verified linux-cpu.none (verify's evidence, its
library, the Conan cache), into a folder of the test's own; then a CMake project outside
the repository consumes the package through `conan install` and CMakeDeps, and generates
the greedy tokens of the plain llama.h loop (the reference runner) on the same bundle.

The release ships what verify verified: a checkout that has not been verified has nothing
to ship, and these tests say so (skip) rather than verify it here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings, reference_argv
from eliza.adapters.conan import conan_env, conan_program
from eliza.app.project import current
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.core.c_abi import abi_version
from eliza.core.layout import cell_build_dir
from eliza.formats.bench_jsonl import load_run
from eliza.formats.files import sha256_file
from eliza.formats.provenance import verify_provenance
from eliza.formats.sbom import sbom_problem
from tests.signing import local_key

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CELL = "linux-cpu.none"
VERSION = f"{abi_version((REPO / 'native/include/eliza-inference-ffi.h').read_text())}.0.0"
EVIDENCE = REPO / "build" / "evidence" / f"{CELL}__build.json"


def nox(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", *argv], cwd=REPO, capture_output=True, text=True, timeout=900, env=env
    )


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not EVIDENCE.is_file():
        pytest.skip(f"no evidence of {CELL} in this checkout (run `nox -s verify` first): nothing to release")
    out = tmp_path_factory.mktemp("release") / VERSION
    done = nox("-s", "release", "--", "--version", VERSION, "--cell", CELL, "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{CELL}: ships" in done.stderr
    return out


def test_the_archive_holds_the_library_its_verified_evidence_names(released: Path) -> None:
    archive = released / f"elizainference-{VERSION}-{CELL}.tar.gz"
    named = {
        subject["digest"]["sha256"]
        for subject in _statement(EVIDENCE)["subject"]
        if subject["annotations"] == {"role": "library", "cell": CELL}
    }
    with tarfile.open(archive) as tar:
        member = tar.getmember(f"elizainference-{VERSION}-{CELL}/lib/libelizainference.so.{VERSION}")
        data = tar.extractfile(member)
        assert data is not None
        library = hashlib.sha256(data.read()).hexdigest()
        names = tar.getnames()
    assert library == sha256_file(cell_build_dir(CELL, REPO) / "build" / f"libelizainference.so.{VERSION}")
    assert library in named
    top = f"elizainference-{VERSION}-{CELL}"
    shipped = {"include/eliza-inference-ffi.h", "res/build-info.json", "licenses/llama-cpp/LICENSE"}
    assert {f"{top}/{name}" for name in shipped} <= set(names)
    assert not any("testkit" in n or n.endswith("reference_runner") for n in names)


def _statement(envelope: Path) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(base64.b64decode(json.loads(envelope.read_text())["payload"]))
    return statement


def test_sums_sbom_and_provenance_check_out(released: Path) -> None:
    archive = released / f"elizainference-{VERSION}-{CELL}.tar.gz"
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=released, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    assert f"{archive.name}: OK" in sums.stdout
    sbom = json.loads((released / f"{archive.name}.cdx.json").read_text())
    assert sbom_problem(json.dumps(sbom)) == ""
    llama = next(c for c in sbom["components"] if c["name"] == "llama-cpp")
    assert llama["pedigree"]["commits"][0]["uid"] and llama["externalReferences"][0]["hashes"][0]["content"]
    # The public key `nox -s keys` prints verifies the statement, whose subject is the archive.
    keys = nox("-s", "keys")
    public = next(line.split(": ", 1)[1] for line in keys.stderr.splitlines() if "public key" in line)
    assert public.strip() == local_key().public_b64
    statement_file = released / f"{archive.name}.intoto.jsonl"
    cli = subprocess.run(
        [sys.executable, "-m", "eliza.cli", "verify-provenance", str(statement_file),
         "--public-key", public.strip(), "--artifact", str(archive)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr
    provenance = (released / f"{archive.name}.intoto.jsonl").read_text()
    statement = verify_provenance(provenance, local_key().public_raw)
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["report.json"]["digest"]["sha256"] == sha256_file(released / "report.json")
    assert deps[f"build/evidence/{CELL}__build.json"]["digest"]["sha256"] == sha256_file(EVIDENCE)
    notes = (released / "RELEASE-NOTES.md").read_text()
    assert archive.name in notes and "## Shipped" in notes


def test_a_cmake_project_elsewhere_consumes_the_package_and_generates_the_reference_tokens(
    released: Path, tmp_path: Path
) -> None:
    facts = json.loads((released / "release.json").read_text())
    (cell,) = facts["cells"]
    project = tmp_path / "consumer"
    (project / "src").mkdir(parents=True)
    shutil.copyfile(REPO / "test_package" / "src" / "generate.c", project / "src" / "generate.c")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.15)\nproject(consumer LANGUAGES C)\n"
        "find_package(elizainference REQUIRED)\nadd_executable(generate src/generate.c)\n"
        "target_link_libraries(generate PRIVATE elizainference::elizainference)\n"
    )
    cache = current().cache
    env = conan_env(cache)
    install = subprocess.run(
        [*conan_program(), "install", *cell["conan_install"], "--output-folder", str(project / "build"),
         "-g", "CMakeDeps", "-g", "CMakeToolchain", "--build", "never", "--no-remote"],
        cwd=project, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    build = project / "build"
    for argv in (
        ["cmake", "-S", str(project), "-B", str(build / "out"), "-G", "Ninja",
         f"-DCMAKE_TOOLCHAIN_FILE={build / 'conan_toolchain.cmake'}", "-DCMAKE_BUILD_TYPE=Release"],
        ["cmake", "--build", str(build / "out")],
    ):  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    bundle, prompt, tokens = ensure_tiny_bundle(), "The quick brown fox jumps over the lazy dog and then", 24
    run_env = {**os.environ, "LD_LIBRARY_PATH": _package_lib(cell["conan_package"], env)}
    program = build / "out" / "generate"
    ours = subprocess.run(
        [str(program), str(bundle), str(tokens), prompt], capture_output=True, text=True, env=run_env
    )
    assert ours.returncode == 0, ours.stderr
    lines = dict(line.split(":", 1) for line in ours.stdout.splitlines() if ":" in line)
    prompts = tmp_path / "prompt.txt"
    prompts.write_text(prompt + "\n")
    out = tmp_path / "reference.jsonl"
    settings = BenchSettings(bundle=bundle, prompts=prompts, max_tokens=tokens, repeats=1)
    argv = reference_argv(cell_build_dir(CELL, REPO) / "build", settings, CELL, out)
    reference = subprocess.run(argv, capture_output=True, text=True)
    assert reference.returncode == 0, reference.stderr
    (expected,) = load_run(out).prompts
    assert [int(t) for t in lines["prompt"].split()] == list(expected.prompt_tokens)
    assert [int(t) for t in lines["tokens"].split()] == list(expected.tokens)
    assert len(expected.tokens) == tokens


def _package_lib(package_ref: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [*conan_program(), "cache", "path", package_ref], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return str(Path(done.stdout.strip()) / "lib")
