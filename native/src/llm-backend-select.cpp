// The selector: ELIZA_LLM_BACKEND hard-select, else rank-ordered auto-select, else the
// in-tree llama.cpp path. See the resolution table in llm-backend.h.
#include <cstdlib>
#include <string>

#include "llm-backend-registry.h"
#include "llm-backend.h"
#include "status.h"

namespace eliza::seam {
namespace {

std::string trim(const std::string & s) {
    const char * ws = " \t\r\n\v\f";
    const size_t first = s.find_first_not_of(ws);
    if (first == std::string::npos) {
        return "";
    }
    return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

std::string quoted(const std::string & s) { return "'" + s + "'"; }

}  // namespace

LlmBackendFactory * select_with_override(const char * bundle_dir, const char * override_value, char ** out_error) {
    if (out_error) *out_error = nullptr;
    const std::string requested = trim(override_value ? override_value : "");
    const std::vector<LlmBackendFactory *> candidates = registry().snapshot();

    if (requested.empty()) {
        LlmBackendFactory * best = nullptr;
        int best_rank = 0;  // the in-tree llama.cpp path's rank: an alternate must beat it
        // can_serve first: available() may load a runtime (a gate module), which a bundle
        // without the backend's artifact must not cost.
        for (LlmBackendFactory * f : candidates) {
            if (f->preference_rank() > best_rank && f->can_serve(bundle_dir) && f->available()) {
                best = f;
                best_rank = f->preference_rank();
            }
        }
        return best;
    }

    const std::string wanted = lowercase(requested);
    if (wanted == "llama.cpp" || wanted == "llamacpp") {
        return nullptr;
    }
    const std::string prefix = "ELIZA_LLM_BACKEND=" + quoted(requested) + ": ";
    for (LlmBackendFactory * f : candidates) {
        if (lowercase(f->name()) != wanted) {
            continue;
        }
        if (!f->available()) {
            fail(out_error, ELIZA_ERR_INVALID_ARG,
                 prefix + "backend " + quoted(f->name()) +
                     " is compiled in but unavailable on this host (its runtime is not present); "
                     "unset ELIZA_LLM_BACKEND or set it to llama.cpp");
            return nullptr;
        }
        if (!f->can_serve(bundle_dir)) {
            fail(out_error, ELIZA_ERR_INVALID_ARG,
                 prefix + "bundle " + quoted(bundle_dir ? bundle_dir : "") + " lacks the artifact backend " +
                     quoted(f->name()) + " serves from under text/");
            return nullptr;
        }
        return f;
    }
    const std::string names = registered_names();
    fail(out_error, ELIZA_ERR_INVALID_ARG,
         prefix + "backend " + quoted(requested) + " is not registered in this build (registered: " +
             (names.empty() ? std::string("none") : names) + "; llama.cpp is always available)");
    return nullptr;
}

}  // namespace eliza::seam

LlmBackendFactory * llm_backend_select(const char * bundle_dir, const eliza_llm_stream_config_t * /*cfg*/,
                                       char ** out_error) {
    return eliza::seam::select_with_override(bundle_dir, std::getenv("ELIZA_LLM_BACKEND"), out_error);
}
