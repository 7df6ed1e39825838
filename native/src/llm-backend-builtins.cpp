// The factories whose build gate is on. A gate that is off compiles nothing of its backend:
// no factory, no runtime headers, nothing extra on the link line. builtin_backends.inc is
// generated at configure time from the gate table conanfile.py reads out of matrix.yaml;
// it defines make_builtin_gates().
#include <array>
#include <cstddef>

#include "llm-backend.h"

#include "builtin_backends.inc"

namespace eliza::backends {
namespace {

// Built on first use: each entry calls its gate's factory function, whose singleton is a
// function-local static, so nothing runs during static initialisation of the library.
const auto & builtin_gates() {
    static const auto gates = make_builtin_gates();
    return gates;
}

}  // namespace

size_t builtin_gate_count() { return builtin_gates().size(); }

const BuiltinGate * builtin_gate(size_t index) {
    return index < builtin_gates().size() ? &builtin_gates()[index] : nullptr;
}

}  // namespace eliza::backends

// Cheap and idempotent (registration is by name), so every _open can call it.
void llm_backend_register_builtins() {
    for (const eliza::backends::BuiltinGate & gate : eliza::backends::builtin_gates()) {
        llm_backend_register(gate.factory);
    }
}
