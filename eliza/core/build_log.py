"""The lines of a failed build's log that say why it failed.

A build's log ends with whatever finished last: under a parallel Ninja the compiler's
warnings about another file, Ninja's "build stopped", Conan's traceback of its `build()`
method. The error that stopped the build can sit hundreds of lines before the end, so the
last lines of a log are a poor reason. `failure_excerpt` finds the first errors instead:
a compiler's or linker's, CMake's, or Conan's own, each with the indented lines that follow
it (the source line and caret a compiler prints, the rest of a CMake message).

Pure: the caller reads the log.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# What starts an error, in the formats of the tools a build runs:
#   gcc/clang   "path/file.cpp:12:3: error: ..." and "...: fatal error: ..."
#   MSVC        "file.cpp(12): error C2065: ..." and "LINK : fatal error LNK1181: ..."
#   GNU ld      "file.cpp:(.text+0x5): undefined reference to `h()'"
#   a tool      "c++: error: unrecognized command-line option ...", "ninja: error: ...",
#               "cc1plus: fatal error: x.h: No such file or directory"
#   CMake       "CMake Error at CMakeLists.txt:3 (find_package):"
#   Conan       "ERROR: Package 'x/1.0' not resolved: ..."
_ERROR = re.compile(
    r":\d+(?::\d+)?: (?:fatal )?error: "
    r"|\): (?:fatal )?error [A-Z]+\d+: "
    r"|: (?:fatal )?error LNK\d+: "
    r"|undefined reference to "
    r"|^[\w.+-]+: (?:fatal )?error: "
    r"|^CMake Error\b"
    r"|^ERROR: "
)
DEFAULT_BUDGET = 450  # characters: the excerpt survives the cuts a report's reason makes
TAIL_LINES = 40  # when no line looks like an error


def failure_excerpt(lines: Sequence[str], budget: int = DEFAULT_BUDGET) -> str:
    """The first error blocks of a build log, in log order, within `budget` characters
    (the first block is cut to fit if it alone is longer); the log's last `TAIL_LINES` lines
    when no line looks like an error."""
    stripped = [line.rstrip("\n") for line in lines]
    blocks = _error_blocks(stripped)
    if not blocks:
        return "\n".join(stripped[-TAIL_LINES:])
    kept: list[str] = []
    used = 0
    for block in blocks:
        cost = len(block) + (1 if kept else 0)
        if kept and used + cost > budget:
            break
        kept.append(block if kept else block[:budget])
        used += cost
    return "\n".join(kept)


def _error_blocks(lines: list[str]) -> list[str]:
    """Each error line joined with the indented (or blank-then-indented) lines after it;
    a block seen before (the same error from two compilations of one header) once."""
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        if not _ERROR.search(lines[i]):
            i += 1
            continue
        block = [lines[i]]
        i += 1
        while i < len(lines) and _continues(lines, i):
            if lines[i].strip():
                block.append(lines[i])
            i += 1
        text = "\n".join(block)
        if text not in blocks:
            blocks.append(text)
    return blocks


def _continues(lines: list[str], i: int) -> bool:
    """Whether line i still belongs to the error above it: indented, or blank with an
    indented line next (CMake separates a message's paragraphs with blank lines)."""
    line = lines[i]
    if line.startswith((" ", "\t")):
        return True
    return not line.strip() and i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t"))
