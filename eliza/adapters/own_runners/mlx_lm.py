"""MLX's own runner: mlx_lm's model of the converted directory (text/mlx/, the weights the
body loads) and its generate_step, on the same prompt ids (the body's bench run's, passed in),
token budget and greedy sampling. Each prompt, as the body runs it: every id evaluated into a
fresh prompt cache with the last one's logits (the prefill), the first token chosen from them,
then generate_step from it until the budget, timed as the bench tools time the body
(eliza-bench/1 records).

    python -m eliza.adapters.own_runners.mlx_lm --model DIR --prompt-ids IDS.json \\
        --max-tokens N --repeats R --out OUT.jsonl --cell LABEL
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import cast

from eliza.adapters.own_runners.common import Timing, write_header, write_prompt

TOOL = "mlx_lm own runner (generate_step)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlx own runner")
    parser.add_argument("--model", type=Path, required=True, help="the converted MLX directory")
    parser.add_argument("--prompt-ids", type=Path, required=True, help="a JSON list of each prompt's ids")
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each prompt (the bench's best-of)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cell", default="own runner")
    args = parser.parse_args(argv)
    try:
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.models.cache import make_prompt_cache
        from mlx_lm.utils import load_model
    except ImportError as exc:
        print(f"mlx own runner: mlx_lm is not installed ({exc}); run ci/setup.sh", file=sys.stderr)
        return 2
    model, _ = load_model(args.model)
    prompts = json.loads(args.prompt_ids.read_text(encoding="utf-8"))

    def greedy(logprobs: mx.array) -> mx.array:
        return mx.argmax(logprobs, axis=-1)

    with args.out.open("w", encoding="utf-8") as out:
        write_header(out, TOOL, args.cell, "mlx-coreml", args.max_tokens, args.threads, args.repeats)
        for index, ids in enumerate(prompts):
            timings: list[Timing] = []
            first: list[int] = []
            for _ in range(args.repeats):
                cache = make_prompt_cache(model)
                t = Timing()
                # as the body's prefill: every prompt id into the cache, the last one's logits
                logits = model(mx.array(ids)[None], cache=cache)[:, -1, :]
                mx.eval(logits)
                t.prefilled()
                tokens = [cast(int, greedy(logits).item())]
                t.token(1)
                steps = generate_step(
                    mx.array(tokens),
                    model,
                    max_tokens=args.max_tokens - 1,
                    sampler=greedy,
                    prompt_cache=cache,
                )
                for token, _ in steps:
                    tokens.append(int(token))
                    t.token(len(tokens))
                timings.append(t)
                first = first or tokens
            write_prompt(out, index, "", ids, first, b"", timings)
    # The records are written and closed; MLX's threads and allocator are not torn down. One
    # fresh-clone verify saw this process abort ("malloc_consolidate(): unaligned fastbin
    # chunk detected"), where is not known yet: exit-time frees are the likeliest place.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
