"""matrix.yaml: schema, loader and the value objects it produces."""

from eliza.matrix.model import Cell, Check, CheckKind, DeviceGatedItem, Gate, Matrix, Platform, Requirement

__all__ = ["Cell", "Check", "CheckKind", "DeviceGatedItem", "Gate", "Matrix", "Platform", "Requirement"]
