#include "llama_drafter.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "status.h"

namespace fs = std::filesystem;

namespace {

// Same tokenizer type, special tokens and every token's text: only then do the draft's
// ids mean what the text model's ids mean, which verification compares.
bool same_vocabulary(const llama_vocab * target, const llama_vocab * draft, std::string & why) {
    const int32_t n_target = llama_vocab_n_tokens(target);
    const int32_t n_draft = llama_vocab_n_tokens(draft);
    if (n_target != n_draft) {
        why = "its vocabulary has " + std::to_string(n_draft) + " tokens, the text model's " +
              std::to_string(n_target);
        return false;
    }
    if (llama_vocab_type(target) != llama_vocab_type(draft)) {
        why = "its tokenizer type differs from the text model's";
        return false;
    }
    if (llama_vocab_bos(target) != llama_vocab_bos(draft) || llama_vocab_eos(target) != llama_vocab_eos(draft)) {
        why = "its BOS/EOS tokens differ from the text model's";
        return false;
    }
    for (llama_token t = 0; t < n_target; ++t) {
        const char * a = llama_vocab_get_text(target, t);
        const char * b = llama_vocab_get_text(draft, t);
        if (std::strcmp(a ? a : "", b ? b : "") != 0) {
            why = "token " + std::to_string(t) + " is '" + (b ? b : "") + "' in it and '" + (a ? a : "") +
                  "' in the text model";
            return false;
        }
    }
    return true;
}

bool abort_requested(void * data) { return static_cast<std::atomic<bool> *>(data)->load(); }

}  // namespace

bool LlamaDrafter::check_config(const eliza_llm_stream_config_t & cfg, int & code, std::string & message) {
    code = ELIZA_ERR_INVALID_ARG;
    if (cfg.temperature > 0.0f) {
        // Verification compares greedy choices; sampling would need rejection sampling over
        // both models' distributions to keep the output distribution, which this build lacks.
        code = ELIZA_ERR_NOT_IMPLEMENTED;
        message = "speculative decoding with sampling (cfg->temperature " + std::to_string(cfg.temperature) +
                  " > 0) is not implemented; use temperature <= 0 (greedy) with mtp_drafter_path, or no drafter";
        return false;
    }
    const int32_t draft_max = cfg.draft_max > 0 ? cfg.draft_max : kDefaultDraftMax;
    if (cfg.draft_min > draft_max) {
        message = "cfg->draft_min " + std::to_string(cfg.draft_min) + " is above the draft length " +
                  std::to_string(draft_max) + (cfg.draft_max > 0 ? " (cfg->draft_max)" : " (the default for draft_max 0)");
        return false;
    }
    code = ELIZA_OK;
    return true;
}

std::unique_ptr<LlamaDrafter> LlamaDrafter::open(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg,
                                                 uint32_t n_ctx, uint32_t n_batch, int n_threads,
                                                 std::atomic<bool> * cancelled, int & code, std::string & message) {
    if (!check_config(cfg, code, message)) {
        return nullptr;
    }
    code = ELIZA_ERR_INVALID_ARG;
    const std::string path = cfg.mtp_drafter_path;
    const std::string named = "mtp_drafter_path '" + path + "'";
    const int32_t draft_max = cfg.draft_max > 0 ? cfg.draft_max : kDefaultDraftMax;
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(path), ec)) {
        message = named + " does not exist or is not a regular file";
        return nullptr;
    }
    eliza::ensure_backend_initialised();
    llama_model_params mparams = llama_model_default_params();
    std::unique_ptr<LlamaDrafter> d(new LlamaDrafter());
    d->model_.reset(llama_model_load_from_file(path.c_str(), mparams));
    if (!d->model_) {
        code = eliza::ggml_fatal_in_call() ? ELIZA_ERR_FFI_FAULT : ELIZA_ERR_INVALID_ARG;
        const std::string why = eliza::llama_error_chain();
        message = named + ": cannot load the draft model" +
                  (why.empty() ? std::string(": not a valid GGUF model") : ": " + why);
        return nullptr;
    }
    std::string why;
    if (!same_vocabulary(ctx.vocab, llama_model_get_vocab(d->model_.get()), why)) {
        message = named + " cannot draft for this text model: " + why;
        return nullptr;
    }
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n_ctx;
    cparams.n_batch = n_batch;
    cparams.n_ubatch = n_batch;
    cparams.n_seq_max = 1;
    cparams.n_threads = n_threads;
    cparams.n_threads_batch = n_threads;
    cparams.no_perf = true;
    cparams.abort_callback = abort_requested;
    cparams.abort_callback_data = cancelled;
    d->lctx_.reset(llama_init_from_model(d->model_.get(), cparams));
    if (!d->lctx_) {
        code = eliza::ggml_fatal_in_call() ? ELIZA_ERR_FFI_FAULT : ELIZA_ERR_OOM;
        const std::string cause = eliza::llama_error_chain();
        message = named + ": cannot create a draft context of " + std::to_string(n_ctx) + " tokens" +
                  (cause.empty() ? std::string() : ": " + cause);
        return nullptr;
    }
    d->n_vocab_ = llama_vocab_n_tokens(ctx.vocab);
    d->draft_min_ = cfg.draft_min;
    d->draft_max_ = draft_max;
    d->p_min_ = static_cast<float>(ctx.settings.draft_p_min);
    d->backoff_ = DraftBackoff(static_cast<int32_t>(ctx.settings.draft_backoff_max));
    d->attached_threads_ = n_threads;
    code = ELIZA_OK;
    return d;
}

LlamaDrafter::~LlamaDrafter() {
    if (poisoned_) {
        // See LlamaStream::poison: its workers may still use both.
        (void) lctx_.release();
        (void) model_.release();
    }
}

void LlamaDrafter::shutdown() {
    if (poisoned_) return;
    if (llama_context * c = lctx_.release()) llama_free(c);
    if (llama_model * m = model_.release()) llama_model_free(m);
}

void LlamaDrafter::keep(size_t n) {
    // n == n_past_ still trims: a failed evaluation may have left cells past it.
    if (n > n_past_) return;
    if (n == 0 || !llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(n), -1)) {
        clear();
        return;
    }
    n_past_ = n;
}

void LlamaDrafter::clear() {
    llama_memory_clear(llama_get_memory(lctx_.get()), true);
    n_past_ = 0;
}

LlamaDrafter::Proposal LlamaDrafter::propose() const {
    const float * logits = llama_get_logits_ith(lctx_.get(), -1);
    if (logits == nullptr) return {-1, false};
    llama_token best = 0;
    for (llama_token t = 1; t < n_vocab_; ++t) {
        if (logits[t] > logits[best]) best = t;
    }
    return {best, p_min_ <= 0.0f || probable(logits, n_vocab_, logits[best], p_min_)};
}

// p(best) = 1 / sum_t exp(l_t - l_best) >= p_min  <=>  sum_t exp(l_t - l_best) <= 1 / p_min.
// Only logits within kTail of the best are exponentiated (stopping as soon as the sum is
// over the limit); each of the others adds less than exp(-kTail) and is counted as that
// bound. Only when the bound leaves the answer open are they summed exactly. So the answer
// is the exact comparison, at the cost of a few exponentials for a peaked distribution.
bool LlamaDrafter::probable(const float * logits, int32_t n, float best, float p_min) {
    constexpr float kTail = 20.0f;
    const double limit = 1.0 / static_cast<double>(p_min);
    const float cut = best - kTail;
    double sum = 0.0;
    int32_t far = 0;
    for (int32_t t = 0; t < n; ++t) {
        if (logits[t] >= cut) {
            sum += static_cast<double>(std::exp(logits[t] - best));
            if (sum > limit) return false;
        } else {
            ++far;
        }
    }
    if (sum + static_cast<double>(far) * std::exp(-static_cast<double>(kTail)) <= limit) return true;
    for (int32_t t = 0; t < n; ++t) {
        if (logits[t] < cut) sum += static_cast<double>(std::exp(logits[t] - best));
    }
    return sum <= limit;
}
