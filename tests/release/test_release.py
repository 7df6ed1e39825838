"""`nox -s release` on this checkout's verified linux-cpu.none and linux-cpu.mlx (verify's
evidence, their libraries, the Conan cache), into a folder of the test's own and to a real
conan_server on 127.0.0.1. Then its consumers, each outside the repository, generate the
greedy tokens of the plain llama.h loop (the reference runner) on the same bundle: a CMake
project through `conan install` and CMakeDeps in the project's Conan home; the same in an
empty Conan home with nothing but `conan profile detect` and the remote, building nothing;
and, from an archive unpacked in an empty folder without Conan, a CMake project with
find_package and a Makefile with pkg-config. The report's "would ship" is the release's
dry run, cell for cell.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eliza.adapters.bench_tools import BenchSettings, reference_argv
from eliza.adapters.conan import conan_env, conan_program
from eliza.adapters.conan_server import LocalServer, local_server, server_python
from eliza.app.project import current, load_project_matrix
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
MLX = "linux-cpu.mlx"
VERSION = f"{abi_version((REPO / 'native/include/eliza-inference-ffi.h').read_text())}.0.0"
EVIDENCE = REPO / "build" / "evidence" / f"{CELL}__build.json"
PROMPT, TOKENS = "The quick brown fox jumps over the lazy dog and then", 24
CONSUMER_CMAKE = (
    "cmake_minimum_required(VERSION 3.15)\nproject(consumer LANGUAGES C)\n"
    "find_package(elizainference REQUIRED)\nadd_executable(generate src/generate.c)\n"
    "target_link_libraries(generate PRIVATE elizainference::elizainference)\n"
)


def nox(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", *argv], cwd=REPO, capture_output=True, text=True, timeout=900, env=env
    )


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    python = server_python(current().env.get("ELIZA_CONAN_SERVER"), current().cache)
    with local_server(tmp_path_factory.mktemp("remote"), python) as started:
        yield started


@pytest.fixture(scope="module")
def release_run(
    tmp_path_factory: pytest.TempPathFactory, server: LocalServer
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """linux-cpu.none, and linux-cpu.mlx when this checkout verified it, released and uploaded."""
    if not EVIDENCE.is_file():
        pytest.skip(f"no evidence of {CELL} in this checkout (run `nox -s verify` first): nothing to release")
    cells = [CELL] + ([MLX] if (EVIDENCE.parent / f"{MLX}__build.json").is_file() else [])
    out = tmp_path_factory.mktemp("release") / VERSION
    remote = {
        "ELIZA_CONAN_REMOTE_URL": server.url,
        "ELIZA_CONAN_REMOTE_USER": server.user,
        "ELIZA_CONAN_REMOTE_PASSWORD": server.password,
    }
    argv = ["-s", "release", "--", "--version", VERSION, "--out", str(out)]
    done = nox(*argv, *[w for c in cells for w in ("--cell", c)], env={**os.environ, **remote})
    assert f"{CELL}: ships" in done.stderr, done.stdout + done.stderr
    # Everything shipped or the one refused cell is the mlx one (a noisy host's perf, say).
    assert done.returncode == 0 or f"{MLX}: refused" in done.stderr, done.stderr[-4000:]
    return out, done


@pytest.fixture(scope="module")
def released(release_run: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    return release_run[0]


def shipped_cell(released: Path, cell: str) -> dict[str, Any]:
    facts = json.loads((released / "release.json").read_text())
    found: dict[str, Any] | None = next((c for c in facts["cells"] if c["cell"] == cell), None)
    if found is None:
        refused = [r for r in facts["refused"] if r["cell"] == cell]
        why = "; ".join(refused[0]["reasons"]) if refused else "not verified in this checkout"
        pytest.skip(f"{cell} was not released here: {why}")
    return found


@pytest.fixture(scope="module")
def reference_tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[int], list[int]]:
    """(prompt tokens, generated tokens) of the reference runner, plain llama.h, on the tiny bundle."""
    folder = tmp_path_factory.mktemp("reference")
    prompts = folder / "prompt.txt"
    prompts.write_text(PROMPT + "\n")
    out = folder / "reference.jsonl"
    settings = BenchSettings(bundle=ensure_tiny_bundle(), prompts=prompts, max_tokens=TOKENS, repeats=1)
    run(reference_argv(cell_build_dir(CELL, REPO) / "build", settings, CELL, out))
    (expected,) = load_run(out).prompts
    assert len(expected.tokens) == TOKENS
    return list(expected.prompt_tokens), list(expected.tokens)


def generated(program: Path, env: dict[str, str] | None = None) -> tuple[list[int], list[int]]:
    """(prompt tokens, generated tokens) of a consumer's test_package/src/generate.c."""
    done = run([str(program), str(ensure_tiny_bundle()), str(TOKENS), PROMPT], env=env)
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    return [int(t) for t in lines["prompt"].split()], [int(t) for t in lines["tokens"].split()]


def consumer_project(folder: Path, cmake: bool = True) -> Path:
    (folder / "src").mkdir(parents=True)
    shutil.copyfile(REPO / "test_package" / "src" / "generate.c", folder / "src" / "generate.c")
    if cmake:
        (folder / "CMakeLists.txt").write_text(CONSUMER_CMAKE)
    return folder


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
    shipped = {
        "include/eliza-inference-ffi.h", "res/build-info.json", "licenses/llama-cpp/LICENSE", "LICENSE",
        "licenses/LICENSE", "lib/pkgconfig/elizainference.pc",
        "lib/cmake/elizainference/elizainferenceConfig.cmake",
        "lib/cmake/elizainference/elizainferenceConfigVersion.cmake",
        "lib/cmake/elizainference/elizainferenceTargets.cmake",
        "lib/cmake/elizainference/elizainferenceTargets-release.cmake",
    }  # fmt: skip
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
    released: Path, tmp_path: Path, reference_tokens: tuple[list[int], list[int]]
) -> None:
    cell = shipped_cell(released, CELL)
    project = consumer_project(tmp_path / "consumer")
    cache = current().cache
    env = conan_env(cache)
    build = project / "build"
    run(
        [*conan_program(), "install", *cell["conan_install"], "--output-folder", str(build),
         "-g", "CMakeDeps", "-g", "CMakeToolchain", "--build", "never", "--no-remote"],
        cwd=project, env=env,
    )  # fmt: skip
    toolchain = f"-DCMAKE_TOOLCHAIN_FILE={build / 'conan_toolchain.cmake'}"
    run(["cmake", "-S", str(project), "-B", str(build / "out"), "-G", "Ninja", toolchain,
         "-DCMAKE_BUILD_TYPE=Release"], env=env)  # fmt: skip
    run(["cmake", "--build", str(build / "out")], env=env)
    run_env = {**os.environ, "LD_LIBRARY_PATH": _package_lib(cell["conan_package"], env)}
    assert generated(build / "out" / "generate", run_env) == reference_tokens


def _package_lib(package_ref: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [*conan_program(), "cache", "path", package_ref], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return str(Path(done.stdout.strip()) / "lib")


# --------------------------------------------------------------------------- a consumer's own Conan home


@pytest.fixture(scope="module")
def consumer_home(
    tmp_path_factory: pytest.TempPathFactory, server: LocalServer, released: Path
) -> dict[str, str]:
    """An empty Conan home with nothing but `conan profile detect` and the release's remote
    (Conan's default remote removed: nothing else is asked), and no variable of eliza's."""
    home = tmp_path_factory.mktemp("consumer-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELIZA_", "CONAN_"))} | {
        "CONAN_HOME": str(home)
    }
    run([*conan_program(), "profile", "detect"], env=env)
    for name in json.loads(run([*conan_program(), "remote", "list", "--format", "json"], env=env).stdout):
        run([*conan_program(), "remote", "remove", name["name"]], env=env)
    run([*conan_program(), "remote", "add", "releases", server.url], env=env)
    return env


def consumer_install(env: dict[str, str], folder: Path, *extra: str) -> dict[str, Any]:
    """`conan install --requires=elizainference/V ...` as a consumer types it; its graph's nodes."""
    argv = [*conan_program(), "install", f"--requires=elizainference/{VERSION}", *extra, "-g", "CMakeDeps",
            "-g", "CMakeToolchain", "--output-folder", str(folder), "--format", "json"]  # fmt: skip
    nodes: dict[str, Any] = json.loads(run(argv, env=env).stdout)["graph"]["nodes"]
    return nodes


def test_an_empty_conan_home_installs_the_release_with_its_own_defaults_and_builds_nothing(
    released: Path,
    server: LocalServer,
    consumer_home: dict[str, str],
    tmp_path: Path,
    reference_tokens: tuple[list[int], list[int]],
) -> None:
    cell = shipped_cell(released, CELL)
    assert cell["conan_install"] == [f"--requires=elizainference/{VERSION}"]  # nothing more to type
    profile = run([*conan_program(), "profile", "show"], env=consumer_home).stdout
    assert "compiler.cppstd=gnu17" in profile  # not the build's 17: the binary is the same
    project = consumer_project(tmp_path / "consumer")
    nodes = consumer_install(consumer_home, project / "build")
    # The package alone: llama.cpp is linked in and never part of a consumer's graph.
    (node,) = [n for n in nodes.values() if n["recipe"] != "Cli"]
    assert node["ref"].split("#")[0] == f"elizainference/{VERSION}"
    assert node["binary"] == "Download", node["binary"]
    assert node["package_id"] == cell["conan_package"].split(":")[1].split("#")[0]
    # Neither the C++ standard, the standard library nor the build type selects another binary.
    for settings in (
        ["-s", "compiler.cppstd=20", "-s", "compiler.libcxx=libstdc++"],
        ["-s", "build_type=Debug"],
    ):
        again = consumer_install(consumer_home, tmp_path / "again", *settings)
        assert [n["package_id"] for n in again.values() if n["recipe"] != "Cli"] == [node["package_id"]]
    # The remote holds this package's recipe and binaries, nothing of llama.cpp.
    stored = {p.relative_to(server.storage).parts[0] for p in server.storage.iterdir()}
    assert stored == {"elizainference"}, stored
    folder = Path(node["package_folder"])
    assert (folder / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    assert sha256_file(folder / "lib" / f"libelizainference.so.{VERSION}") == cell["library_sha256"]
    build = project / "build"
    run(["cmake", "-S", str(project), "-B", str(build / "out"), "-G", "Ninja",
         f"-DCMAKE_TOOLCHAIN_FILE={build / 'conan_toolchain.cmake'}", "-DCMAKE_BUILD_TYPE=Release"],
        env=consumer_home)  # fmt: skip
    run(["cmake", "--build", str(build / "out")], env=consumer_home)
    run_env = {**consumer_home, "LD_LIBRARY_PATH": str(folder / "lib")}
    assert generated(build / "out" / "generate", run_env) == reference_tokens


def test_the_mlx_option_gets_the_mlx_cells_package(
    released: Path, consumer_home: dict[str, str], tmp_path: Path
) -> None:
    cell = shipped_cell(released, MLX)
    assert cell["conan_install"] == [
        f"--requires=elizainference/{VERSION}",
        "-o",
        "elizainference/*:with_mlx=True",
    ]
    nodes = consumer_install(consumer_home, tmp_path / "mlx", "-o", "elizainference/*:with_mlx=True")
    (node,) = [n for n in nodes.values() if n["recipe"] != "Cli"]
    assert node["binary"] == "Download" and node["options"]["with_mlx"] == "True"
    assert node["package_id"] == cell["conan_package"].split(":")[1].split("#")[0]
    assert node["package_id"] != shipped_cell(released, CELL)["conan_package"].split(":")[1].split("#")[0]
    folder = Path(node["package_folder"])
    assert (folder / "lib" / "libelizainference-mlx.so").is_file()
    assert sha256_file(folder / "lib" / f"libelizainference.so.{VERSION}") == cell["library_sha256"]
    assert (folder / "licenses" / "mlx").is_dir() and (folder / "LICENSE").is_file()


# --------------------------------------------------------------------------- without Conan


@pytest.fixture(scope="module")
def unpacked(released: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """linux-cpu.none's archive unpacked in an empty folder."""
    folder = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(released / f"elizainference-{VERSION}-{CELL}.tar.gz") as tar:
        tar.extractall(folder, filter="tar")
    (prefix,) = folder.iterdir()
    return prefix


def test_an_unpacked_archive_serves_find_package(
    unpacked: Path, tmp_path: Path, reference_tokens: tuple[list[int], list[int]]
) -> None:
    project = consumer_project(tmp_path / "consumer")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELIZA_", "CONAN_"))}
    run(["cmake", "-S", str(project), "-B", str(out), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={unpacked}",
         "-DCMAKE_BUILD_TYPE=Release"], env=env)  # fmt: skip
    cache = (out / "CMakeCache.txt").read_text()
    assert f"elizainference_DIR:PATH={unpacked}/lib/cmake/elizainference" in cache
    run(["cmake", "--build", str(out)], env=env)
    # The imported target names the library in the unpacked folder, which CMake puts on the
    # program's run path: it runs as built.
    assert generated(out / "generate", env) == reference_tokens


def test_an_unpacked_archive_serves_pkg_config(
    unpacked: Path, tmp_path: Path, reference_tokens: tuple[list[int], list[int]]
) -> None:
    project = consumer_project(tmp_path / "consumer", cmake=False)
    (project / "Makefile").write_text(
        "generate: src/generate.c\n\t$(CC) -o $@ $< $(shell pkg-config --cflags --libs elizainference)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELIZA_", "CONAN_"))}
    env["PKG_CONFIG_PATH"] = str(unpacked / "lib" / "pkgconfig")
    flags = run(["pkg-config", "--cflags", "--libs", "elizainference"], env=env).stdout.split()
    # ${pcfiledir}/../..: wherever the folder is unpacked
    assert [f[:2] + os.path.normpath(f[2:]) if f[:2] in ("-I", "-L") else f for f in flags] == [
        f"-I{unpacked}/include", f"-L{unpacked}/lib", "-lelizainference",
    ]  # fmt: skip
    assert run(["pkg-config", "--modversion", "elizainference"], env=env).stdout.strip() == VERSION
    run(["make", "-C", str(project)], env=env)
    assert (
        generated(project / "generate", {**env, "LD_LIBRARY_PATH": str(unpacked / "lib")}) == reference_tokens
    )


def test_the_license_is_in_the_repository_the_archive_and_the_sbom(released: Path, unpacked: Path) -> None:
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License")
    assert (unpacked / "LICENSE").read_text() == license_text
    assert (unpacked / "licenses" / "LICENSE").read_text() == license_text
    for archive in sorted(released.glob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            top = archive.name.removesuffix(".tar.gz")
            member = tar.extractfile(f"{top}/LICENSE")
            assert member is not None and member.read().decode() == license_text
        sbom = (released / f"{archive.name}.cdx.json").read_text()
        assert sbom_problem(sbom) == ""
        assert json.loads(sbom)["metadata"]["component"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert "License: MIT" in (released / "RELEASE-NOTES.md").read_text()


# --------------------------------------------------------------------------- the report says what would ship


def test_the_reports_would_ship_is_the_release_dry_run_cell_for_cell(tmp_path: Path) -> None:
    if not EVIDENCE.is_file():
        pytest.skip(f"no evidence of {CELL} in this checkout (run `nox -s verify` first)")
    report = nox("-s", "report", "--", "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-3000:]
    views = json.loads((tmp_path / "report" / "report.json").read_text())["would_ship"]
    dry = nox("-s", "release", "--", "--version", VERSION, "--dry-run")
    lines = [line.removeprefix("nox > ") for line in dry.stderr.splitlines()]
    matrix = load_project_matrix()
    assert {v["cell"] for v in views} == {c.id for c in matrix.cells if c.variant is None}
    for view in views:
        if view["verdict"] == "not here":
            platform = matrix.cell(view["cell"]).platform.id
            assert any(line.startswith(f"not here: {platform} (") for line in lines), (view, lines)
        else:
            assert view["line"] in lines, (view, dry.stderr[-3000:])
    said = [line.split(": ", 1)[0] for line in lines if ": ships (" in line or ": refused: " in line]
    assert sorted(said) == sorted(v["cell"] for v in views if v["verdict"] != "not here")
    assert any(v["verdict"] == "ship" and v["cell"] == CELL for v in views), views
