"""Build progress lines from Ninja's step counter."""

from __future__ import annotations

from eliza.core.progress import BuildProgress


def test_reports_each_tenth_with_time_left() -> None:
    progress = BuildProgress(label="linux-cpu.none", every_s=1e9, quiet_s=0)
    lines = [progress.feed(f"[{i}/200] Building CXX object x{i}.o", elapsed_s=i * 0.5) for i in range(1, 201)]
    shown = [line for line in lines if line]
    assert len(shown) == 11  # 0%, then every 10% through 100%
    assert shown[-1].startswith("linux-cpu.none: step 200/200 (100%)")
    halfway = next(line for line in shown if "(50%)" in line)
    # 100 steps took 49.5 s since step 1: the other 100 are estimated the same
    assert "50s elapsed" in halfway and "about 50s left" in halfway


def test_names_the_package_conan_is_building_and_ignores_other_lines() -> None:
    progress = BuildProgress(label="cell", every_s=1e9, quiet_s=0)
    assert progress.feed("llama-cpp/0.3.36: Calling build()", 0.0) is None
    assert progress.feed("-- The C compiler identification is GNU", 0.1) is None
    line = progress.feed("[1/10] Building C object ggml.c.o", 0.2)
    assert line is not None and line.startswith("cell (llama-cpp/0.3.36): step 1/10")


def test_reports_by_time_between_percent_steps() -> None:
    progress = BuildProgress(label="c", every_s=30, quiet_s=0)
    assert progress.feed("[1/1000] a", 0.0) is not None
    assert progress.feed("[2/1000] b", 10.0) is None
    assert progress.feed("[3/1000] c", 31.0) is not None


def test_a_build_of_a_few_seconds_prints_no_progress() -> None:
    progress = BuildProgress(label="linux-cpu.none")  # quiet for its first 5 s
    lines = [progress.feed(f"[{i}/21] Building CXX object x{i}.o", elapsed_s=i * 0.1) for i in range(1, 22)]
    assert [line for line in lines if line] == []


def test_a_long_build_reports_once_it_has_lasted_the_quiet_time() -> None:
    progress = BuildProgress(label="c", every_s=1e9)
    lines = [progress.feed(f"[{i}/100] step", elapsed_s=i * 0.25) for i in range(1, 101)]
    shown = [line for line in lines if line]
    assert shown and all("elapsed" in line for line in shown)
    # the first line comes at the first tenth passed after 5 s (step 20 at 5.0 s), not at step 1
    assert shown[0].startswith("c: step 20/100 (20%)")


def test_keeps_how_long_each_package_printed() -> None:
    progress = BuildProgress(label="c")
    progress.feed("llama-cpp/0.3.36: Calling build()", 1.0)
    progress.feed("[1/2] a", 2.0)
    progress.feed("llama-cpp/0.3.36: Package '0a1b' created", 95.5)
    progress.feed("conanfile.py (elizainference/9.0.0): Calling build()", 96.0)
    progress.feed("conanfile.py (elizainference/9.0.0): Package built", 104.0)
    assert progress.package_seconds("llama-cpp/") == 94.5
    assert progress.package_seconds("mlx/") == 0.0  # printed nothing: reused from the cache
