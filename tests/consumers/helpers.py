"""Runs the consumers of native/consumers (docs/consumers.md) and reads their results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eliza.core.layout import REPO_ROOT

CONSUMERS = ("node", "jni")
NODE_CONSUMER = REPO_ROOT / "native" / "consumers" / "node" / "consumer.js"
JNI_SOURCES = REPO_ROOT / "native" / "consumers" / "jni"
JNI_BUILD = REPO_ROOT / "build" / "consumers" / "jni"
PROMPTS = REPO_ROOT / "native" / "tools" / "prompts" / "default.txt"
MAX_TOKENS = 16

# Every step a consumer must report as passed on a good library (docs/consumers.md).
LIFECYCLE_STEPS = (
    "load", "abi_version", "bind", "layout", "supported", "create", "tokenize", "stream_open", "prefill",
    "next_until_final", "detokenize", "cancel_from_thread", "cancelled_stays_cancelled", "reset",
    "reset_keep", "save_slot", "restore_slot", "error_bad_config", "error_bad_token", "error_missing_slot",
    "close", "destroy", "error_missing_bundle", "error_corrupt_model",
)  # fmt: skip
ERROR_CASES = ("bad_config", "bad_token", "missing_slot", "missing_bundle", "corrupt_model")

# The exit statuses both consumers share.
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_ABI_MISMATCH, EXIT_UNLOADABLE, EXIT_RUNTIME_MISSING = range(6)

# Decodes in one thread like the native suite: the checks are behaviour, not speed.
CONSUMER_ENV = {"ELIZA_N_THREADS": "1"}


@dataclass(frozen=True)
class ConsumerRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def steps(self) -> dict[str, dict[str, Any]]:
        assert self.result is not None, self.describe()
        return {s["step"]: s for s in self.result["steps"]}

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n{self.stdout[-4000:]}\n{self.stderr[-4000:]}"
        )


def require(tool: str, install: str) -> str:
    """The path of a runtime the consumers need; a missing one fails the test (never a skip)."""
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"{tool} is not installed: {install}", pytrace=False)
    return found


def node_command() -> list[str]:
    node = require("node", "install Node.js >= 18 (Debian/Ubuntu: nodejs npm), then run bash ci/setup.sh")
    return [node, str(NODE_CONSUMER)]


def build_jni(out: Path = JNI_BUILD) -> Path:
    """Builds the JNI glue and the Java classes (native/consumers/jni/build.sh) into out."""
    require("javac", "install a JDK (Debian/Ubuntu: default-jdk-headless; bash ci/setup.sh installs it)")
    require("java", "install a JDK (Debian/Ubuntu: default-jdk-headless; bash ci/setup.sh installs it)")
    done = subprocess.run(
        ["bash", str(JNI_SOURCES / "build.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"native/consumers/jni/build.sh exited {done.returncode}: {done.stderr.strip()}", pytrace=False
        )
    return out / "jni-consumer"


def run_consumer(
    command: Sequence[str],
    library: Path,
    bundle: Path,
    out: Path,
    *,
    prompts: Path = PROMPTS,
    max_tokens: int = MAX_TOKENS,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    runtime_required: bool = True,
) -> ConsumerRun:
    argv = [
        *command, "--library", str(library), "--bundle", str(bundle), "--prompts", str(prompts),
        "--max-tokens", str(max_tokens), "--out", str(out), *extra,
    ]  # fmt: skip
    full_env = {**os.environ, **CONSUMER_ENV, **(env or {})}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, check=False)
    result = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    run = ConsumerRun(argv, done.returncode, done.stdout, done.stderr, result)
    if runtime_required and done.returncode == EXIT_RUNTIME_MISSING:
        pytest.fail(f"the consumer cannot run here: {done.stderr.strip()}", pytrace=False)
    return run
