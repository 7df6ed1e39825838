"""`python -m eliza.bench LEFT.jsonl RIGHT.jsonl`: byte-identity diff of two bench runs.

Exit status 0 when identical, 1 when not, 2 on unreadable input (same as `eliza bench-diff`).
"""

from __future__ import annotations

from eliza.cli import bench_diff

if __name__ == "__main__":
    raise SystemExit(bench_diff())
