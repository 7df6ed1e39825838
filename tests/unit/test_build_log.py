"""A failed build's reason: the first errors of its log, not its last lines.

The logs below are the tools' own output (gcc 12, GNU ld, CMake 3.25, Ninja, Conan 2),
trimmed to the lines that matter and with paths shortened.
"""

from __future__ import annotations

from eliza.core.build_log import DEFAULT_BUDGET, TAIL_LINES, failure_excerpt

# Ninja -j2: the file with the #error fails first; the other compilation still running
# prints its warnings after it, then Ninja stops and Conan reports its build() failed.
PARALLEL_NINJA = """\
[61/70] Building CXX object CMakeFiles/elizainference.dir/src/backends/mlx/weights.cpp.o
FAILED: CMakeFiles/elizainference.dir/src/backends/mlx/common.cpp.o
/usr/bin/c++ -DELIZA_WITH_MLX -O3 -DNDEBUG -std=gnu++17 -fPIC -c src/backends/mlx/common.cpp
src/backends/mlx/common.cpp:1:2: error: #error planted: the module of this gate does not compile
    1 | #error planted: the module of this gate does not compile
      |  ^~~~~
[62/70] Building CXX object CMakeFiles/elizainference.dir/src/sha256.cpp.o
In file included from src/sha256.cpp:3:
src/sha256.h:52:10: note: in expansion of macro 'ROTR'
   52 |     x = ROTR(x, 7);
      |          ^~~~
src/sha256.h:52:10: warning: conversion from 'long' to 'uint32_t' may change value [-Wconversion]
   52 |     x = ROTR(x, 7);
      |          ^~~~
ninja: build stopped: subcommand failed.

elizainference/0.1.0: ERROR: Package build failed
ERROR: elizainference/0.1.0: Error in build() method, line 88
\tcmake.build()
\tConanException: Error 1 while executing
"""

LINKER = """\
[70/70] Linking CXX shared library libelizainference.so
FAILED: libelizainference.so
/usr/bin/ld: CMakeFiles/elizainference.dir/src/c_abi.cpp.o: in function `eliza_open':
c_abi.cpp:(.text+0x5): undefined reference to `eliza::open_backend()'
collect2: error: ld returned 1 exit status
ninja: build stopped: subcommand failed.
"""

CMAKE = """\
-- The CXX compiler identification is GNU 12.2.0
CMake Error at CMakeLists.txt:3 (find_package):
  By not providing "FindNope.cmake" in CMAKE_MODULE_PATH this project has
  asked CMake to find a package configuration file provided by "Nope", but
  CMake did not find one.

  Add the installation prefix of "Nope" to CMAKE_PREFIX_PATH.


-- Configuring incomplete, errors occurred!
"""


def test_the_compilers_error_comes_first_though_warnings_end_the_log() -> None:
    excerpt = failure_excerpt(PARALLEL_NINJA.splitlines())
    first, source_line, caret = excerpt.splitlines()[:3]
    assert first.endswith("error: #error planted: the module of this gate does not compile")
    assert source_line.strip().startswith("1 | #error planted")
    assert caret.strip().startswith("| ")
    # another file's warnings are not a reason; Conan's own error follows if there is room
    assert "warning" not in excerpt and "ROTR" not in excerpt
    assert "Error in build() method" in excerpt
    # the log's last dozen lines, the end a report kept before, do not hold the error
    assert "#error planted" not in "\n".join(PARALLEL_NINJA.splitlines()[-12:])


def test_a_linkers_undefined_reference_is_the_reason() -> None:
    excerpt = failure_excerpt(LINKER.splitlines())
    assert excerpt.splitlines()[0] == "c_abi.cpp:(.text+0x5): undefined reference to `eliza::open_backend()'"
    assert "collect2: error: ld returned 1 exit status" not in excerpt.splitlines()[0]


def test_a_tools_own_error_without_a_source_position_is_found() -> None:
    log = [
        "[1/70] Building CXX object CMakeFiles/elizainference.dir/src/c_abi.cpp.o",
        "FAILED: CMakeFiles/elizainference.dir/src/c_abi.cpp.o",
        "/usr/bin/c++ -mno-such-flag -c src/c_abi.cpp",
        "c++: error: unrecognized command-line option '-mno-such-flag'",
        "ninja: build stopped: subcommand failed.",
    ]
    assert failure_excerpt(log) == "c++: error: unrecognized command-line option '-mno-such-flag'"


def test_a_cmake_error_keeps_its_indented_paragraphs() -> None:
    excerpt = failure_excerpt(CMAKE.splitlines(), budget=1000)
    lines = excerpt.splitlines()
    assert lines[0] == "CMake Error at CMakeLists.txt:3 (find_package):"
    assert lines[-1].strip() == 'Add the installation prefix of "Nope" to CMAKE_PREFIX_PATH.'
    assert "Configuring incomplete" not in excerpt and "compiler identification" not in excerpt


def test_the_excerpt_stays_within_its_budget_and_keeps_whole_blocks() -> None:
    errors = [f"src/f{i}.cpp:{i}:1: error: '{'x' * 60}{i}' was not declared in this scope" for i in range(20)]
    excerpt = failure_excerpt(errors)
    assert len(excerpt) <= DEFAULT_BUDGET
    kept = excerpt.splitlines()
    assert kept == errors[: len(kept)] and 1 < len(kept) < len(errors)
    # one block longer than the budget alone is cut rather than dropped
    assert failure_excerpt([errors[0]], budget=30) == errors[0][:30]


def test_the_same_error_twice_is_said_once() -> None:
    twice = [
        "src/seam.h:9:5: error: 'x' does not name a type",
        "src/seam.h:9:5: error: 'x' does not name a type",
        "src/other.cpp:2:1: error: expected ';'",
    ]
    assert failure_excerpt(twice).splitlines() == [twice[0], twice[2]]


def test_without_an_error_line_the_log_tail_is_the_reason() -> None:
    killed = [f"[{i}/900] Building C object ggml/src/ggml-cpu/op{i}.c.o" for i in range(1, 100)]
    killed.append("c++: fatal signal: Killed")
    excerpt = failure_excerpt(killed)
    assert excerpt.splitlines() == killed[-TAIL_LINES:]
