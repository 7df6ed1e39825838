// The in-tree llama.cpp generation path: one llama_context and sampler chain per stream.
// The FFI functions delegate here; alternate runtimes (the seam) sit above, never inside.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "eliza-inference-ffi.h"
#include "llama.h"

struct LlamaContextDeleter {
    void operator()(llama_context * c) const { llama_free(c); }
};
struct LlamaSamplerDeleter {
    void operator()(llama_sampler * s) const { llama_sampler_free(s); }
};

// Where one _next step writes its results (the caller's buffers).
struct StepBuffers {
    int32_t * tokens_out;
    size_t tokens_cap;
    size_t * num_tokens_out;
    char * text_out;
    size_t text_cap;
};

class LlamaStream {
public:
    // nullptr + code/message on failure.
    static std::unique_ptr<LlamaStream> open(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg,
                                             int & code, std::string & message);

    int prefill(const int32_t * token_ids, size_t n, std::string & message);
    int next(const StepBuffers & out, std::string & message);
    void cancel() { cancelled_.store(true); }
    int reset();
    int reset_keep(int32_t n_keep);
    int save_slot(const char * filename, std::string & message);
    int restore_slot(const char * filename, std::string & message);

    // Bytes a text_out buffer needs for any one step (longest piece + held-back bytes + NUL).
    size_t text_bytes_needed() const;

private:
    LlamaStream(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg);
    bool build_sampler(std::string & message);
    int decode(const llama_token * tokens, size_t n, std::string & message);
    llama_token sample(const float * logits);
    // Splits pending_ + piece into what can be emitted now and an incomplete UTF-8 tail.
    std::string take_complete_utf8(const std::string & piece, bool flush);
    int finish_step(const StepBuffers & out, const std::string & text, size_t n_tokens, int result);

    const EliInferenceContext & ctx_;
    eliza_llm_stream_config_t cfg_;
    std::unique_ptr<llama_context, LlamaContextDeleter> lctx_;
    std::unique_ptr<llama_sampler, LlamaSamplerDeleter> sampler_;
    std::atomic<bool> cancelled_{false};
    std::vector<llama_token> history_;   // every token held in the KV cache, in order
    std::vector<float> restored_logits_; // logits restored from a slot file, used once
    std::vector<llama_token_data> candidates_;  // sampling scratch, reused across steps
    std::vector<llama_token> accepted_;         // tokens the sampler has accepted since its last reset
    std::string pending_;                // bytes of an incomplete UTF-8 character
    int32_t generated_ = 0;              // tokens generated since the last prefill
    bool have_logits_ = false;
    bool finished_ = false;
};
