"""The CycloneDX SBOM a release ships beside each archive (Conan's `conan.tools.sbom` writes
it in the package's metadata): checked against the CycloneDX JSON schema of its own spec
version with cyclonedx-python-lib's strict validator before anything ships."""

from __future__ import annotations

import json

from eliza.formats.json_schema import load_jsonschema

_VERSIONS = ("1.4", "1.5", "1.6")


def sbom_problem(text: str) -> str:
    """Why the text is not a valid CycloneDX JSON SBOM ("" when it is)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(data, dict) or data.get("bomFormat") != "CycloneDX":
        return "not a CycloneDX document (bomFormat is not 'CycloneDX')"
    version = str(data.get("specVersion"))
    if version not in _VERSIONS:
        return f"specVersion {data.get('specVersion')!r} is not one of {', '.join(_VERSIONS)}"
    # Here, not at the top: a release that ships nothing (a dry run, a refusal) checks no
    # SBOM. jsonschema through load_jsonschema, so RFC 3987's grammars are built at the
    # first IRI the schema checks, not at the import (eliza.formats.json_schema).
    load_jsonschema()
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.from_version(version)).validate_str(text)
    return "" if error is None else f"does not validate against CycloneDX {data['specVersion']}: {error}"


def sbom_licenses(text: str) -> tuple[str, ...]:
    """The licenses of the SBOM's root component (metadata.component), as SPDX ids, names or
    expressions; () when it declares none."""
    data = json.loads(text)
    component = data.get("metadata", {}).get("component", {}) if isinstance(data, dict) else {}
    found: list[str] = []
    for choice in component.get("licenses", []) if isinstance(component, dict) else []:
        if not isinstance(choice, dict):
            continue
        if "expression" in choice:
            found.append(str(choice["expression"]))
        license_ = choice.get("license")
        if isinstance(license_, dict):
            found.append(str(license_.get("id") or license_.get("name") or ""))
    return tuple(f for f in found if f)
