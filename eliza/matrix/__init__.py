"""matrix.yaml: schema, loader and the value objects it produces."""

from eliza.matrix.loader import MatrixError, load_matrix, matrix_schema, parse_matrix
from eliza.matrix.model import (
    Cell,
    Check,
    CheckKind,
    DeviceGatedItem,
    Gate,
    Matrix,
    Platform,
    Problem,
    Requirement,
)

__all__ = [
    "Cell",
    "Check",
    "CheckKind",
    "DeviceGatedItem",
    "Gate",
    "Matrix",
    "MatrixError",
    "Platform",
    "Problem",
    "Requirement",
    "load_matrix",
    "matrix_schema",
    "parse_matrix",
]
