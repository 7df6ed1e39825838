// MLX / CoreML backend (milestone M5, Apple only). Compiled only with ELIZA_ENABLE_MLX.
//
// This build links neither MLX nor CoreML, so available() is false and open() refuses;
// selection falls through to llama.cpp. The M5 body (Metal device probe, .mlpackage /
// .mlmodelc / MLX weights loaders, real prefill/next) replaces the marked places.
#include <filesystem>
#include <string>
#include <system_error>

#include "llm-backend.h"
#include "status.h"

namespace eliza::backends {
namespace {

class MlxCoreMlFactory final : public LlmBackendFactory {
public:
    const char * name() const override { return "mlx-coreml"; }

    bool available() const override {
        // M5: probe for a Metal device and the linked MLX/CoreML frameworks here.
        return false;
    }

    bool can_serve(const char * bundle_dir) const override {
        // .mlpackage (a directory), .mlmodelc (compiled, a directory), or an MLX weights
        // directory text/mlx/ (matrix.yaml lists the same three).
        std::error_code ec;
        return seam::bundle_text_has_suffix(bundle_dir, ".mlpackage") ||
               seam::bundle_text_has_suffix(bundle_dir, ".mlmodelc") ||
               (bundle_dir != nullptr && std::filesystem::is_directory(std::filesystem::path(bundle_dir) / "text" / "mlx", ec));
    }

    int preference_rank() const override { return 90; }

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * /*cfg*/,
                             char ** out_error) override {
        fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
             std::string("mlx-coreml: neither MLX nor CoreML is linked into this build; cannot serve bundle '") +
                 (ctx ? llm_backend_context_bundle_dir(ctx) : "") + "'");
        return nullptr;
    }
};

}  // namespace

// Declared in the generated builtin_backends.inc.
LlmBackendFactory & mlx_coreml_factory();
LlmBackendFactory & mlx_coreml_factory() {
    static MlxCoreMlFactory instance;
    return instance;
}

}  // namespace eliza::backends
