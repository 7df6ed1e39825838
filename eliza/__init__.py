"""Build-and-test orchestration for libelizainference.

Pure policy (matrix model, cell expansion, host decisions, evidence evaluation, report
model) lives in modules without side effects; adapters (Conan, CMake, pip, abidiff,
the native library through ctypes) sit at the edge.
"""

__version__ = "0.1.0"
