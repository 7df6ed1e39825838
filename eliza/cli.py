"""`eliza`: the command line for what is not a nox session.

eliza check-matrix [PATH]      validate a matrix file (default: ELIZA_MATRIX, else the
                               repository's matrix.yaml); print its cells (exit 2 on errors)
eliza ci-files [--check]       regenerate the CI workflow from matrix.yaml (or fail on drift)
eliza bench-diff A B           byte-identity diff of two bench record files
eliza mlx-weights GGUF [--out DIR] [--dense]
                               convert a llama or gemma3 GGUF to an MLX-LM weights directory
                               (default DIR: the GGUF's folder/mlx), its quantized tensors as
                               MLX affine groups (--dense: all float32, for debugging); exit 2
                               on a file it cannot convert
eliza litertlm GGUF [--out FILE] [--prefill N ...] [--context N]
                               write a llama or gemma3 GGUF as a .litertlm file (default FILE:
                               <stem>.litertlm beside the GGUF, its record beside that as
                               FILE.json); exit 2 on a file it cannot write
eliza verify-provenance FILE --public-key B64 [--artifact PATH ...]
                               verify a release archive's signed SLSA provenance (FILE: the
                               archive's .intoto.jsonl) with the base64 ed25519 public key
                               `nox -s keys` prints; each --artifact's sha256 must be that of
                               the subject of its file name; exit 1 when it does not verify or
                               an artifact differs, 2 on a file it cannot read or a bad key
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _check_matrix(path: Path) -> int:
    from eliza.formats.matrix_yaml import MatrixError, load_matrix

    try:
        matrix = load_matrix(path)
    except MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2
    for warning in matrix.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{path}: {len(matrix.platforms)} platforms, {len(matrix.gates)} gates, {len(matrix.cells)} cells")
    for cell in matrix.cells:
        print(f"  {cell.id}: {', '.join(c.id for c in cell.checks)}")
    return 0


def _mlx_weights(gguf: Path, out: Path | None, dense: bool) -> int:
    import time

    from eliza.app.errors import UsageError
    from eliza.formats.mlx_weights import MlxWeightsError, convert, default_out_dir

    started = time.monotonic()
    try:
        record = convert(gguf, out or default_out_dir(gguf), dense=dense)
    except MlxWeightsError as exc:
        raise UsageError(str(exc)) from exc
    seconds = time.monotonic() - started
    size = sum(f.stat().st_size for f in record.out_dir.iterdir() if f.is_file())
    if record.dense:
        kind = "float32, --dense"
    elif not record.quantization:
        kind = "float32, as the GGUF stores them"
    else:
        exact = sum(q.exact for q in record.quantization.values())
        kind = f"{len(record.quantization)} modules as affine groups, {exact} exactly the GGUF's"
    print(
        f"{record.out_dir}: {record.tensor_count} tensors ({kind}), {size / 1e6:.0f} MB, "
        f"from {gguf.name} in {seconds:.1f} s"
    )
    return 0


def _litertlm(gguf: Path, out: Path | None, prefill: list[int] | None, context: int | None) -> int:
    import time

    from eliza.app.errors import UsageError
    from eliza.formats.litertlm import LitertlmError, default_out_path, write_litertlm

    started = time.monotonic()
    try:
        record = write_litertlm(
            gguf,
            out or default_out_path(gguf),
            prefill_lengths=prefill,
            context=context,
        )
    except LitertlmError as exc:
        raise UsageError(str(exc)) from exc
    seconds = time.monotonic() - started
    print(
        f"{record.out}: {record.size / 1e6:.1f} MB ({record.size} bytes) from {gguf.name} in {seconds:.1f} s "
        f"(prefill {', '.join(map(str, record.prefill_lengths))}; context {record.context})"
    )
    return 0


def _verify_provenance(file: Path, public_key: str, artifacts: list[Path]) -> int:
    from eliza.app.errors import Failed, UsageError
    from eliza.core.trust import decode_public_key, key_id
    from eliza.formats.files import sha256_file
    from eliza.formats.provenance import PREDICATE_TYPE, ProvenanceError, subject_digest, verify_provenance

    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise UsageError(f"{file}: cannot be read: {exc.strerror or exc}") from None
    try:
        key = decode_public_key(public_key)
    except ValueError as exc:
        raise UsageError(
            f"--public-key {exc}: give the base64 of the raw 32-byte ed25519 public key (`nox -s keys`)"
        ) from None
    hashes: list[tuple[Path, str]] = []
    for path in artifacts:
        try:
            hashes.append((path, sha256_file(path)))
        except OSError as exc:
            raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        statement = verify_provenance(raw.decode("utf-8"), key)
    except UnicodeDecodeError:
        raise Failed(f"{file}: does not verify: it is not UTF-8 text") from None
    except ProvenanceError as exc:
        raise Failed(f"{file}: does not verify: {exc}") from None
    for path, actual in hashes:
        expected = subject_digest(statement, path.name)
        if expected is None:
            names = ", ".join(str(s["name"]) for s in statement["subject"])
            raise Failed(f"{path}: {file} attests no subject {path.name!r} (its subjects: {names})")
        if actual != expected:
            raise Failed(f"{path}: its sha256 is {actual}, not the {expected} that {file} attests")
    for subject in statement["subject"]:
        print(f"{subject['name']} sha256:{subject['digest']['sha256']}")
    dependencies = len(statement["predicate"]["buildDefinition"]["resolvedDependencies"])
    print(
        f"verified: signed by key {key_id(key)}, predicate {PREDICATE_TYPE}, "
        f"{dependencies} resolved dependenc{'y' if dependencies == 1 else 'ies'}"
    )
    for path, _ in hashes:
        print(f"{path}: matches its subject {path.name}")
    return 0


def bench_diff(argv: list[str] | None = None) -> int:
    """Byte-identity diff of two bench record files: 0 identical, 1 not, 2 unreadable input."""
    from eliza.core.bench_diff import compare_identity, ratio_report, run_decode_tok_s, same_prompts
    from eliza.core.bench_records import BenchFormatError
    from eliza.formats.bench_jsonl import load_run

    parser = argparse.ArgumentParser(prog="python -m eliza.bench", description=bench_diff.__doc__)
    parser.add_argument("left", type=Path, help="a bench record file (JSON lines)")
    parser.add_argument("right", type=Path, help="another, of the same prompts and settings")
    args = parser.parse_args(argv)
    try:
        left, right = load_run(args.left), load_run(args.right)
    except BenchFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Sides are named by their files: two runs of one cell carry the same header label.
    result = compare_identity(left, right, left_label=str(args.left), right_label=str(args.right))
    print(result.report())
    pairs = [(run_decode_tok_s(left), run_decode_tok_s(right))]
    if not same_prompts(left, right):
        print("no decode speed ratio: the two runs decoded different prompts")
    elif pairs[0][1] > 0:
        print(ratio_report("decode tok/s", result.left, result.right, pairs).describe())
    return 0 if result.identical else 1


def main(argv: list[str] | None = None) -> int:
    from eliza import __version__
    from eliza.app.project import current

    parser = argparse.ArgumentParser(
        prog="eliza", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"eliza {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-matrix", help="validate a matrix file")
    check.add_argument(
        "path", type=Path, nargs="?", help=f"the matrix file (default: {current().matrix_path})"
    )
    ci = sub.add_parser("ci-files", help="regenerate the CI workflow from matrix.yaml")
    ci.add_argument("--check", action="store_true", help="fail when the checked-in files differ")
    diff = sub.add_parser("bench-diff", help="byte-identity diff of two bench runs")
    diff.add_argument("left")
    diff.add_argument("right")
    mlx = sub.add_parser("mlx-weights", help="convert a llama or gemma3 GGUF to an MLX-LM weights directory")
    mlx.add_argument("gguf", type=Path, metavar="GGUF", help="a llama or gemma3 GGUF model file")
    mlx.add_argument(
        "--out", type=Path, metavar="DIR", help="the directory to (re)write (default: the GGUF's folder/mlx)"
    )
    mlx.add_argument(
        "--dense",
        action="store_true",
        help="every tensor float32 (for debugging; default: the GGUF's blocks as MLX affine groups)",
    )
    litertlm = sub.add_parser("litertlm", help="write a llama or gemma3 GGUF as a LiteRT-LM .litertlm file")
    litertlm.add_argument("gguf", type=Path, metavar="GGUF", help="a llama or gemma3 GGUF model file")
    litertlm.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the file to (re)write (default: <stem>.litertlm beside the GGUF)",
    )
    litertlm.add_argument(
        "--prefill",
        type=int,
        nargs="+",
        metavar="N",
        help="the prefill signatures' token counts (default: those of 1 8 32 within the context)",
    )
    litertlm.add_argument(
        "--context",
        type=int,
        metavar="N",
        help="the KV cache's tokens (default: the GGUF's context, at most 4096 as the library runs it)",
    )
    provenance = sub.add_parser(
        "verify-provenance", help="verify a release archive's signed SLSA provenance (.intoto.jsonl)"
    )
    provenance.add_argument("file", type=Path, metavar="FILE", help="the archive's .intoto.jsonl")
    provenance.add_argument(
        "--public-key",
        required=True,
        metavar="B64",
        help="the signer's ed25519 public key: base64 of its 32 raw bytes (what `nox -s keys` prints)",
    )
    provenance.add_argument(
        "--artifact",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="PATH",
        help="a file whose sha256 must be that of the subject named by its file name",
    )
    args = parser.parse_args(argv)

    from eliza.app.errors import ElizaError

    try:
        if args.command == "check-matrix":
            return _check_matrix(args.path or current().matrix_path)
        if args.command == "ci-files":
            from eliza.app.services.ci_files import write_or_check

            return write_or_check(check=args.check)
        if args.command == "mlx-weights":
            return _mlx_weights(args.gguf, args.out, args.dense)
        if args.command == "litertlm":
            return _litertlm(args.gguf, args.out, args.prefill, args.context)
        if args.command == "verify-provenance":
            return _verify_provenance(args.file, args.public_key, args.artifact)
        return bench_diff([args.left, args.right])
    except ElizaError as exc:  # the one root: its class says the exit status
        sys.stderr.write(f"eliza: error: {exc}\n")
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
