"""LiteRT-LM's own runner: the engine's Python session API (the pinned litert-lm-api wheel,
the engine the body loads) on the same .litertlm, threads, prompts and token budget as the
body's bench run, greedy, f32 activations as the body sets them. Each prompt is a session of
its own: the prompt's text prefilled, then the engine's streaming decode until the budget,
timed as the bench tools time the body (eliza-bench/1 records).

    python -m eliza.adapters.own_runners.litert_lm --model M.litertlm --prompts FILE \\
        --max-tokens N --threads T --repeats R --context C --out OUT.jsonl --cell LABEL
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eliza.adapters.own_runners.common import Timing, read_prompts, write_header, write_prompt

TOOL = "litert-lm own runner (session API)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="litert-lm own runner")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--prompts", type=Path, required=True)
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each prompt (the bench's best-of)")
    parser.add_argument("--context", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cell", default="own runner")
    args = parser.parse_args(argv)
    try:
        import litert_lm  # type: ignore[import-untyped]
    except ImportError as exc:
        print(
            f"litert-lm own runner: the litert_lm package is not installed ({exc}); run ci/setup.sh",
            file=sys.stderr,
        )
        return 2
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    engine = litert_lm.Engine(
        str(args.model),
        backend=litert_lm.Backend.CPU(thread_count=args.threads),
        max_num_tokens=args.context,
        activation_data_type=litert_lm.ActivationDataType.FLOAT32,
    )
    greedy = litert_lm.SamplerConfig(top_k=1, top_p=1.0, temperature=1.0)
    with args.out.open("w", encoding="utf-8") as out:
        write_header(out, TOOL, args.cell, "litert-lm", args.max_tokens, args.threads, args.repeats)
        for index, prompt in enumerate(read_prompts(args.prompts)):
            timings: list[Timing] = []
            first: list[str] = []
            for _ in range(args.repeats):
                session = engine.create_session(
                    apply_prompt_template=False, sampler_config=greedy, max_output_tokens=args.max_tokens
                )
                t = Timing()
                session.run_prefill([prompt])
                t.prefilled()
                chunks: list[str] = []
                for response in session.run_decode_async():
                    chunks.extend(response.texts)
                    t.token(len(chunks))
                    if len(chunks) >= args.max_tokens:
                        break
                session.close()
                timings.append(t)
                first = first or chunks
            ids = [engine.bos_token_id or 0, *engine.tokenize(prompt)]
            write_prompt(out, index, prompt, ids, list(range(len(first))), "".join(first).encode(), timings)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
