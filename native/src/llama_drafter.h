// The draft side of speculative decoding on the llama.cpp path: a second model with the
// text model's vocabulary (cfg->mtp_drafter_path) and its own llama_context, whose cache
// holds a prefix of the stream's tokens. The stream drafts with it and verifies with the
// text model (llama_stream.cpp); this file only loads, checks and trims it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "context.h"
#include "eliza-inference-ffi.h"
#include "llama.h"

struct LlamaDrafterContextDeleter {
    void operator()(llama_context * c) const { llama_free(c); }
};

class LlamaDrafter {
public:
    // draft_max 0 with a drafter: this many.
    static constexpr int32_t kDefaultDraftMax = 16;

    // The config's speculative settings, checked before anything loads: false + code/message.
    static bool check_config(const eliza_llm_stream_config_t & cfg, int & code, std::string & message);
    // Loads cfg.mtp_drafter_path and checks it against the text model's vocabulary.
    // nullptr + code/message (naming mtp_drafter_path) on failure; nothing is left loaded.
    static std::unique_ptr<LlamaDrafter> open(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg,
                                              uint32_t n_ctx, uint32_t n_batch, int n_threads,
                                              std::atomic<bool> * cancelled, int & code, std::string & message);
    ~LlamaDrafter();
    LlamaDrafter(const LlamaDrafter &) = delete;
    LlamaDrafter & operator=(const LlamaDrafter &) = delete;

    llama_context * lctx() const { return lctx_.get(); }
    int & attached_threads() { return attached_threads_; }
    int32_t draft_min() const { return draft_min_; }
    int32_t draft_max() const { return draft_max_; }

    // Tokens of the stream's history its cache holds (always a prefix of it).
    size_t n_past() const { return n_past_; }
    void set_n_past(size_t n) { n_past_ = n; }
    // Drops every cached position from n on (n <= n_past); clears the cache where it cannot.
    void keep(size_t n);
    void clear();

    // The draft model's greedy choice after its last evaluated token (first maximum).
    llama_token argmax() const;

    // A ggml fatal error in one of its calls: see LlamaStream::poison.
    void poison() { poisoned_ = true; }
    // Frees the llama.cpp objects now (inside the caller's guard).
    void shutdown();

private:
    LlamaDrafter() = default;

    LlamaModelPtr model_;
    std::unique_ptr<llama_context, LlamaDrafterContextDeleter> lctx_;
    int32_t n_vocab_ = 0;
    int32_t draft_min_ = 0;
    int32_t draft_max_ = 0;
    int attached_threads_ = 0;
    size_t n_past_ = 0;
    bool poisoned_ = false;
};
