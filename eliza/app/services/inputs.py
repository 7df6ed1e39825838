"""The input hashes of the current tree, read once per run: what the fingerprint rules
of eliza.core.fingerprint combine per (cell, check)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from eliza.core.fingerprint import InputHashes
from eliza.core.host import HostFacts, chosen_vulkan_device
from eliza.formats.files import sha256_file, tree_hash

# Under native/ but not part of the library: the consumers load the released library as
# their users do, and the prompt files are the checks' input (hashed as `prompts`); a change
# to one re-runs the checks that read it, never the builds.
NOT_THE_LIBRARY = ("native/consumers", "native/tools/prompts")
# The recipes and the code that turns a cell into a Conan command line.
RECIPE_INPUTS = (
    "conanfile.py",
    "conan/index",
    "eliza/core/build_plan.py",
    "eliza/adapters/conan.py",
    "eliza/adapters/conan_remote.py",
    "eliza/adapters/cuda.py",
)
# What a pytest-driven check runs besides its own folder: fixtures and the ctypes binding.
TEST_HARNESS = ("tests/conftest.py", "eliza/adapters/ffi.py")
# The diff engine, the bench records and the driver of the bench tools decide byte identity.
BENCH_INPUTS = (
    "eliza/core/bench_diff.py",
    "eliza/core/bench_records.py",
    "eliza/adapters/bench_tools.py",
    "eliza/app/checks/byte_identity.py",
    "eliza/core/perf_stats.py",  # the seam overhead's interval and p
)
# What stages a runtime's artifact from a bundle's GGUF: the GGUF reading shared by the
# converters, each converter (a module or a package of one file per architecture), and the
# SentencePiece model the .litertlm carries.
CONVERTER_INPUTS = (
    "eliza/formats/gguf_models",
    "eliza/formats/mlx_weights",
    "eliza/formats/litertlm",
    "eliza/formats/sentencepiece_vocab.py",
)

# The perf check's runner, its statistics and waivers, and its round settings (bench_options).
PERF_CHECK_INPUTS = (
    "eliza/app/checks/perf.py",
    "eliza/core/perf_stats.py",
    "eliza/core/perf_waivers.py",
    "eliza/app/services/bench_options.py",
    # a backend perf check's backends, and its bundle: the runtimes' artifacts staged by
    # their converters
    "eliza/app/checks/runtimes.py",
    "eliza/app/services/bundle.py",
    # the runtimes' own runners, which each body is held to
    "eliza/adapters/own_runners",
    *CONVERTER_INPUTS,
)

# backend-agreement: its runner and judge, how a runtime is present or hidden, and the
# converters that stage the runtimes' artifacts from the bundle's GGUF.
BACKEND_CHECK_INPUTS = (
    "eliza/app/checks/backend_agreement.py",
    "eliza/core/backend_agreement.py",
    "eliza/app/checks/runtimes.py",
    "eliza/app/services/bundle.py",
    *CONVERTER_INPUTS,
)

# The code that judges a build (exports, the CPU-fallback run) and an ABI (the public
# surface cut, the released baseline, abidiff): a fix to it must re-run those checks.
BUILD_CHECK_INPUTS = ("eliza/app/checks/build.py", "eliza/adapters/abi_tools.py", "eliza/core/c_abi.py")
ABI_CHECK_INPUTS = (
    "eliza/app/checks/abi.py",
    "eliza/app/services/abi_files.py",
    "eliza/formats/abi_xml.py",
    "eliza/adapters/abi_tools.py",
    "eliza/core/c_abi.py",
)

# The consumers, and the code that runs and judges them.
CONSUMER_INPUTS = (
    "native/consumers",
    "eliza/app/checks/consumer.py",
    "eliza/adapters/consumers.py",
    "eliza/core/consumers.py",
    # the passes through a gate's runtime, on the bundle its converter stages
    "eliza/app/checks/runtimes.py",
    "eliza/app/services/bundle.py",
    *CONVERTER_INPUTS,
)


def input_hashes(
    repo: Path,
    bundle: Path,
    prompts: Path,
    host: HostFacts,
    abidiff_version: str = "",
    *,
    llama_source: str,
    bench_settings: str,
    other_bundles: Mapping[str, tuple[str, Path, str]] | None = None,
) -> InputHashes:
    """bench_settings: a description of the bench's settings (max tokens, repeats, sampling,
    context override), so evidence from a non-default bench run is never fresh for the
    default one."""

    def version(tool: object) -> str:
        return str(getattr(tool, "version", "") or "absent")

    vulkan = chosen_vulkan_device(host.vulkan_devices)
    tools = {
        "compiler": version(host.compiler),
        "cmake": version(host.cmake),
        "conan": version(host.conan),
        "ninja": version(host.ninja),
        "nvcc": version(host.nvcc),
        "glslc": version(host.glslc),
        # the device (and driver) the Vulkan cells run on: another is another result
        "vulkan-device": vulkan.describe() if vulkan else "absent",
        "abidiff": abidiff_version or "absent",
        "node": version(host.programs.get("node")),
        "jdk": version(host.programs.get("javac")),
    }
    return InputHashes(
        native=tree_hash(repo, ["native"], exclude=NOT_THE_LIBRARY),
        # The recipes and the code that turns a cell into a Conan command line.
        recipes=tree_hash(repo, RECIPE_INPUTS),
        bundle=tree_hash(bundle, ["text"]) if (bundle / "text").is_dir() else "absent",
        prompts=sha256_file(prompts) if prompts.is_file() else "absent",
        selector_tests=tree_hash(repo, ["tests/selector", *TEST_HARNESS]),
        gate_tests=tree_hash(repo, ["tests/gates", "eliza/app/checks/runtimes.py", *TEST_HARNESS]),
        native_tests=tree_hash(
            repo,
            [
                "tests/native",
                *TEST_HARNESS,
                "eliza/app/checks/native_suite.py",
                "eliza/adapters/sanitizer.py",
            ],
        ),
        bench=hashlib.sha256(tree_hash(repo, BENCH_INPUTS).encode() + bench_settings.encode()).hexdigest(),
        llama_source=llama_source,
        tools=tools,
        build_check=tree_hash(repo, BUILD_CHECK_INPUTS),
        abi_check=tree_hash(repo, ABI_CHECK_INPUTS),
        consumers=tree_hash(repo, CONSUMER_INPUTS),
        perf_check=tree_hash(repo, PERF_CHECK_INPUTS),
        backend_check=tree_hash(repo, BACKEND_CHECK_INPUTS),
        # id -> (pin, prompt file, sizing): a model bundle is its pinned sha256 (checked
        # against the file each time it is used), so any host judges its evidence
        bundles={
            bid: (
                hashlib.sha256(f"{pin}\n{sizing}".encode()).hexdigest(),
                sha256_file(prompt_file) if prompt_file.is_file() else "absent",
            )
            for bid, (pin, prompt_file, sizing) in (other_bundles or {}).items()
        },
    )


def fuzz_inputs(repo: Path) -> str:
    """What a fuzz run's figures describe: the library's sources and the targets."""
    return tree_hash(repo, ["native", "tests/fuzz"], exclude=NOT_THE_LIBRARY)
