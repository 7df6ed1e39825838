"""The released-ABI baseline catches what consumers would break on: in a copy of the
repository, a struct field of the public header changes type, or a function is added,
without a bump of ELIZA_INFERENCE_ABI_VERSION, and the abi check of the build session FAILS
with abidiff's words in the evidence. A deliberate bump with a regenerated baseline
(`nox -s abi-baseline`) passes again, and the SONAME follows the version.

The copies reuse llama.cpp from the caller's Conan cache: only libelizainference is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eliza.core.layout import PUBLIC_HEADER
from tests.ci.helpers import copy_tree
from tests.integration.test_synthetic_gate import copy_env, run
from tests.signing import predicate

pytestmark = pytest.mark.native

CELL = "linux-cpu.none"
HEADER = f"native/include/{PUBLIC_HEADER}"


@pytest.fixture(scope="module", autouse=True)
def _can_build_linux_cpu() -> None:
    from eliza.app.project import capability, load_project_matrix

    can = capability(load_project_matrix().platform("linux-cpu"))
    if not can.can_build:
        pytest.skip(f"linux-cpu cannot be built on this host: {can.build_reason}")


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{rel} no longer contains {old!r} once: update this test"
    path.write_text(text.replace(old, new))


def build_cell(repo: Path, env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    done = run(repo, "-m", "nox", "-s", f"build-{CELL}", env=env)
    record = predicate(repo / "build" / "evidence" / f"{CELL}__abi.json")
    return done.returncode, record, done.stdout + done.stderr


def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = copy_tree(tmp_path / "repo")
    return repo, copy_env(repo)


def test_a_struct_field_changed_without_a_bump_fails_until_the_baseline_is_regenerated(
    tmp_path: Path,
) -> None:
    repo, env = scratch(tmp_path)
    # Same size and offset (the header's layout assertions still hold): only the type changes.
    edit(repo, HEADER, "    int32_t      disable_thinking;", "    uint32_t     disable_thinking;")
    code, record, out = build_cell(repo, env)
    assert code != 0, out
    assert record["status"] == "failed"
    assert "abidiff against the released ABI 9 reports no change" in record["reason"]
    assert "bump ELIZA_INFERENCE_ABI_VERSION" in record["reason"]
    diff = record["details"]["released_abi_diff"]
    assert "disable_thinking" in diff and "uint32_t" in diff, diff
    assert "1 check(s) failed" in out and f"{CELL}/abi" in out
    # Regenerating the baseline of the same version would hide the change: refused.
    before = {p.name: p.read_bytes() for p in (repo / "native" / "abi").iterdir()}
    refused = run(repo, "-m", "nox", "-s", "abi-baseline", env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "bump ELIZA_INFERENCE_ABI_VERSION in the public header first" in refused.stderr
    assert {p.name: p.read_bytes() for p in (repo / "native" / "abi").iterdir()} == before

    # The deliberate path: bump the version, regenerate the baseline, build again.
    edit(repo, HEADER, "#define ELIZA_INFERENCE_ABI_VERSION 9", "#define ELIZA_INFERENCE_ABI_VERSION 10")
    code, record, out = build_cell(repo, env)
    assert code != 0 and "native/abi holds no baseline of ABI 10 (it holds abi-9)" in record["reason"], out
    regenerated = run(repo, "-m", "nox", "-s", "abi-baseline", env=env)
    assert regenerated.returncode == 0, regenerated.stdout + regenerated.stderr
    assert sorted(p.name for p in (repo / "native" / "abi").iterdir()) == [
        "abi-10.constants",
        "abi-10.exports",
        "abi-10.xml",
    ]
    code, record, out = build_cell(repo, env)
    assert code == 0, out
    assert record["status"] == "passed" and record["details"]["abi_version"] == "10"
    soname = next(s for s in record["details"]["subchecks"] if s["name"].startswith("SONAME"))
    assert soname["ok"] and "libelizainference.so.10" in soname["detail"]


# The slow tier: the struct-field case above runs the same abi check end to end (a break
# FAILS with abidiff's words); an added export's abidiff verdict is
# tests/gates/test_abi.py::test_abidiff_sees_a_changed_export_list.
@pytest.mark.slow
def test_an_added_function_or_a_renumbered_status_without_a_bump_fails(tmp_path: Path) -> None:
    repo, env = scratch(tmp_path)
    edit(repo, HEADER, "#define ELIZA_ERR_CANCELLED       (-7)", "#define ELIZA_ERR_CANCELLED       (-8)")
    edit(
        repo,
        HEADER,
        "ELIZA_API void eliza_inference_llm_stream_close(EliLlmStream * stream);\n",
        "ELIZA_API void eliza_inference_llm_stream_close(EliLlmStream * stream);\n"
        "ELIZA_API int32_t eliza_inference_abi_probe(void);\n",
    )
    edit(
        repo,
        "native/src/ffi.cpp",
        '}  // extern "C"',
        'int32_t eliza_inference_abi_probe(void) { return 1; }\n\n}  // extern "C"',
    )
    code, record, out = build_cell(repo, env)
    assert code != 0, out
    assert record["status"] == "failed"
    assert "added: ['eliza_inference_abi_probe']" in record["reason"]
    assert "eliza_inference_abi_probe" in record["details"]["released_abi_diff"]
    constants = next(s for s in record["details"]["subchecks"] if "ELIZA_* constants" in s["name"])
    assert not constants["ok"] and "-ELIZA_ERR_CANCELLED -7 +ELIZA_ERR_CANCELLED -8" in constants["detail"]
    # The header and the library still agree with each other: only the release baseline differs.
    header_check = next(
        s for s in record["details"]["subchecks"] if s["name"].startswith("exports equal the header")
    )
    assert header_check["ok"]
