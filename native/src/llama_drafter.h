// The draft side of speculative decoding on the llama.cpp path: a second model with the
// text model's vocabulary (cfg->mtp_drafter_path) and its own llama_context, whose cache
// holds a prefix of the stream's tokens. The stream drafts with it and verifies with the
// text model (llama_stream.cpp); this file loads, checks and trims it, and decides when a
// step drafts (adaptive drafting: the confidence rule and the backoff below).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "context.h"
#include "eliza-inference-ffi.h"
#include "llama.h"

// When a stream asks its drafter for a draft: the backoff half of adaptive drafting (the
// confidence half is LlamaDrafter::propose). Pure bookkeeping over steps, no llama.cpp.
// A step that could draft (its draft bound is at least max(draft_min, 1)) first asks
// should_draft(); a step told no is a plain one and costs the drafter nothing (its cache
// catches up in one batch when drafting resumes). A step that drafted reports whether the
// text model accepted any of its draft (a step whose drafter was too unsure to draft
// anything counts as not accepted). After kMissesBeforeBackoff consecutive such misses the
// next kFirstSkip steps skip drafting; every further miss multiplies the skip by
// kSkipGrowth, up to max_skip; one accepted draft token ends the backoff. max_skip 0:
// every step drafts. Two misses in a row, not one, start it, so that a drafter that is
// mostly accepted keeps drafting through a single rejection; the skip starts long and
// grows fast because asking a drafter costs about a full decode of the draft model (its
// weights are read again, and its cache catches up), whatever it then drafts.
class DraftBackoff {
public:
    static constexpr int32_t kMissesBeforeBackoff = 2;
    static constexpr int32_t kFirstSkip = 8;
    static constexpr int32_t kSkipGrowth = 8;

    explicit DraftBackoff(int32_t max_skip = 0) : max_skip_(max_skip) {}

    // True: this step drafts. False: it skips, and one step of the skip is used up.
    bool should_draft() {
        if (left_ == 0) return true;
        --left_;
        return false;
    }
    // After a step that drafted: hit = the text model accepted at least one draft token.
    void record(bool hit) {
        if (hit) {
            misses_ = 0;
            skip_ = 0;
            return;
        }
        if (max_skip_ == 0 || ++misses_ < kMissesBeforeBackoff) return;
        skip_ = std::min(max_skip_, skip_ == 0 ? kFirstSkip : kSkipGrowth * skip_);
        left_ = skip_;
    }
    // A fresh start (prefill, reset, restore): the next step drafts.
    void reset() { misses_ = skip_ = left_ = 0; }

private:
    int32_t max_skip_;
    int32_t misses_ = 0;  // consecutive steps that drafted without an accepted token
    int32_t skip_ = 0;    // the length of the last skip (0: not backing off)
    int32_t left_ = 0;    // steps of the current skip still to come
};

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

    // The draft model's greedy choice after its last evaluated token (first maximum), and
    // whether it is sure enough to draft it: its softmax probability over the whole
    // vocabulary is at least p_min (llama.cpp's p_min rule; p_min 0: always).
    struct Proposal {
        llama_token token;  // -1: no logits
        bool confident;
    };
    Proposal propose() const;
    DraftBackoff & backoff() { return backoff_; }

    // A ggml fatal error in one of its calls: see LlamaStream::poison.
    void poison() { poisoned_ = true; }
    // Frees the llama.cpp objects now (inside the caller's guard).
    void shutdown();

private:
    LlamaDrafter() = default;
    // Whether the softmax of logits[0..n) gives best (their maximum) at least p_min (> 0).
    static bool probable(const float * logits, int32_t n, float best, float p_min);

    LlamaModelPtr model_;
    std::unique_ptr<llama_context, LlamaDrafterContextDeleter> lctx_;
    int32_t n_vocab_ = 0;
    int32_t draft_min_ = 0;
    int32_t draft_max_ = 0;
    float p_min_ = 0.0f;
    DraftBackoff backoff_;
    int attached_threads_ = 0;
    size_t n_past_ = 0;
    bool poisoned_ = false;
};
