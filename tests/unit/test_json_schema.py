"""jsonschema imported for the project's schemas builds no IRI grammar, and an IRI format
is still checked where a schema asks for one (the CycloneDX schema of an SBOM)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from eliza.core.layout import REPO_ROOT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("rfc3987_syntax") is None,
    reason="rfc3987_syntax is not installed: nothing deferred",
)

# In a fresh interpreter: this test's process may have imported jsonschema already.
PROBE = """
import json, sys
from eliza.formats.json_schema import load_jsonschema
load_jsonschema()
from jsonschema.validators import Draft7Validator, Draft202012Validator
built_at_import = "rfc3987_syntax.syntax_helpers" in sys.modules
Draft202012Validator({"type": "object", "required": ["a"]}).validate({"a": 1})
built_by_a_schema_without_formats = "rfc3987_syntax.syntax_helpers" in sys.modules
formats = Draft7Validator.FORMAT_CHECKER
print(json.dumps({
    "built_at_import": built_at_import,
    "built_by_a_schema_without_formats": built_by_a_schema_without_formats,
    "bad": formats.conforms("http://example.com/a b", "iri-reference"),
    "good": formats.conforms("http://example.com/a%20b", "iri-reference"),
    "built_by_an_iri": "rfc3987_syntax.syntax_helpers" in sys.modules,
}))
"""

# A process that asks where rfc3987_syntax is, or imports a module of it, while the
# stand-in holds its place gets the real module's answers.
ASKED = """
import importlib.util, sys
from eliza.formats.json_schema import load_jsonschema
load_jsonschema()
assert importlib.util.find_spec("rfc3987_syntax").origin.endswith("__init__.py")
from rfc3987_syntax.utils import load_grammar
print("ok")
"""


def test_the_iri_grammars_are_built_at_the_first_iri_and_still_judge_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO_ROOT, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "built_at_import": False,
        "built_by_a_schema_without_formats": False,
        "bad": False,
        "good": True,
        "built_by_an_iri": True,
    }


def test_the_stand_in_answers_the_import_systems_questions_as_the_real_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ASKED], capture_output=True, text=True, cwd=REPO_ROOT, check=False, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
