// The gated backends' factories; each is defined in its own file, compiled only when its
// ELIZA_ENABLE_* gate is on.
#pragma once

#include "llm-backend.h"

namespace eliza::backends {

LlmBackendFactory & litert_lm_factory();   // backends/litert_lm.cpp  (ELIZA_ENABLE_LITERT)
LlmBackendFactory & mlx_coreml_factory();  // backends/mlx_coreml.cpp (ELIZA_ENABLE_MLX)

}  // namespace eliza::backends
