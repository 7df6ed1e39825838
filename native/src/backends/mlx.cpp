// MLX / CoreML backend (milestone M5, Apple only): the gate `mlx` of matrix.yaml, compiled
// only when it is ON. Its factory name, artifacts (.mlpackage, .mlmodelc, an MLX weights
// directory) and rank come from the matrix (GateSpec).
//
// This build links neither MLX nor CoreML, so available() is false and open() refuses;
// selection falls through to llama.cpp. The M5 body (Metal device probe, .mlpackage /
// .mlmodelc / MLX weights loaders, real prefill/next) replaces the marked places.
#include <string>

#include "llm-backend.h"
#include "status.h"

namespace eliza::backends {
namespace {

class MlxFactory final : public GateFactory {
public:
    using GateFactory::GateFactory;

    bool available() const override {
        // M5: probe for a Metal device and the linked MLX/CoreML frameworks here.
        return false;
    }

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * /*cfg*/,
                             char ** out_error) override {
        fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
             std::string(name()) + ": neither MLX nor CoreML is linked into this build; cannot serve bundle '" +
                 (ctx ? llm_backend_context_bundle_dir(ctx) : "") + "'");
        return nullptr;
    }
};

}  // namespace

LlmBackendFactory & mlx_factory(const GateSpec & spec) {
    static MlxFactory instance(spec);
    return instance;
}

}  // namespace eliza::backends
