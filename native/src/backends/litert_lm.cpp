// LiteRT-LM backend (milestone M4). Compiled only with ELIZA_ENABLE_LITERT.
//
// This build links no LiteRT-LM runtime, so available() is false and open() refuses: the
// selector then falls through to llama.cpp, or fails loudly when ELIZA_LLM_BACKEND names
// this backend. The M4 body (the NPU delegate ladder Tensor -> QNN -> NeuroPilot ->
// GPU/CPU, the .litertlm loader, real prefill/next) replaces the two marked places.
#include <string>

#include "llm-backend.h"
#include "status.h"

namespace eliza::backends {
namespace {

class LiteRtLmFactory final : public LlmBackendFactory {
public:
    const char * name() const override { return "litert-lm"; }

    bool available() const override {
        // M4: probe the linked LiteRT-LM runtime and an NPU/GPU delegate here.
        return false;
    }

    bool can_serve(const char * bundle_dir) const override {
        return seam::bundle_text_has_suffix(bundle_dir, ".litertlm");
    }

    int preference_rank() const override { return 100; }

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * /*cfg*/,
                             char ** out_error) override {
        // M4: load <bundle>/text/*.litertlm from llm_backend_context_bundle_dir(ctx).
        fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
             std::string("litert-lm: the LiteRT-LM runtime is not linked into this build; cannot serve bundle '") +
                 (ctx ? llm_backend_context_bundle_dir(ctx) : "") + "'");
        return nullptr;
    }
};

}  // namespace

// Declared in the generated builtin_backends.inc.
LlmBackendFactory & litert_lm_factory();
LlmBackendFactory & litert_lm_factory() {
    static LiteRtLmFactory instance;
    return instance;
}

}  // namespace eliza::backends
