"""Faults planted in a copy's library source by the perf tests: each is an exact edit of
`native/src/ffi.cpp` that fails loudly when the source no longer holds what it replaces."""

from __future__ import annotations

from pathlib import Path

FFI = "native/src/ffi.cpp"
INCLUDES = "#include <cstddef>\n"
MORE_INCLUDES = "#include <cstddef>\nstatic char * volatile planted_rss = nullptr;\n"

# The decode step as the library has it.
NEXT = "        return report(fn, out_error, stream->llama->next(out, message), message);"

# About 10 % more work per decoded token on the tiny bundle (its decode step is about 4.0 M
# instructions): a counted loop on a volatile the compiler must keep, about 6 instructions
# an iteration, no memory traffic beyond the stack.
MORE_WORK_NEXT = """        for (volatile unsigned planted = 0; planted < 64000u; planted = planted + 1u) {
        }
        return report(fn, out_error, stream->llama->next(out, message), message);"""

# A 2 ms sleep per decoded token: no work the simulated CPU sees, only time.
SLEEP_INCLUDES = "#include <unistd.h>\n#include <cstddef>\n"
SLEEPY_NEXT = """        ::usleep(2000);
        return report(fn, out_error, stream->llama->next(out, message), message);"""

# 64 MB more resident memory at _create (malloc + memset, kept alive).
CREATED = "        result = ctx.release();"
BIGGER_CREATE = """        result = ctx.release();
        {
            constexpr std::size_t planted_bytes = std::size_t{64} << 20;
            char * planted = static_cast<char *>(std::malloc(planted_bytes));
            if (planted != nullptr) std::memset(planted, 1, planted_bytes);
            planted_rss = planted;
        }"""


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{rel} no longer contains {old!r} once: update this test"
    path.write_text(text.replace(old, new))


def plant_more_work_per_token(repo: Path) -> None:
    edit(repo, FFI, NEXT, MORE_WORK_NEXT)


def plant_sleep_per_token(repo: Path) -> None:
    edit(repo, FFI, INCLUDES, SLEEP_INCLUDES)
    edit(repo, FFI, NEXT, SLEEPY_NEXT)


def plant_memory_growth(repo: Path) -> None:
    edit(repo, FFI, INCLUDES, MORE_INCLUDES)
    edit(repo, FFI, CREATED, BIGGER_CREATE)
