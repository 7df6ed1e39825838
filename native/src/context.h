// EliInferenceContext: one bundle. The text model is loaded once and shared by every
// stream opened on the context; each stream owns its llama_context. A bundle that also (or
// only) holds an artifact a compiled-in backend can serve loads its GGUF lazily, on the
// first use by the llama.cpp path (ensure_model).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "llama.h"

struct LlamaModelDeleter {
    void operator()(llama_model * m) const { llama_model_free(m); }
};
using LlamaModelPtr = std::unique_ptr<llama_model, LlamaModelDeleter>;

namespace eliza {

// Everything the library takes from the environment, read in one place
// (read_settings, at each eliza_inference_create) and never in a hot path:
//   ELIZA_N_CTX      context size of each stream (1 .. 2^24)
//   ELIZA_N_THREADS  the process's decode thread budget (1 .. 512)
//   ELIZA_DRAFT_P_MIN        speculative decoding: the draft model's least probability of a
//                            token it drafts (0 .. 1; 0: no confidence rule)
//   ELIZA_DRAFT_BACKOFF_MAX  speculative decoding: the most steps skipped after drafts that
//                            were not accepted (0 .. 1024; 0: no backoff)
// (ELIZA_LLM_BACKEND is read by the backend selector at each _open.) The drafter settings
// steer only when a stream drafts (llama_drafter.h), never its output.
struct Settings {
    static constexpr double kDefaultDraftPMin = 0.75;
    static constexpr long kDefaultDraftBackoffMax = 128;
    static constexpr long kMaxDraftBackoff = 1024;

    long n_ctx = 0;      // 0: not set
    long n_threads = 0;  // 0: not set
    double draft_p_min = kDefaultDraftPMin;
    long draft_backoff_max = kDefaultDraftBackoffMax;
};
bool read_settings(Settings & out, std::string & message);

// CPUs this process may run on (its affinity mask where the platform has one), >= 1.
int available_cpus();

// The decode thread budget shared by every stream of the process, so concurrent streams
// share the cores instead of spinning against each other. ggml synchronises the threads of
// one decode with spinning barriers, which collapse when its threads do not all run; a
// single-threaded decode never spins. So a decode gets several threads — a fair share,
// capacity / active streams, up to its pool — only when that many cores are free;
// otherwise it runs on its calling thread alone, at once, unless a multi-threaded decode
// holds every core (then it waits for that decode to end). A stream is active from its
// first prefill until its final step, a failed step, reset, restore or close.
class ThreadBudget {
public:
    static ThreadBudget & instance();
    void set_capacity(int n);
    int capacity() const;
    void enter();  // a stream became active
    void leave();  // it is no longer
    // Threads granted (>= 1), or 0 when cancelled was set (checked before and while waiting).
    int acquire(int want, const std::atomic<bool> & cancelled);
    void release(int n);
    // Wakes waiters so a cancelled one can give up.
    void wake();

private:
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    int capacity_ = 1;
    int in_use_ = 0;  // threads of running decodes (single-threaded ones may exceed capacity_)
    int active_ = 0;  // active streams
    int multi_ = 0;   // running decodes with several threads
};

}  // namespace eliza

namespace eliza {
// A vocabulary and what the text path needs to know about it.
struct VocabView {
    const llama_vocab * vocab = nullptr;
    int32_t n_vocab = 0;
    size_t max_piece_bytes = 0;  // longest text one token renders to
};
}  // namespace eliza

// How big a stream's context is and how many threads one stream's decode may use.
struct RuntimeLimits {
    uint32_t n_ctx = 0;
    int32_t n_threads = 0;  // the size of each stream's thread pool
};

struct EliInferenceContext {
    std::string bundle_dir;
    std::string model_path;   // "" when the bundle has no text GGUF
    std::string served_by;    // compiled-in backends that can serve the bundle ("" when none)
    eliza::Settings settings; // read at create; applied when the model loads
    std::mutex load_mutex;
    std::atomic<bool> loaded{false};  // model and everything below are set (then read-only)
    LlamaModelPtr model;
    const llama_vocab * vocab = nullptr;
    int32_t n_vocab = 0;
    RuntimeLimits limits;
    size_t max_piece_bytes = 0;  // longest text one token renders to
    uint64_t model_id = 0;       // XXH64 of the whole model file (slot files carry it)
    // The GGUF's vocabulary alone, for a bundle an alternate runtime serves (ensure_vocab):
    // tokenization stays the GGUF's without loading its weights.
    std::atomic<bool> vocab_loaded{false};
    LlamaModelPtr vocab_model;
    eliza::VocabView vocab_only;
    // What an alternate runtime keeps for this context (its loaded weights, by backend
    // name), so the streams of one context share them and a stream opened after the last
    // one closed finds them loaded; freed with the context.
    std::mutex backend_state_mutex;
    std::map<std::string, std::shared_ptr<void>> backend_state;
    // The owner's handle plus one per open stream: eliza_inference_destroy drops the
    // owner's, _close a stream's, and the last one frees the context. A context destroyed
    // while streams are open thus stays alive (and its streams keep working) until the
    // last of them is closed: never a use-after-free.
    std::atomic<int> holders{1};
};

namespace eliza {

// Opens a bundle: <bundle_dir>/text/<one>.gguf, loaded now unless a compiled-in backend
// can also serve the bundle; or no GGUF when such a backend can serve it. On failure
// returns nullptr and sets code/message.
std::unique_ptr<EliInferenceContext> load_context(const char * bundle_dir, int & code, std::string & message);

// The text model for the llama.cpp path, loaded on first call (thread-safe). False +
// code/message when the bundle has none or it cannot be loaded (a later call tries again).
bool ensure_model(EliInferenceContext & ctx, int & code, std::string & message);

// The bundle GGUF's vocabulary: the text model's when it is loaded, else the GGUF loaded
// vocabulary-only, once (thread-safe). False + code/message when the bundle has no GGUF or
// it cannot be read.
bool ensure_vocab(EliInferenceContext & ctx, VocabView & out, int & code, std::string & message);

// n_ctx = min(model's training context, 4096), or ELIZA_N_CTX.
// Thread budget = available CPUs, or ELIZA_N_THREADS; a stream's pool = min(budget, 8).
// Sets the process's ThreadBudget.
bool resolve_runtime_limits(const llama_model * model, const Settings & settings, RuntimeLimits & out,
                            std::string & message);

// Renders one token as llama.cpp does for generated text (special tokens render empty).
std::string token_piece(const llama_vocab * vocab, llama_token token);

// Frees the context inside the caller's guard (llama_model_free may reach a ggml assert).
void destroy_context(EliInferenceContext * ctx);

// One more holder of the context (a stream opened on it).
void retain_context(EliInferenceContext * ctx);
// One holder less; the last one frees the context (destroy_context), inside the guard.
void release_context(EliInferenceContext * ctx);

}  // namespace eliza
