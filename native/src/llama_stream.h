// The in-tree llama.cpp generation path: one llama_context, sampler chain and ggml thread
// pool per stream. The FFI functions delegate here; alternate runtimes (the seam) sit
// above, never inside.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "eliza-inference-ffi.h"
#include "llama_drafter.h"
#include "sampling.h"
#include "ggml-cpu.h"
#include "llama.h"

struct LlamaContextDeleter {
    void operator()(llama_context * c) const { llama_free(c); }
};
struct ThreadpoolDeleter {
    void operator()(ggml_threadpool * p) const { ggml_threadpool_free(p); }
};
using SamplerPtr = eliza::Sampler;

// Where one _next step writes its results (the caller's buffers).
struct StepBuffers {
    int32_t * tokens_out;
    size_t tokens_cap;
    size_t * num_tokens_out;
    char * text_out;
    size_t text_cap;
    int32_t * drafted_out;   // may be NULL
    int32_t * accepted_out;  // may be NULL
};

namespace eliza {
// Refuses NaN/infinite floats and out-of-range values, naming the field. Both the
// llama.cpp path and the alternate backends get only configs that pass.
bool validate_config(const eliza_llm_stream_config_t & cfg, std::string & message);
}  // namespace eliza

class LlamaStream {
public:
    // nullptr + code/message on failure.
    static std::unique_ptr<LlamaStream> open(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg,
                                             int & code, std::string & message);
    ~LlamaStream();

    int prefill(const int32_t * token_ids, size_t n, std::string & message);
    int next(const StepBuffers & out, std::string & message);
    void cancel();
    int reset();
    int reset_keep(int32_t n_keep);
    int save_slot(const char * filename, std::string & message);
    int restore_slot(const char * filename, std::string & message);

    // Bytes a text_out buffer needs for any one step (longest piece + held-back bytes + NUL).
    size_t text_bytes_needed() const;

    // A ggml fatal error unwound out of one of this stream's llama.cpp calls: its context
    // and thread pool may be in any state (workers stuck at a barrier), so every later call
    // fails and closing the stream leaks them instead of touching them.
    void poison() { poisoned_ = true; }
    bool poisoned() const { return poisoned_; }
    // Frees the llama.cpp objects now (inside the caller's guard); the destructor then has
    // nothing left to free.
    void shutdown();

private:
    LlamaStream(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg);
    SamplerPtr make_sampler(std::string & message) const;
    int decode(const llama_token * tokens, size_t n, std::string & message);
    // Evaluates tokens on c (the text model's or the drafter's context) under a thread
    // lease. all_logits: one batch at positions from pos0 with logits for every token (n
    // must fit one batch); otherwise batches of llama_batch_get_one, last logits only.
    int decode_on(llama_context * c, int & attached, const char * what, const llama_token * tokens, size_t n,
                  bool all_logits, llama_pos pos0, std::string & message);
    // The logits the next step chooses from.
    const float * next_logits();
    // One step that drafts after the text model's choice `first` and verifies the draft.
    int speculative_step(const StepBuffers & out, llama_token first, const std::string & first_piece,
                         std::string & message);
    // Brings the drafter's cache to history_ + `first`; its logits then predict the token after it.
    int drafter_catch_up(llama_token first, std::string & message);
    llama_token choose(const float * logits);
    void accept(llama_token token);
    // Puts the cache back to its first keep tokens after a failed evaluation.
    void roll_back(size_t keep, std::string & message);
    void clear_state();  // reset() without touching the cancel flag
    void set_active(bool active);  // counts the stream in the thread budget's fair share
    // Splits pending_ + piece into what can be emitted now and an incomplete UTF-8 tail.
    std::string take_complete_utf8(const std::string & piece, bool flush);
    int finish_step(const StepBuffers & out, const std::string & text, size_t n_tokens, int result);
    uint64_t max_state_bytes() const;

    const EliInferenceContext & ctx_;
    eliza_llm_stream_config_t cfg_;
    std::unique_ptr<ggml_threadpool, ThreadpoolDeleter> pool_;  // null when one thread decodes
    std::unique_ptr<llama_context, LlamaContextDeleter> lctx_;
    SamplerPtr sampler_;
    std::unique_ptr<LlamaDrafter> drafter_;  // null without mtp_drafter_path
    llama_batch verify_batch_{};             // the draft-verification batch (allocated with a drafter)
    int32_t logits_row_ = -1;                // output row of the last decode that the next step reads
    int pool_threads_ = 1;               // threads of pool_ (1: no pool)
    int attached_threads_ = 0;           // threads the context was last set to use
    std::atomic<bool> cancelled_{false};
    bool poisoned_ = false;
    bool active_ = false;
    std::vector<llama_token> history_;   // every token held in the KV cache, in order
    std::vector<float> restored_logits_; // logits restored from a slot file, used once
    std::vector<llama_token_data> candidates_;  // sampling scratch, reused across steps
    std::vector<llama_token> accepted_;         // the sampler's last accepted tokens (<= its penalty window)
    std::string pending_;                // bytes of an incomplete UTF-8 character
    int32_t generated_ = 0;              // tokens generated since the last prefill
    bool have_logits_ = false;
    bool finished_ = false;
};
