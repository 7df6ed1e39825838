"""`python -m eliza.bench LEFT.jsonl RIGHT.jsonl`: byte-identity diff of two bench runs.

Exit status 0 when identical, 1 when not, 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eliza.bench.diff import compare_identity, ratio_report, run_decode_tok_s
from eliza.bench.records import BenchFormatError, load_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eliza.bench", description=__doc__)
    parser.add_argument("left", type=Path)
    parser.add_argument("right", type=Path)
    args = parser.parse_args(argv)
    try:
        left, right = load_run(args.left), load_run(args.right)
    except BenchFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = compare_identity(left, right)
    print(result.report())
    pairs = [(run_decode_tok_s(left), run_decode_tok_s(right))]
    if pairs[0][1] > 0:
        print(ratio_report("decode tok/s", result.left, result.right, pairs).describe())
    return 0 if result.identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
