"""`nox -s keys`: this machine's evidence-signing key (created on first use) as others
need it: its public key, its key id, and the matrix.yaml entry that trusts it. The private
key is never printed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eliza.adapters.signing_keys import KEY_ENV, key_path
from eliza.app.context import Context
from eliza.app.options import Parser
from eliza.app.services.signing import signing_key
from eliza.core.matrix import Matrix


@dataclass(frozen=True, kw_only=True)
class KeysOptions:
    label: str


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> KeysOptions:
    parser = Parser("nox -s keys --", "this machine's evidence-signing public key and how to trust it")
    parser.add_argument(
        "--label", default="", help="the label the printed policy entry gets (default: a placeholder)"
    )
    args = parser.parse_args(list(argv))
    return KeysOptions(label=args.label)


def policy_entry(key_id: str, public_key: str, label: str) -> str:
    """The matrix.yaml `trust.keys` entry that trusts a key for every platform and check."""
    return (
        f"  - id: {key_id}\n"
        f"    label: {label}\n"
        f"    public_key: {public_key}\n"
        "    scope: {platforms: all, checks: all}  # or lists of ids: a lab's platforms, its device checks"
    )


def run(options: KeysOptions, ctx: Context) -> str:
    project, log = ctx.project, ctx.log
    key = signing_key(project)
    where = (
        f"from {KEY_ENV}"
        if project.env.get(KEY_ENV, "").strip()
        else f"private key: {key_path(project.cache)}"
    )
    trusted = ctx.matrix.trust.key(key.id)
    log(f"key id: {key.id}")
    log(f"public key (ed25519, base64 of the raw 32 bytes): {key.public_b64}")
    log(where)
    if trusted is not None:
        log(f"{ctx.matrix.source} trusts it as {trusted.label!r} for {trusted.scope_text()}")
    else:
        log(
            f"{ctx.matrix.source} does not trust it: a local report does (this machine's key), "
            "`nox -s report -- --release` and CI do not. To trust it, add under trust.keys:"
        )
    entry = policy_entry(key.id, key.public_b64, options.label or "'<whose key: CI, a lab, a developer>'")
    log("trust:\n  keys:\n" + entry)
    return key.id
