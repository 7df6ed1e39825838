"""Running the consumers of the C ABI (native/consumers): the Node program under node, the
JVM one through the launcher its build script writes. Each writes a JSON result; this
module runs them and reads it, and says when a consumer's own runtime is missing."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eliza.adapters import proc
from eliza.adapters.errors import ToolError

CONSUMERS = ("node", "jni")
TIMEOUT_S = 600


@dataclass(frozen=True, kw_only=True)
class ConsumerRun:
    name: str
    argv: tuple[str, ...]
    exit_status: int
    result: dict[str, Any] | None  # None when it wrote none
    log: str


def missing_runtime(name: str) -> str:
    """What to install for the consumer to run here, or "" when its runtime is present."""
    if name == "node":
        return "" if shutil.which("node") else "node (Debian/Ubuntu: nodejs; bash ci/setup.sh installs it)"
    if name == "jni":
        found = shutil.which("javac") and shutil.which("java")
        return (
            "" if found else "a JDK, javac and java (Debian/Ubuntu: default-jdk-headless; bash ci/setup.sh)"
        )
    raise ValueError(f"unknown consumer {name!r} (known: {', '.join(CONSUMERS)})")


def node_modules_env(cache: Path, env: Mapping[str, str]) -> dict[str, str]:
    """ELIZA_NODE_CONSUMER_MODULES at the koffi that ci/setup.sh installed into `cache`, for
    a process whose own cache starts empty (a rehearsed CI job, a test's copy): {} when
    `env` already names one or the cache holds none."""
    modules = cache / "tools" / "node-consumer" / "node_modules"
    if "ELIZA_NODE_CONSUMER_MODULES" in env or not (modules / "koffi").is_dir():
        return {}
    return {"ELIZA_NODE_CONSUMER_MODULES": str(modules)}


# What the JVM consumer was built from and into by this process: a verify's consumer checks
# (each cell, each bundle) share one build, made by the first of them, the others waiting.
_JNI_BUILT: set[tuple[Path, Path, tuple[tuple[str, int], ...]]] = set()
_JNI_LOCK = threading.Lock()


def build_jni(repo: Path, out: Path) -> Path:
    """The JVM consumer's glue library, classes and launcher, built into `out`; built again
    only when its sources (native/consumers/jni, the public header) changed since this
    process built it."""
    sources = repo / "native" / "consumers" / "jni"
    stamp = tuple(
        (str(f), f.stat().st_mtime_ns)
        for f in sorted([*sources.rglob("*"), repo / "native" / "include" / "eliza-inference-ffi.h"])
        if f.is_file()
    )
    with _JNI_LOCK:
        if (repo, out, stamp) not in _JNI_BUILT or not (out / "jni-consumer").is_file():
            done = proc.run(["bash", sources / "build.sh", out], cwd=repo, timeout=300)
            if not done.ok:
                raise ToolError(
                    f"native/consumers/jni/build.sh exited {done.returncode}: {done.stderr.strip()[-1500:]}"
                )
            _JNI_BUILT.add((repo, out, stamp))
    return out / "jni-consumer"


def run_consumer(
    name: str,
    program: list[str],
    library: Path,
    bundle: Path,
    prompts: Path,
    max_tokens: int,
    out: Path,
    env: dict[str, str] | None = None,
) -> ConsumerRun:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    work = out.parent / f"{name}-work"
    argv = [
        *program,
        "--library",
        str(library),
        "--bundle",
        str(bundle),
        "--prompts",
        str(prompts),
        "--max-tokens",
        str(max_tokens),
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    done = proc.run(argv, extra_env=env, timeout=TIMEOUT_S)
    result = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    log = f"$ {' '.join(argv)}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    return ConsumerRun(name=name, argv=tuple(argv), exit_status=done.returncode, result=result, log=log)
