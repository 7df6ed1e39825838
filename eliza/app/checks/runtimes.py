"""How a check runs the library with a gate's runtime present or absent."""

from __future__ import annotations

from eliza.app.services.run import Run


def runtime_hidden(evidence: Run) -> dict[str, str]:
    """The environment in which a gate's runtime is absent, as on a host without it: the
    library looks for its gate modules in an empty folder (ELIZA_BACKEND_MODULE_DIR), so
    every compiled-in gate reports available() false and the cases judge the fall-through."""
    empty = evidence.project.build_root / "no-backend-modules"
    empty.mkdir(parents=True, exist_ok=True)
    return {"ELIZA_BACKEND_MODULE_DIR": str(empty)}
