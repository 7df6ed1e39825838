"""The bench tools' prompt format, as native/tools/bench_common.cpp reads it."""

from __future__ import annotations

from pathlib import Path


def read_prompts(path: Path) -> list[str]:
    prompts = []
    for raw in path.read_text(encoding="utf-8").split("\n"):
        line = raw.removesuffix("\r")
        if not line or line.startswith("#"):
            continue
        prompt, i = [], 0
        while i < len(line):
            if line[i] == "\\" and i + 1 < len(line):
                c = line[i + 1]
                prompt.append({"n": "\n", "t": "\t"}.get(c, c))
                i += 2
            else:
                prompt.append(line[i])
                i += 1
        prompts.append("".join(prompt))
    return prompts
