"""jsonschema, imported without building RFC 3987's grammars until a format needs them.

jsonschema registers its `iri` and `iri-reference` format checkers at import, from the
optional rfc3987_syntax, which compiles its Earley grammar once per rule when it is imported
(39 of them: 2.4 s of a 2-core host's CPU), though jsonschema calls one function of it,
and only where a schema asserts an IRI format. The project's own schemas (matrix.yaml, a
lab file, an evidence record) assert none; the CycloneDX schema an SBOM is checked against
does. So `load_jsonschema()`, where nothing in the process has imported jsonschema yet,
gives it a stand-in for rfc3987_syntax that imports the real module at the first use: a
session that reads evidence never pays for the grammars, and a release that checks an SBOM
pays once, with every format checked as before."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

_GRAMMARS = "rfc3987_syntax"


class _OnFirstUse(ModuleType):
    """rfc3987_syntax until something uses it; then the real module, imported in its place."""

    def is_valid_syntax(self, term: str, value: str) -> bool:  # what jsonschema imports
        return bool(_real().is_valid_syntax(term, value))

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # the import system's questions (__path__, __spec__): not a use
            raise AttributeError(name)
        return getattr(_real(), name)


def _real() -> ModuleType:
    if isinstance(sys.modules.get(_GRAMMARS), _OnFirstUse):
        del sys.modules[_GRAMMARS]
    return importlib.import_module(_GRAMMARS)


def load_jsonschema() -> ModuleType:
    """The jsonschema module, imported (the first time) with rfc3987_syntax deferred."""
    if "jsonschema" not in sys.modules and _GRAMMARS not in sys.modules:
        spec = importlib.util.find_spec(_GRAMMARS)
        if spec is not None:
            stand_in = _OnFirstUse(_GRAMMARS)
            # The real module's: what the import system asks of a module in sys.modules
            # (importlib.util.find_spec, a submodule's import) gets the same answers.
            stand_in.__spec__ = spec
            stand_in.__path__ = list(spec.submodule_search_locations or [])
            sys.modules[_GRAMMARS] = stand_in
    return importlib.import_module("jsonschema")
