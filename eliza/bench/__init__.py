"""`python -m eliza.bench A B`: the command-line entry of the bench diff (eliza.cli.bench_diff)."""
