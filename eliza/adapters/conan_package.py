"""A verified cell as a Conan package: `conan export-pkg` of the cell's build tree (the
recipe's package() copies the bytes the checks judged), the package's files as a
reproducible tar.gz, and its upload to the Conan remote.

The export takes the cell's own build command (eliza.core.build_plan) with `export-pkg` in
place of `build`, so its profile, options and conf are the verified build's, and Conan
computes the same package id a consumer asking for those settings gets.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.conan import BuildError, conan_argv, conan_env, conan_program
from eliza.adapters.conan_remote import _remote_added
from eliza.core.binary_remote import REMOTE_NAME, BinaryRemote
from eliza.core.build_plan import CellBuildPlan

PACKAGE = "elizainference"
# The SBOM package() writes into the package's metadata folder (conanfile.py _write_sbom).
SBOM_IN_METADATA = Path("sbom") / "elizainference.cdx.json"


class PackageError(BuildError):
    """A Conan step of the release failed; the message names the cell and the log."""


@dataclass(frozen=True, kw_only=True)
class ExportedPackage:
    ref: str  # elizainference/V#recipe revision
    package_id: str
    revision: str  # the package revision
    folder: Path
    metadata_folder: Path
    install_arguments: tuple[str, ...] = ()  # consumer_arguments() of the cell's plan
    # The settings that select the binary ({"os": "Linux", "arch": "x86_64"}): a consumer's
    # host profile has these (its own default one on such a machine)
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def pattern(self) -> str:
        return f"{self.ref}:{self.package_id}"

    @property
    def full_ref(self) -> str:
        return f"{self.ref}:{self.package_id}#{self.revision}"


def export_argv(plan: CellBuildPlan, version: str, *, test_bundle: Path | None) -> list[str]:
    """The cell's `conan build` command as `conan export-pkg`: the same recipe, profiles,
    options and conf, the version given, no build of anything. With `test_bundle` the
    package's test_package builds and runs a consumer against it on that bundle; without,
    the test stage is skipped."""
    argv = list(plan.argv)
    if argv[:2] != ["conan", "build"]:
        raise PackageError(f"{plan.cell_id}: not a cell's conan build command: {' '.join(argv)}")
    argv[1] = "export-pkg"
    for flag, takes_value in (("--build", True), ("--update", False)):
        while flag in argv:
            at = argv.index(flag)
            del argv[at : at + (2 if takes_value else 1)]
    argv += ["--version", version, "--no-remote"]
    if test_bundle is None:
        argv += ["--test-folder", ""]
    else:
        argv += ["--conf", f"user.eliza:test_bundle={test_bundle}"]
    return argv


def consumer_arguments(plan: CellBuildPlan, defaults: Mapping[str, str]) -> list[str]:
    """What a consumer's `conan install --requires=elizainference/V`, on its own default
    profile, adds to get this cell's package: the package's options the cell sets to other
    than their defaults (the gates it turns on, llama.cpp's choices where the platform's
    differ). Nothing else selects the binary (conanfile.py package_id)."""
    argv, found = list(plan.argv), []
    for at, word in enumerate(argv[:-1]):
        value = argv[at + 1]
        if word == "-o" and value.startswith("&:"):
            key, _, chosen = value.removeprefix("&:").partition("=")
            if key != "with_test_kit" and defaults.get(key) != chosen:
                found += ["-o", f"{PACKAGE}/*:{key}={chosen}"]
    return found


def export_package(
    plan: CellBuildPlan,
    version: str,
    cache: Path,
    env: Mapping[str, str],
    log_file: Path,
    *,
    test_bundle: Path | None,
    option_defaults: Mapping[str, str],
) -> ExportedPackage:
    """Runs the export (its output to `log_file`) and returns the package it made."""
    done = proc.run(
        conan_argv(export_argv(plan, version, test_bundle=test_bundle)), env=conan_env(cache, env)
    )
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text(done.stderr)
    if not done.ok:
        tail = "".join(done.stderr.splitlines(keepends=True)[-30:])
        raise PackageError(
            f"{plan.cell_id}: conan export-pkg failed ({done.returncode}); log: {log_file}\n{tail}"
        )
    # stdout is the export's graph only: Conan prints the test stage's output on stderr.
    graph = json.loads(done.stdout)
    root = graph["graph"]["nodes"]["0"]
    if not str(root.get("ref", "")).startswith(f"{PACKAGE}/"):
        raise PackageError(f"{plan.cell_id}: conan export-pkg's graph has no {PACKAGE} root; log: {log_file}")
    ref, package_id, revision = str(root["ref"]), str(root["package_id"]), str(root["prev"])
    folder = Path(str(root["package_folder"]))
    metadata = _cache_path(cache, f"{ref}:{package_id}#{revision}", "metadata")
    return ExportedPackage(
        ref=ref,
        package_id=package_id,
        revision=revision,
        folder=folder,
        metadata_folder=metadata,
        install_arguments=tuple(consumer_arguments(plan, option_defaults)),
        settings=tuple(
            (str(k), str(v)) for k, v in sorted((root.get("info") or {}).get("settings", {}).items())
        ),
    )


def _cache_path(cache: Path, reference: str, folder: str) -> Path:
    done = proc.run([*conan_program(), "cache", "path", reference, "--folder", folder], env=conan_env(cache))
    if not done.ok:
        raise PackageError(
            f"conan cache path {reference} --folder {folder} failed: {done.stderr.strip()[-800:]}"
        )
    return Path(done.stdout.strip())


def write_archive(package: Path, archive: Path, top: str, mtime: int) -> None:
    """The package folder as `top/...` in a tar.gz whose bytes depend only on the files:
    sorted names, one mtime, no owners, symlinks kept, gzip without a timestamp."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in [package, *sorted(package.rglob("*"))]:
            rel = path.relative_to(package)
            info = tar.gettarinfo(str(path), arcname=str(Path(top) / rel) if rel.parts else top)
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    with archive.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buffer.getvalue())


def upload_package(package: ExportedPackage, cache: Path, remote: BinaryRemote) -> str:
    """Uploads the recipe and this one binary to the remote (a no-op for what it has)."""
    with _remote_added(cache, remote):
        done = proc.run(
            [*conan_program(), "upload", package.pattern, "--remote", REMOTE_NAME, "--confirm"],
            env=conan_env(cache, remote.login_env()),
        )
    if not done.ok:
        raise PackageError(
            f"conan upload {package.pattern} to {remote.url} failed: {done.stderr.strip()[-1500:]}"
        )
    return f"{package.pattern} uploaded to {remote.url}"
