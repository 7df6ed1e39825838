"""What the pre-M3 comparison compares of two headers (eliza.core.c_abi.abi_declarations):
comments and compile-time assertions change nothing; a prototype, a field, a constant or
an include does."""

from __future__ import annotations

import subprocess

import pytest

from eliza.core.c_abi import abi_declarations, header_constants
from eliza.core.layout import REPO_ROOT, public_header
from eliza.formats.matrix_yaml import load_matrix

BASE = """/* the C ABI */
#ifndef H
#define H
#include <stdint.h>
#define ELIZA_OK 0
#define ELIZA_ERR_CANCELLED (-7)
typedef struct {
    int32_t max_tokens;   /* tokens */
    float temperature;
} cfg_t;
ELIZA_API int eliza_inference_next(void * s,
                                   int32_t * out);
#endif
"""


def test_comments_layout_and_assertions_declare_nothing_new() -> None:
    reworded = BASE.replace("/* tokens */", "/* tokens per generation, counted anew */").replace(
        "ELIZA_API int eliza_inference_next(void * s,\n",
        "ELIZA_API int eliza_inference_next(void * s,   \n\n",
    )
    asserted = BASE.replace(
        "#endif\n",
        "#if defined(__cplusplus)\n# define ELIZA_LAYOUT_ASSERT(c, m) static_assert(c, m)\n#endif\n"
        'ELIZA_LAYOUT_ASSERT(sizeof(cfg_t) == 8, "8 bytes");\n#undef ELIZA_LAYOUT_ASSERT\n#endif\n',
    )
    assert abi_declarations(reworded) == abi_declarations(BASE) == abi_declarations(asserted)


def test_a_field_a_prototype_or_an_include_differs() -> None:
    for changed in (
        BASE.replace("float temperature;", "float temperature; float top_p;"),
        BASE.replace("int32_t * out", "int64_t * out"),
        BASE.replace("#include <stdint.h>", "#include <stddef.h>"),
    ):
        assert abi_declarations(changed) != abi_declarations(BASE)


def test_a_renumbered_status_differs_in_the_constants() -> None:
    renumbered = BASE.replace("(-7)", "(-8)")
    assert (
        header_constants(renumbered)["ELIZA_ERR_CANCELLED"]
        == -8
        != header_constants(BASE)["ELIZA_ERR_CANCELLED"]
    )
    assert abi_declarations(renumbered) != abi_declarations(BASE)


def test_the_header_declares_what_the_pre_m3_header_declared() -> None:
    # The declared baseline's header, as git holds it: the M3 seam is below the ABI surface.
    baseline = load_matrix(REPO_ROOT / "matrix.yaml").baseline
    assert baseline is not None
    old = subprocess.run(
        ["git", "show", f"{baseline.ref}:native/include/eliza-inference-ffi.h"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if old.returncode != 0:
        pytest.skip(f"this clone lacks the baseline {baseline.ref[:12]} (shallow?): git fetch --unshallow")
    current = public_header(REPO_ROOT).read_text(encoding="utf-8")
    assert abi_declarations(old.stdout) == abi_declarations(current)
