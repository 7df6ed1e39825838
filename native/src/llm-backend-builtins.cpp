// Registers the factories whose build gate is on. A gate that is off compiles nothing of
// its backend: no factory, no runtime headers, nothing extra on the link line.
#include "backends/backends.h"
#include "llm-backend.h"

// Cheap and idempotent (registration is by name), so every _open can call it.
void llm_backend_register_builtins() {
#if defined(ELIZA_ENABLE_LITERT)
    llm_backend_register(&eliza::backends::litert_lm_factory());
#endif
#if defined(ELIZA_ENABLE_MLX)
    llm_backend_register(&eliza::backends::mlx_coreml_factory());
#endif
}
