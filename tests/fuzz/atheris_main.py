"""One fuzz target under atheris (libFuzzer's engine in Python), in a process of its own:

    python -m tests.fuzz.atheris_main TARGET LIBRARY BUNDLE WORKDIR [libFuzzer flags] CORPUS...

`nox -s fuzz` starts it with the sanitizer runtime preloaded. A `Violation` or any other
exception is a finding (atheris writes the input as crash-*), as is a sanitizer report."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    import atheris

    target_name, library, bundle, work = sys.argv[1:5]
    # Coverage of the targets and the binding only: instrumenting every module they pull in
    # (numpy, gguf, yaml, ...) took most of a minute per target and guides nothing.
    with atheris.instrument_imports(include=["tests.fuzz", "eliza.adapters.ffi"]):
        from tests.fuzz import targets
    from eliza.adapters.ffi import Library

    harness = targets.Harness(Library(Path(library)), Path(bundle), Path(work))
    target = targets.TARGETS[target_name]

    def one_input(data: bytes) -> None:
        try:
            target(harness, data)
        except targets.Violation:
            raise
        except Exception as exc:  # an ElizaError a target did not expect is a finding too
            raise targets.Violation(f"{type(exc).__name__}: {exc}") from exc

    atheris.Setup([sys.argv[0], *sys.argv[5:]], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
