"""A consumer that cannot run here says what to install, with exit status 5 (the planner's
NOT RUNNABLE HERE), instead of failing somewhere inside or passing vacuously."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.consumers.helpers import (
    EXIT_RUNTIME_MISSING,
    NODE_CONSUMER,
    node_command,
    run_consumer,
)


def test_node_consumer_without_koffi_names_setup(
    library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    # A copy of the consumer with no node_modules beside it and an empty cache.
    copy = tmp_path / "node"
    copy.mkdir()
    for name in ("consumer.js", "abi.js", "cancel-worker.js"):
        shutil.copy(NODE_CONSUMER.parent / name, copy / name)
    env = {"ELIZA_CACHE_DIR": str(tmp_path / "cache"), "ELIZA_NODE_CONSUMER_MODULES": str(tmp_path / "none")}
    run = run_consumer(
        [node_command()[0], str(copy / "consumer.js")], library_path, tiny_bundle, tmp_path / "r.json",
        env=env, runtime_required=False,
    )  # fmt: skip
    assert run.returncode == EXIT_RUNTIME_MISSING, run.describe()
    assert "koffi is not installed" in run.stderr and "ci/setup.sh" in run.stderr
    assert run.result is not None and run.result["passed"] is False


def test_jni_consumer_without_java_or_glue_names_what_to_install(
    jni_launcher: Path, library_path: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    # No java reachable: the launcher says which package to install.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    env = {"PATH": str(bare), "JAVA_HOME": ""}
    run = run_consumer(
        ["/bin/sh", str(jni_launcher)], library_path, tiny_bundle, tmp_path / "r1.json", env=env,
        runtime_required=False,
    )  # fmt: skip
    assert run.returncode == EXIT_RUNTIME_MISSING, run.describe()
    assert "default-jdk-headless" in run.stderr
    # Java present, the glue missing: the consumer names the build step.
    copy = tmp_path / "jni"
    shutil.copytree(jni_launcher.parent / "classes", copy / "classes")
    shutil.copy(jni_launcher, copy / "jni-consumer")
    run = run_consumer(
        [str(copy / "jni-consumer")], library_path, tiny_bundle, tmp_path / "r2.json",
        env={"PATH": os.environ["PATH"]}, runtime_required=False,
    )  # fmt: skip
    assert run.returncode == EXIT_RUNTIME_MISSING, run.describe()
    assert "native/consumers/jni/build.sh" in run.stderr
    assert run.result is not None and run.result["steps"][0]["step"] == "load"
