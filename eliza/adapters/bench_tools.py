"""Adapter: runs the bench tools of a built cell and parses what they write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.adapters.targets import Target
from eliza.core.bench_records import BenchFormatError, BenchRun
from eliza.core.layout import REPO_ROOT
from eliza.formats.bench_jsonl import load_run

DEFAULT_PROMPTS = REPO_ROOT / "native" / "tools" / "prompts" / "default.txt"


class BenchToolError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    bundle: Path
    prompts: Path = DEFAULT_PROMPTS
    max_tokens: int = 64
    repeats: int = 2
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repeat_penalty: float = 1.0
    seed: int = 0

    def flags(self) -> list[str]:
        return [
            "--bundle", str(self.bundle), "--prompts", str(self.prompts),
            "--max-tokens", str(self.max_tokens), "--repeats", str(self.repeats),
            "--temperature", repr(self.temperature), "--top-k", str(self.top_k), "--top-p", repr(self.top_p),
            "--repeat-penalty", repr(self.repeat_penalty), "--seed", str(self.seed),
        ]  # fmt: skip


def bench_argv(build_dir: Path, library: Path, settings: BenchSettings, cell_id: str, out: Path) -> list[str]:
    return [str(build_dir / "e2e_loop_bench"), "--library", str(library.resolve()), "--cell", cell_id,
            "--out", str(out), *settings.flags()]  # fmt: skip


def drafter_argv(
    build_dir: Path,
    library: Path,
    settings: BenchSettings,
    cell_id: str,
    out: Path,
    drafter: Path,
    draft_max: int,
) -> list[str]:
    """The FFI bench with speculative decoding: drafter is the draft GGUF (mtp_drafter_path)."""
    return [*bench_argv(build_dir, library, settings, cell_id, out),
            "--drafter", str(drafter.resolve()), "--draft-max", str(draft_max)]  # fmt: skip


def reference_argv(
    build_dir: Path, settings: BenchSettings, cell_id: str, out: Path, logits: Path | None = None
) -> list[str]:
    """The plain llama.h runner; `logits`: where it also writes every step's logits."""
    extra = ["--logits-out", str(logits)] if logits is not None else []
    return [
        str(build_dir / "reference_runner"),
        "--cell",
        cell_id,
        "--out",
        str(out),
        *settings.flags(),
        *extra,
    ]


def run_tool(
    argv: list[str],
    out: Path,
    env: Mapping[str, str] | None = None,
    runner: Target | None = None,
) -> BenchRun:
    """Runs a bench tool (through the platform's target: natively, under its emulator or on
    a lab device, with a time limit) and loads what it wrote."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    argv = [tmp.as_posix() if a == str(out) else a for a in argv]
    tool = Path(argv[0]).name
    if runner is not None:
        result = runner.run(argv, env=env, outputs=(tmp,))
    else:
        result = proc.run(argv, extra_env=env)
    if not result.ok:
        tmp.unlink(missing_ok=True)
        where = f" on {runner.words}" if runner is not None and runner.words.startswith("device") else ""
        raise BenchToolError(f"{tool} exited {result.returncode}{where}: {result.stderr.strip()[-2000:]}")
    tmp.replace(out)
    try:
        return load_run(out)
    except BenchFormatError as exc:
        raise BenchToolError(str(exc)) from exc
