// EliInferenceContext: one loaded bundle. The text model is loaded once and shared by
// every stream opened on the context; each stream owns its llama_context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "llama.h"

struct LlamaModelDeleter {
    void operator()(llama_model * m) const { llama_model_free(m); }
};
using LlamaModelPtr = std::unique_ptr<llama_model, LlamaModelDeleter>;

// How big a stream's context is and how many threads decode it. The stream config has no
// such fields, so they come from the model (see resolve_runtime_limits), with the
// environment variables ELIZA_N_CTX and ELIZA_N_THREADS as overrides for benchmarking.
struct RuntimeLimits {
    uint32_t n_ctx = 0;
    int32_t n_threads = 0;
};

struct EliInferenceContext {
    std::string bundle_dir;
    std::string model_path;
    LlamaModelPtr model;
    const llama_vocab * vocab = nullptr;
    int32_t n_vocab = 0;
    RuntimeLimits limits;
    size_t max_piece_bytes = 0;  // longest text one token renders to
    uint64_t model_id = 0;       // identifies the model file in slot files (see model_identity)
};

namespace eliza {

// Loads <bundle_dir>/text/<one>.gguf. On failure returns nullptr and sets code/message.
std::unique_ptr<EliInferenceContext> load_context(const char * bundle_dir, int & code, std::string & message);

// n_ctx = min(model's training context, 4096); n_threads = min(hardware threads, 8).
// ELIZA_N_CTX / ELIZA_N_THREADS (positive integers) override either; a malformed value is
// an error rather than a silent default.
bool resolve_runtime_limits(const llama_model * model, RuntimeLimits & out, std::string & message);

// Renders one token as llama.cpp does for generated text (special tokens render empty).
std::string token_piece(const llama_vocab * vocab, llama_token token);

}  // namespace eliza
