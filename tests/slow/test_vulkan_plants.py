"""linux-vulkan's checks fail what they are there to catch, on the Vulkan device this host
has (Mesa's lavapipe here):

- a shader constant changed in a llama.cpp fork (every RMS norm's scale x1.01, in the Vulkan
  shader only, so the CPU reference is untouched) fails cross-arch-agreement, while
  byte-identity-reference stays VERIFIED: the seam still equals plain llama.h on that build;
- a change of the library's greedy path (a repeat penalty in its sampler chain, which plain
  llama.h does not apply) fails byte-identity-reference on the Vulkan cell.

Slow tier: a fork build of llama.cpp for Vulkan and the CPU, and two verifies of
linux-vulkan.none with both bundles (several minutes each on a software device)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.ci.helpers import copy_tree, env_for
from tests.plants import edit
from tests.signing import predicate
from tests.slow.test_fork_build import unpack_fork

CELL = "linux-vulkan.none"
RECIPE_PATCHES = Path(__file__).resolve().parents[2] / "conan/index/recipes/llama-cpp/all/patches"
SHADER = "ggml/src/ggml-vulkan/vulkan-shaders/rms_norm.comp"
SCALE = "    const FLOAT_TYPE scale = inversesqrt(mean + FLOAT_TYPE(p.param1));\n"
PLANTED_SCALE = "    const FLOAT_TYPE scale = inversesqrt(mean + FLOAT_TYPE(p.param1)) * FLOAT_TYPE(1.01);\n"
GREEDY = "        llama_sampler_chain_add(c, llama_sampler_init_greedy());\n        return chain;\n"
PENALISED_GREEDY = (
    "        llama_sampler_chain_add(c, llama_sampler_init_penalties(n_vocab, 64, 1.5f, 0.0f, 0.0f));\n"
    + GREEDY
)


@pytest.fixture(scope="module", autouse=True)
def _vulkan_runs_here() -> None:
    from eliza.app.project import capability, load_project_matrix

    can = capability(load_project_matrix().platform("linux-vulkan"))
    if not (can.can_build and can.can_run):
        pytest.skip(
            f"linux-vulkan cannot be built and run on this host: {can.build_reason}; {can.run_reason}"
        )


def verify(repo: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`nox -s verify -- --cell linux-vulkan.none` in the copy: about 13 minutes on lavapipe."""
    argv = [sys.executable, "-m", "nox", "-s", "verify", "--", "--cell", CELL]
    return subprocess.run(argv, cwd=repo, env=dict(env), capture_output=True, text=True, timeout=3600)


def record(repo: Path, check: str) -> dict[str, object]:
    return predicate(repo / "build" / "evidence" / f"{CELL}__{check}.json")


def test_a_shader_constant_fails_agreement_and_keeps_identity(tmp_path: Path) -> None:
    tree = unpack_fork(tmp_path / "fork")
    # the fork is the pinned tree as the recipe builds it: with its patches, and the plant
    for patch in sorted(RECIPE_PATCHES.glob("*.patch")):
        subprocess.run(["patch", "-p1", "-i", str(patch)], cwd=tree, check=True, capture_output=True)
    shader = tree / SHADER
    assert shader.read_text().count(SCALE) == 1, f"{SHADER} no longer holds the planted line"
    shader.write_text(shader.read_text().replace(SCALE, PLANTED_SCALE))
    repo = copy_tree(tmp_path / "repo")
    env = env_for(repo, ELIZA_LLAMA_CPP_DIR=str(tree))
    done = verify(repo, env)
    assert done.returncode != 0, done.stdout[-3000:]
    tiny = record(repo, "cross-arch-agreement")
    assert tiny["status"] == "failed", tiny["reason"]
    assert "exceeds the bound 3e-06" in str(tiny["reason"]), tiny["reason"]
    for check in ("byte-identity-reference", "byte-identity-reference.gemma3-270m", "abi", "consumer"):
        same = record(repo, check)
        assert same["status"] == "passed", (check, same["reason"])


def test_a_change_of_the_librarys_greedy_path_fails_identity_on_vulkan(tmp_path: Path) -> None:
    repo = copy_tree(tmp_path / "repo")
    edit(repo, "native/src/sampling.cpp", GREEDY, PENALISED_GREEDY)
    done = verify(repo, env_for(repo))
    assert done.returncode != 0, done.stdout[-3000:]
    identity = record(repo, "byte-identity-reference")
    assert identity["status"] == "failed", identity["reason"]
