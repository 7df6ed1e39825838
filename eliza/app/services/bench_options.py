"""The options of `nox -s bench-<platform> -- ...` and what of them decides the output."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from eliza.adapters.bench_tools import BenchSettings
from eliza.adapters.targets import Target
from eliza.app.errors import UsageError
from eliza.app.options import Parser, positive
from eliza.core.layout import default_prompts
from eliza.core.matrix import Bundle, Matrix
from eliza.formats.files import sha256_file

# The fewest interleaved FFI/reference pairs a seam-overhead figure is taken from.
MIN_OVERHEAD_PAIRS = 5


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    settings: BenchSettings
    out_dir: Path
    baseline: str | None = None
    no_baseline_reason: str = "no baseline: matrix.yaml declares none and no --baseline REF was given"
    overhead_pairs: int = 9
    overhead_max_tokens: int = 256
    overhead_repeats: int = 3
    overhead_threads: int = 1
    drafter_pairs: int = 5  # interleaved with/without-drafter rounds of the speedup
    draft_max: int = 4
    # verify measures the drafter speedup on the no-gate cell (gated cells run the same
    # llama.cpp code); a bench session measures it on every cell.
    speedup_on_every_cell: bool = False
    # perf: rounds (None: the check's declared rounds), the reference library of
    # --perf-reference DIR (None: the commit's build), and the bench settings of a round
    perf_rounds: int | None = None
    perf_reference_dir: Path | None = None
    # Sized for the wall-time rounds' part since the simulated CPU judges the work: a round
    # still decodes hundreds of tokens per side, enough for a sleep or a lock to show.
    perf_max_tokens: int = 64
    perf_repeats: int = 3
    verbose: bool = False
    dry_run: bool = False  # print the plan, do nothing
    json: bool = False  # the plan as JSON
    # How the platform's binaries run (natively, under its emulator, on a device): set per platform.
    runner: Target | None = None
    # The cores a timed round may give its sides at once, one process per core (0: they take
    # turns): set per platform where its work runs on this host's CPU (never on an
    # accelerator, an emulator or a lab device, whose sides would share what they measure).
    side_by_side_cores: int = 0
    devices: Path | None = None  # --devices: a lab file (eliza.app.services.lab)


def parse_bench_args(
    argv: Sequence[str], *, default_bundle: Path, repo: Path, default_baseline: str | None = None
) -> BenchOptions:
    """The options, every one checked before anything is built or run: UsageError names the
    option and the value that is wrong. default_baseline is the matrix's declared baseline."""
    parser = Parser("nox -s bench-<platform> --", "bench options", skippable=True)
    parser.add_argument(
        "--baseline",
        metavar="REF",
        default=default_baseline,
        help="diff against a build of this git ref instead of the matrix's baseline",
    )
    parser.add_argument(
        "--bundle", type=Path, default=default_bundle, help="bundle dir (default: the tiny bundle)"
    )
    parser.add_argument("--prompts", type=Path, default=default_prompts(repo), help="prompt file")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="repeats per prompt in the identity runs")
    parser.add_argument(
        "--overhead-pairs",
        type=int,
        default=9,
        help=f"interleaved FFI/reference pairs (>= {MIN_OVERHEAD_PAIRS})",
    )
    parser.add_argument(
        "--overhead-threads",
        type=int,
        default=1,
        help="decode threads for the overhead runs (default 1: the seam's cost is per call, and one "
        "thread keeps threadpool scheduling noise of small machines out of the ratio)",
    )
    parser.add_argument(
        "--drafter-pairs",
        type=int,
        default=5,
        help="interleaved rounds with and without a drafter on every cell (>= 3)",
    )
    parser.add_argument("--draft-max", type=int, default=4, help="draft length of the drafter runs")
    parser.add_argument("--out", type=Path, default=repo / "build" / "bench")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan (builds and checks) and do nothing"
    )
    parser.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    parser.add_argument(
        "--devices",
        metavar="PATH",
        type=Path,
        default=None,
        help="a lab file: the platform's bench runs on its device (default: $ELIZA_DEVICES, else none)",
    )
    args = parser.parse_args(list(argv))
    if args.json and not args.dry_run:
        parser.error("--json goes with --dry-run (the plan as JSON)")
    if args.overhead_pairs < MIN_OVERHEAD_PAIRS:
        parser.error(f"--overhead-pairs {args.overhead_pairs}: must be at least {MIN_OVERHEAD_PAIRS}")
    positive("--max-tokens", args.max_tokens)
    positive("--repeats", args.repeats)
    positive("--overhead-threads", args.overhead_threads)
    positive("--draft-max", args.draft_max)
    if args.drafter_pairs < 3:
        parser.error(f"--drafter-pairs {args.drafter_pairs}: must be at least 3")
    check_prompts(args.prompts)
    if args.bundle != default_bundle:  # the default tiny bundle is written when needed
        check_bundle(args.bundle)
    settings = BenchSettings(
        bundle=args.bundle, prompts=args.prompts, max_tokens=args.max_tokens, repeats=args.repeats
    )
    return BenchOptions(
        devices=args.devices,
        settings=settings,
        baseline=args.baseline,
        overhead_pairs=args.overhead_pairs,
        out_dir=args.out,
        overhead_threads=args.overhead_threads,
        drafter_pairs=args.drafter_pairs,
        draft_max=args.draft_max,
        speedup_on_every_cell=True,
        verbose=args.verbose,
        dry_run=args.dry_run,
        json=args.json,
    )


def verify_bench_options(*, default_bundle: Path, repo: Path, baseline: str | None) -> BenchOptions:
    """The bench options of a verify's checks: a bench session's defaults, but the drafter
    speedup's timed rounds on the no-gate cell only (a gated cell runs one round, identity
    and stats: its llama.cpp path is the same code, which byte-identity-gates shows), and
    the seam overhead in the fewest pairs a session accepts, as on a real model (its figure
    is reported, not judged; a tiny-model pair is two runs of 6,144 tokens, about 6 s that
    must run alone, and a bench session's 9 buy a narrower interval for someone studying
    it)."""
    opts = parse_bench_args(
        ["--baseline", baseline] if baseline else [], default_bundle=default_bundle, repo=repo
    )
    return replace(opts, speedup_on_every_cell=False, overhead_pairs=MIN_OVERHEAD_PAIRS)


def check_prompts(path: Path) -> None:
    """A prompt file the bench tools can read: one prompt per non-empty line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--prompts {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--prompts {path}: cannot be read as UTF-8 text ({exc})") from None
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        raise UsageError(f"--prompts {path}: has no prompt (one prompt per line; # starts a comment)")


def check_bundle(path: Path) -> None:
    """A bundle directory with the text model the llama.cpp path loads (text/*.gguf)."""
    if not path.is_dir():
        raise UsageError(f"--bundle {path}: no such directory")
    if not any((path / "text").glob("*.gguf")):
        raise UsageError(f"--bundle {path}: no text/*.gguf in it (a bundle is <dir>/text/<model>.gguf)")


def settings_description(
    settings: BenchSettings,
    env: Mapping[str, str],
    *,
    draft_max: int = BenchOptions.draft_max,
    drafter_pairs: int = BenchOptions.drafter_pairs,
) -> str:
    """What of the settings decides the output: everything but the bundle and prompt paths
    (their contents are fingerprinted on their own), the drafter's proposal length and
    rounds (the drafter checks' stats and speedup), plus the context-size override."""
    chosen: dict[str, object] = {k: v for k, v in asdict(settings).items() if k not in ("bundle", "prompts")}
    chosen["draft_max"] = draft_max
    chosen["drafter_pairs"] = drafter_pairs
    # The library's settings that change what a bench measures: the context size, and when
    # a stream drafts (the drafter stats and the speedup; never the tokens).
    # (The drafting settings are named only when set, so evidence made before they existed
    # keeps its fingerprint.)
    chosen["ELIZA_N_CTX"] = env.get("ELIZA_N_CTX", "")
    chosen |= {name: env[name] for name in ("ELIZA_DRAFT_P_MIN", "ELIZA_DRAFT_BACKOFF_MAX") if env.get(name)}
    return json.dumps(chosen, sort_keys=True)


def options_description(opts: BenchOptions, env: Mapping[str, str]) -> str:
    """settings_description of a bench session's options."""
    return settings_description(
        opts.settings, env, draft_max=opts.draft_max, drafter_pairs=opts.drafter_pairs
    )


def default_settings_description(env: Mapping[str, str]) -> str:
    """The description of a bench run with default settings (what verify and the report use)."""
    return settings_description(BenchSettings(bundle=Path("."), prompts=Path(".")), env)


def bundle_prompts(repo: Path, bundle: Bundle) -> Path:
    """The prompt file the checks read on a bundle: its own, or the default prompts."""
    return repo / bundle.bench.prompts if bundle.bench.prompts else default_prompts(repo)


def bundle_long_prompts(repo: Path, bundle: Bundle) -> Path | None:
    """The bundle's prompts past its model's sliding window (bench.long_prompts), if any."""
    return repo / bundle.bench.long_prompts if bundle.bench.long_prompts else None


def bundle_settings(bundle: Bundle, repo: Path | None = None) -> str:
    """How the checks size their work on a bundle, as a fingerprint reads it: with `repo`,
    the content of its long prompts too (the second file its agreement reads)."""
    settings: dict[str, object] = asdict(bundle.bench)
    long_prompts = bundle_long_prompts(repo, bundle) if repo is not None else None
    if long_prompts is not None:
        settings["long_prompts_sha256"] = sha256_file(long_prompts) if long_prompts.is_file() else "absent"
    return json.dumps(settings, sort_keys=True)


# A software GPU (lavapipe) runs the fixture at about 18 tok/s where the CPU build runs it
# at 2,000: the seam-overhead pairs there are as short as a real model's, still decisive
# (5 interleaved pairs), and the figure says what the seam costs per call, not the GPU's speed.
SOFTWARE_DEVICE_OVERHEAD_TOKENS = 16


def on_software_device(opts: BenchOptions) -> BenchOptions:
    """The bench options of a platform whose accelerator is a software device."""
    return replace(
        opts,
        overhead_max_tokens=min(opts.overhead_max_tokens, SOFTWARE_DEVICE_OVERHEAD_TOKENS),
        overhead_repeats=1,
        overhead_pairs=MIN_OVERHEAD_PAIRS,
    )


def on_bundle(opts: BenchOptions, bundle: Bundle, folder: Path, prompts: Path) -> BenchOptions:
    """The bench options of the checks that run on `bundle`: its folder and prompts, its
    own output folder, and its sizing where it declares one (a real model decodes far
    slower than the fixture)."""
    sizing = bundle.bench
    settings = replace(
        opts.settings,
        bundle=folder,
        prompts=prompts,
        max_tokens=sizing.max_tokens or opts.settings.max_tokens,
        repeats=sizing.repeats or opts.settings.repeats,
    )
    # The seam-overhead pairs are timed rounds too: sized like the bundle's perf rounds.
    return replace(
        opts,
        settings=settings,
        out_dir=opts.out_dir / bundle.id,
        perf_max_tokens=sizing.perf_max_tokens or opts.perf_max_tokens,
        perf_repeats=sizing.perf_repeats or opts.perf_repeats,
        overhead_max_tokens=sizing.perf_max_tokens or opts.overhead_max_tokens,
        overhead_repeats=sizing.perf_repeats or opts.overhead_repeats,
        overhead_pairs=max(MIN_OVERHEAD_PAIRS, sizing.perf_rounds)
        if sizing.perf_rounds
        else opts.overhead_pairs,
    )


def bundle_inputs(repo: Path, matrix: Matrix) -> dict[str, tuple[str, Path, str]]:
    """What a fingerprint reads of each bundle after the first: its pinned sha256, its
    prompt file and its sizing (eliza.app.services.inputs)."""
    return {
        b.id: (b.sha256, bundle_prompts(repo, b), bundle_settings(b, repo))
        for b in matrix.bundles
        if b.id != matrix.default_bundle.id
    }
