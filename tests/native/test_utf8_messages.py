"""Messages are cut to their fixed sizes (llama.cpp's error lines at 400 bytes, the catch
blocks' buffer at 1023) only on a UTF-8 character boundary: a consumer that decodes
strictly (Java, JavaScript) must never be handed a dangling lead byte."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from eliza.adapters.ffi import Library
from eliza.core.layout import REPO_ROOT

# llama.cpp's line for a GGUF it refuses; its path is what a long bundle path makes long.
LLAMA_LINE = "llama_model_load: error loading model: llama_model_loader: failed to load model from "
LINE_BYTES = 400  # CallScope::kMaxLineBytes and the ring's entry size (native/src/status.h, log_capture.cpp)


def raw_create_error(lib: Library, bundle: Path) -> bytes:
    """_create's message as the bytes the library wrote (the binding's take_error would
    replace a malformed byte instead of letting the test see it)."""
    err = ctypes.c_void_p()
    handle = lib.lib.eliza_inference_create(str(bundle).encode(), ctypes.byref(err))
    if handle:
        lib.lib.eliza_inference_destroy(handle)
    assert not handle, "a refused GGUF must fail _create"
    assert err.value, "a failed _create must set *out_error"
    raw = ctypes.string_at(err.value)
    lib.lib.eliza_inference_free_string(err)
    return raw


def corrupt_bundle(root: Path, pad: int) -> Path:
    # Two components of 180 bytes of three-byte characters: llama.cpp's line outgrows 400
    # bytes inside the path; the padding moves the cut across the three bytes of a character.
    bundle = root / f"pad{pad}" / ("€" * 60) / ("x" * pad + "東" * 60)
    (bundle / "text").mkdir(parents=True)
    (bundle / "text" / "model.gguf").write_bytes(b"NOTAGGUF" + bytes(56))
    return bundle


def test_a_long_multibyte_llama_cpp_line_is_cut_on_a_character_boundary(lib: Library, tmp_path: Path) -> None:
    cut_mid_character = 0
    for pad in range(3):
        bundle = corrupt_bundle(tmp_path, pad)
        model = bundle / "text" / "model.gguf"
        raw = raw_create_error(lib, bundle)
        message = raw.decode("utf-8")  # strict: raises on a dangling lead byte
        assert message.startswith("eliza_inference_create: cannot load text model "), message
        # The message names the model in full, and carries llama.cpp's line cut short.
        assert f"'{model}'" in message
        assert LLAMA_LINE in message
        tail = message.split(LLAMA_LINE, 1)[1]
        assert str(model) not in tail, "llama.cpp's line was expected to be cut inside the path"
        assert str(model).startswith(tail.split(" (")[0].split(";")[0]), tail
        # Without the boundary rule the cut would have been LINE_BYTES exactly.
        line = (LLAMA_LINE + str(model)).encode()
        try:
            line[:LINE_BYTES].decode("utf-8")
        except UnicodeDecodeError:
            cut_mid_character += 1
            kept = len((LLAMA_LINE + tail.split(" (")[0].split(";")[0]).encode())
            assert LINE_BYTES - 3 <= kept < LINE_BYTES, kept
    # The three paddings put a raw 400-byte cut inside a character at least twice.
    assert cut_mid_character >= 2


BOUNDARY_DRIVER = r"""
#include <cstdio>
#include <string>
#include "status.h"

// argv[1]: hex bytes; prints utf8_boundary(bytes, n) for every n from 0 to the length.
int main(int argc, char ** argv) {
    if (argc != 2) return 2;
    std::string bytes;
    for (const char * p = argv[1]; p[0] && p[1]; p += 2) {
        unsigned v = 0;
        std::sscanf(p, "%2x", &v);
        bytes.push_back(static_cast<char>(v));
    }
    for (size_t n = 0; n <= bytes.size(); ++n) std::printf("%zu ", eliza::utf8_boundary(bytes.data(), n));
    std::printf("\n");
    return 0;
}
"""


@pytest.fixture(scope="module")
def boundary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """native/src/status.h's utf8_boundary, which every fixed-size cut goes through (the
    1023-byte buffer of the catch blocks cannot be filled from outside the library)."""
    d = tmp_path_factory.mktemp("utf8")
    (d / "driver.cpp").write_text(BOUNDARY_DRIVER)
    exe = d / "driver"
    subprocess.run(
        ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", str(REPO_ROOT / "native" / "src"),
         "-I", str(REPO_ROOT / "native" / "include"), str(d / "driver.cpp"), "-o", str(exe)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return exe


def cuts(exe: Path, data: bytes) -> list[int]:
    out = subprocess.run([str(exe), data.hex()], check=True, capture_output=True, text=True, timeout=30)
    return [int(v) for v in out.stdout.split()]


@pytest.mark.parametrize(
    "text", ["plain ascii", "naïve café", "— 東京 —", "🙂🚀 and 🙂", "a€b東c🙂d", "€" * 341 + "ab"]
)
def test_every_cut_of_valid_utf8_is_its_longest_valid_prefix(boundary: Path, text: str) -> None:
    data = text.encode()
    for n, kept in enumerate(cuts(boundary, data)):
        assert kept <= n
        data[:kept].decode("utf-8")  # strict
        # The longest: n itself when it is a boundary, else the start of the character cut.
        valid = [k for k in range(n + 1) if _is_boundary(data, k)]
        assert kept == max(valid), (n, kept)


def _is_boundary(data: bytes, k: int) -> bool:
    return k == len(data) or (data[k] & 0xC0) != 0x80


def test_bytes_that_are_not_utf8_are_left_alone(boundary: Path) -> None:
    # Only an incomplete last character is dropped; a stray continuation byte or an
    # invalid lead byte is the sender's bytes and stays (the message is only shortened).
    assert cuts(boundary, b"ab\x80\x80\x80\x80")[-1] == 6
    assert cuts(boundary, b"ab\xff")[-1] == 3
    assert cuts(boundary, b"ab\xe2\x82")[-1] == 2
    assert cuts(boundary, b"\xf0\x9f\x99")[-1] == 0
