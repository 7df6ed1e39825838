// LiteRT-LM backend (milestone M4): the gate `litert` of matrix.yaml, compiled only when it
// is ON. Its factory name, artifacts and rank come from the matrix (GateSpec).
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

class LiteRtFactory final : public GateFactory {
public:
    using GateFactory::GateFactory;

    bool available() const override {
        // M4: probe the linked LiteRT-LM runtime and an NPU/GPU delegate here.
        return false;
    }

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * /*cfg*/,
                             char ** out_error) override {
        // M4: load the bundle's text/*.litertlm from llm_backend_context_bundle_dir(ctx).
        fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
             std::string(name()) + ": the LiteRT-LM runtime is not linked into this build; cannot serve bundle '" +
                 (ctx ? llm_backend_context_bundle_dir(ctx) : "") + "'");
        return nullptr;
    }
};

}  // namespace

LlmBackendFactory & litert_factory(const GateSpec & spec) {
    static LiteRtFactory instance(spec);
    return instance;
}

}  // namespace eliza::backends
