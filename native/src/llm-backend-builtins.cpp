// Registers the factories whose build gate is on. A gate that is off compiles nothing of
// its backend: no factory, no runtime headers, nothing extra on the link line. The list
// is generated from the gate table in native/CMakeLists.txt.
#include "llm-backend.h"

#include "builtin_backends.inc"

// Cheap and idempotent (registration is by name), so every _open can call it.
void llm_backend_register_builtins() { register_gated_backends(); }
