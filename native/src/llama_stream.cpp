#include "llama_stream.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "status.h"
#include "xxh64.h"

namespace {

using eliza::kPenaltyLastN;
using eliza::valid_pending;

bool abort_requested(void * data) { return static_cast<std::atomic<bool> *>(data)->load(); }

// --- threads ---------------------------------------------------------------------------

void * probe_main(void *) { return nullptr; }

// Starts and joins n threads the way ggml starts its workers (default attributes). ggml
// asserts when a worker cannot start; probing first turns the common case — a thread or
// memory limit — into a clean error, with nothing half-built to leak.
bool probe_threads(int n, std::string & why) {
    std::vector<pthread_t> started;
    started.reserve(static_cast<size_t>(n));
    int err = 0;
    for (int i = 0; i < n; ++i) {
        pthread_t t;
        err = pthread_create(&t, nullptr, probe_main, nullptr);
        if (err != 0) break;
        started.push_back(t);
    }
    for (pthread_t t : started) pthread_join(t, nullptr);
    if (err != 0) {
        why = "could start only " + std::to_string(started.size()) + " of " + std::to_string(n) +
              " threads (" + std::strerror(err) + ")";
        return false;
    }
    return true;
}

// Holds threads of the process budget for one decode.
class BudgetLease {
public:
    BudgetLease(int want, const std::atomic<bool> & cancelled)
        : granted_(eliza::ThreadBudget::instance().acquire(want, cancelled)) {}
    ~BudgetLease() {
        if (granted_ > 0) eliza::ThreadBudget::instance().release(granted_);
    }
    BudgetLease(const BudgetLease &) = delete;
    BudgetLease & operator=(const BudgetLease &) = delete;
    int granted() const { return granted_; }

private:
    int granted_;
};

// --- slot file -------------------------------------------------------------------------
// "ELZSLOT2", a fixed 56-byte header of little-endian fields, the body, then the XXH64 of
// everything before it. The header is read and checked (and the file's size checked
// against it) before any of the body is read.
constexpr char kSlotMagic[8] = {'E', 'L', 'Z', 'S', 'L', 'O', 'T', '2'};
constexpr char kSlotMagicV1[8] = {'E', 'L', 'Z', 'S', 'L', 'O', 'T', '1'};
constexpr size_t kSlotHeaderBytes = 56;
constexpr uint32_t kFlagHaveLogits = 1u;
constexpr uint32_t kFlagFinished = 2u;

struct SlotHeader {
    uint64_t model_id = 0;
    uint32_t n_vocab = 0;
    uint32_t n_ctx = 0;
    uint32_t n_history = 0;
    uint32_t n_accepted = 0;
    int32_t generated = 0;
    uint32_t n_pending = 0;
    uint32_t flags = 0;
    uint32_t reserved = 0;
    uint64_t n_state = 0;
};

template <typename T> void put(std::string & out, const T & v) {
    out.append(reinterpret_cast<const char *>(&v), sizeof v);
}
template <typename T> T get_at(const unsigned char * p, size_t offset) {
    T v;
    std::memcpy(&v, p + offset, sizeof v);
    return v;
}

std::string encode_header(const SlotHeader & h) {
    std::string out(kSlotMagic, sizeof kSlotMagic);
    put(out, h.model_id);
    put(out, h.n_vocab);
    put(out, h.n_ctx);
    put(out, h.n_history);
    put(out, h.n_accepted);
    put(out, h.generated);
    put(out, h.n_pending);
    put(out, h.flags);
    put(out, h.reserved);
    put(out, h.n_state);
    return out;
}

SlotHeader decode_header(const unsigned char * p) {
    SlotHeader h;
    h.model_id = get_at<uint64_t>(p, 8);
    h.n_vocab = get_at<uint32_t>(p, 16);
    h.n_ctx = get_at<uint32_t>(p, 20);
    h.n_history = get_at<uint32_t>(p, 24);
    h.n_accepted = get_at<uint32_t>(p, 28);
    h.generated = get_at<int32_t>(p, 32);
    h.n_pending = get_at<uint32_t>(p, 36);
    h.flags = get_at<uint32_t>(p, 40);
    h.reserved = get_at<uint32_t>(p, 44);
    h.n_state = get_at<uint64_t>(p, 48);
    return h;
}

// a + b, false on overflow.
bool add_size(uint64_t & acc, uint64_t b) {
    if (acc > UINT64_MAX - b) return false;
    acc += b;
    return true;
}

// read(2) until n bytes or EOF; the count read, or -1 with errno.
ssize_t read_fully(int fd, void * dst, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t got = ::read(fd, static_cast<char *>(dst) + done, n - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) break;
        done += static_cast<size_t>(got);
    }
    return static_cast<ssize_t>(done);
}

bool write_fully(int fd, const char * data, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t put = ::write(fd, data + done, n - done);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return false;
        done += static_cast<size_t>(put);
    }
    return true;
}

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    Fd(const Fd &) = delete;
    Fd & operator=(const Fd &) = delete;
    int get() const { return fd_; }
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }

private:
    int fd_;
};


}  // namespace

namespace eliza {

bool validate_config(const eliza_llm_stream_config_t & cfg, std::string & message) {
    const struct {
        const char * name;
        float value;
        const char * meaning;
    } floats[] = {
        {"temperature", cfg.temperature, "<= 0 for greedy"},
        {"top_p", cfg.top_p, "in (0, 1), or <= 0 / >= 1 for off"},
        {"repeat_penalty", cfg.repeat_penalty, "1.0 or <= 0 for off"},
    };
    for (const auto & f : floats) {
        if (!std::isfinite(f.value)) {
            message = std::string("cfg->") + f.name + " is " + (std::isnan(f.value) ? "NaN" : "infinite") +
                      "; pass a finite number (" + f.meaning + ")";
            return false;
        }
    }
    if (cfg.draft_min < 0 || cfg.draft_max < 0) {
        message = std::string("cfg->") + (cfg.draft_min < 0 ? "draft_min" : "draft_max") + " is " +
                  std::to_string(cfg.draft_min < 0 ? cfg.draft_min : cfg.draft_max) + "; pass 0 or more";
        return false;
    }
    if (cfg.draft_max > 0 && cfg.draft_min > cfg.draft_max) {
        message = "cfg->draft_min " + std::to_string(cfg.draft_min) + " is above cfg->draft_max " +
                  std::to_string(cfg.draft_max);
        return false;
    }
    return true;
}

}  // namespace eliza

LlamaStream::LlamaStream(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg)
    : ctx_(ctx), cfg_(cfg) {
    // Strings in the config belong to the caller; this path keeps none of them.
    cfg_.prompt_cache_key = nullptr;
    cfg_.mtp_drafter_path = nullptr;
    cfg_.gbnf_grammar = nullptr;
}

LlamaStream::~LlamaStream() {
    set_active(false);
    if (poisoned_) {
        // See poison(): freeing could hang on workers stuck in a half-run graph.
        (void) lctx_.release();
        (void) pool_.release();
        if (drafter_) drafter_->poison();
    }
    if (verify_batch_.token != nullptr) llama_batch_free(verify_batch_);
}

void LlamaStream::set_active(bool active) {
    if (active == active_) return;
    active_ = active;
    if (active) {
        eliza::ThreadBudget::instance().enter();
    } else {
        eliza::ThreadBudget::instance().leave();
    }
}

void LlamaStream::shutdown() {
    set_active(false);
    if (poisoned_) return;  // the destructor leaks them
    sampler_.reset();
    if (drafter_) drafter_->shutdown();  // before the pool it may use
    if (llama_context * c = lctx_.release()) llama_free(c);
    if (ggml_threadpool * p = pool_.release()) ggml_threadpool_free(p);
}

std::unique_ptr<LlamaStream> LlamaStream::open(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg,
                                               int & code, std::string & message) {
    code = ELIZA_ERR_INVALID_ARG;
    if (!eliza::validate_config(cfg, message)) {
        return nullptr;
    }
    const bool with_drafter = cfg.mtp_drafter_path != nullptr && cfg.mtp_drafter_path[0] != '\0';
    if (with_drafter && !LlamaDrafter::check_config(cfg, code, message)) {
        return nullptr;
    }
    if (cfg.gbnf_grammar != nullptr && cfg.gbnf_grammar[0] != '\0') {
        code = ELIZA_ERR_NOT_IMPLEMENTED;
        message = "gbnf_grammar is set but grammar-constrained sampling is not implemented in this build";
        return nullptr;
    }
    std::unique_ptr<LlamaStream> stream(new LlamaStream(ctx, cfg));

    // The stream's decode threads start here, once: a decode never starts a thread.
    stream->pool_threads_ = std::max(1, static_cast<int>(ctx.limits.n_threads));
    if (stream->pool_threads_ > 1) {
        std::string why;
        if (!probe_threads(stream->pool_threads_ - 1, why)) {
            code = ELIZA_ERR_OOM;
            message = "cannot start the stream's " + std::to_string(stream->pool_threads_ - 1) +
                      " decode worker threads: " + why + "; lower ELIZA_N_THREADS or free memory/threads";
            return nullptr;
        }
        ggml_threadpool_params tpp = ggml_threadpool_params_default(stream->pool_threads_);
        tpp.poll = 0;  // idle workers sleep instead of spinning: streams share the cores
        stream->pool_.reset(ggml_threadpool_new(&tpp));
        if (!stream->pool_) {
            code = ELIZA_ERR_OOM;
            message = "cannot create a thread pool of " + std::to_string(stream->pool_threads_) + " threads" +
                      eliza::with_llama_cause();
            return nullptr;
        }
    }

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = ctx.limits.n_ctx;
    cparams.n_batch = std::min<uint32_t>(ctx.limits.n_ctx, 512);
    cparams.n_ubatch = cparams.n_batch;
    cparams.n_seq_max = 1;
    cparams.n_threads = stream->pool_threads_;
    cparams.n_threads_batch = stream->pool_threads_;
    cparams.no_perf = true;
    cparams.abort_callback = abort_requested;
    cparams.abort_callback_data = &stream->cancelled_;
    stream->lctx_.reset(llama_init_from_model(ctx.model.get(), cparams));
    if (!stream->lctx_) {
        code = eliza::ggml_fatal_in_call() ? ELIZA_ERR_FFI_FAULT : ELIZA_ERR_OOM;
        const std::string why = eliza::llama_error_chain();
        message = "cannot create a llama context of " + std::to_string(cparams.n_ctx) + " tokens" +
                  (why.empty() ? std::string() : ": " + why);
        return nullptr;
    }
    if (stream->pool_) {
        llama_attach_threadpool(stream->lctx_.get(), stream->pool_.get(), stream->pool_.get());
    }
    stream->attached_threads_ = stream->pool_threads_;
    if (with_drafter) {
        stream->drafter_ = LlamaDrafter::open(ctx, cfg, cparams.n_ctx, cparams.n_batch, stream->pool_threads_,
                                              &stream->cancelled_, code, message);
        if (!stream->drafter_) {
            return nullptr;
        }
        if (stream->pool_) {
            llama_attach_threadpool(stream->drafter_->lctx(), stream->pool_.get(), stream->pool_.get());
        }
        stream->verify_batch_ = llama_batch_init(static_cast<int32_t>(cparams.n_batch), 0, 1);
    }
    stream->sampler_ = stream->make_sampler(message);
    if (!stream->sampler_) {
        code = ELIZA_ERR_OOM;
        return nullptr;
    }
    code = ELIZA_OK;
    return stream;
}

SamplerPtr LlamaStream::make_sampler(std::string & message) const {
    return eliza::make_sampler_chain(cfg_, ctx_.n_vocab, message);
}

size_t LlamaStream::text_bytes_needed() const { return ctx_.max_piece_bytes + 3 + 1; }

void LlamaStream::cancel() {
    cancelled_.store(true);
    eliza::ThreadBudget::instance().wake();  // a decode waiting for threads gives up
}

int LlamaStream::decode(const llama_token * tokens, size_t n, std::string & message) {
    logits_row_ = -1;
    return decode_on(lctx_.get(), attached_threads_, "llama_decode", tokens, n, false, 0, message);
}

int LlamaStream::decode_on(llama_context * c, int & attached, const char * what, const llama_token * tokens,
                           size_t n, bool all_logits, llama_pos pos0, std::string & message) {
    BudgetLease lease(pool_threads_, cancelled_);
    if (lease.granted() == 0) {
        message = "generation was cancelled";
        return ELIZA_ERR_CANCELLED;
    }
    const int threads = lease.granted();
    if (threads != attached) {
        llama_set_n_threads(c, threads, threads);
        // One thread needs no pool: detached, ggml computes on the calling thread and the
        // pool's workers stay asleep.
        if (threads == 1) {
            llama_detach_threadpool(c);
        } else if (pool_) {
            llama_attach_threadpool(c, pool_.get(), pool_.get());
        }
        attached = threads;
    }
    const size_t n_batch = llama_n_batch(c);
    for (size_t done = 0; done < n;) {
        const size_t chunk = std::min(n_batch, n - done);
        llama_batch batch = llama_batch_get_one(const_cast<llama_token *>(tokens + done), static_cast<int32_t>(chunk));
        if (all_logits) {
            // The caller keeps n within one batch (verify_batch_ holds n_batch tokens).
            verify_batch_.n_tokens = static_cast<int32_t>(chunk);
            for (size_t i = 0; i < chunk; ++i) {
                verify_batch_.token[i] = tokens[i];
                verify_batch_.pos[i] = pos0 + static_cast<llama_pos>(i);
                verify_batch_.n_seq_id[i] = 1;
                verify_batch_.seq_id[i][0] = 0;
                verify_batch_.logits[i] = 1;
            }
            batch = verify_batch_;
        }
        const int32_t rc = llama_decode(c, batch);
        if (rc == 2 || cancelled_.load()) {
            message = "generation was cancelled";
            return ELIZA_ERR_CANCELLED;
        }
        if (rc != 0 && eliza::ggml_fatal_in_call()) {
            // llama.cpp caught the hook's exception; the pool may be stuck all the same.
            poisoned_ = true;
            message = std::string(what) + " hit a llama.cpp/ggml fatal error: " + eliza::llama_error_chain();
            return ELIZA_ERR_FFI_FAULT;
        }
        if (rc != 0) {
            const std::string why = eliza::llama_error_chain();
            message = std::string(what) + " failed with " + std::to_string(rc) +
                      (why.empty() ? std::string() : ": " + why);
            return rc == 1 ? ELIZA_ERR_OOM : ELIZA_ERR_FFI_FAULT;
        }
        done += chunk;
    }
    return ELIZA_OK;
}

void LlamaStream::roll_back(size_t keep, std::string & message) {
    set_active(false);  // a prefill must come next
    if (llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(keep), -1)) {
        // The cache holds the first keep tokens again; the logits of the last one went with
        // the failed evaluation, so a prefill must come before the next step.
        history_.resize(keep);
        restored_logits_.clear();
        have_logits_ = false;
        finished_ = false;
        if (drafter_) drafter_->keep(keep);
        return;
    }
    clear_state();
    message += "; the cache could not be rolled back to " + std::to_string(keep) + " tokens, so the stream was reset";
}

int LlamaStream::prefill(const int32_t * token_ids, size_t n, std::string & message) {
    if (cancelled_.load()) {
        message = "stream was cancelled; call _reset or _reset_keep before reusing it";
        return ELIZA_ERR_CANCELLED;
    }
    if (n == 0) {
        message = "empty prefill: pass at least one token";
        return ELIZA_ERR_INVALID_ARG;
    }
    if (token_ids == nullptr) {
        message = "token_ids is NULL";
        return ELIZA_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < n; ++i) {
        if (token_ids[i] < 0 || token_ids[i] >= ctx_.n_vocab) {
            message = "token_ids[" + std::to_string(i) + "] = " + std::to_string(token_ids[i]) +
                      " is outside the vocabulary [0, " + std::to_string(ctx_.n_vocab) + ")";
            return ELIZA_ERR_INVALID_ARG;
        }
    }
    const size_t n_ctx = llama_n_ctx(lctx_.get());
    if (n > n_ctx || history_.size() > n_ctx - n) {
        message = "prefill of " + std::to_string(n) + " tokens after " + std::to_string(history_.size()) +
                  " exceeds the context size " + std::to_string(n_ctx) + " (override with ELIZA_N_CTX)";
        return ELIZA_ERR_INVALID_ARG;
    }
    history_.reserve(history_.size() + n);  // the only allocation: before anything changes
    const size_t before = history_.size();
    set_active(true);
    const int rc = decode(token_ids, n, message);
    if (rc != ELIZA_OK) {
        roll_back(before, message);
        return rc;
    }
    history_.insert(history_.end(), token_ids, token_ids + n);
    restored_logits_.clear();
    logits_row_ = -1;
    if (drafter_) drafter_->backoff().reset();  // new input: the next step drafts again
    have_logits_ = true;
    finished_ = false;
    generated_ = 0;
    return ELIZA_OK;
}

llama_token LlamaStream::choose(const float * logits) {
    candidates_.resize(static_cast<size_t>(ctx_.n_vocab));
    for (llama_token t = 0; t < ctx_.n_vocab; ++t) {
        candidates_[static_cast<size_t>(t)] = llama_token_data{t, logits[t], 0.0f};
    }
    llama_token_data_array arr{candidates_.data(), candidates_.size(), -1, false};
    llama_sampler_apply(sampler_.get(), &arr);
    if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
    return arr.data[arr.selected].id;
}

void LlamaStream::accept(llama_token token) {
    if (accepted_.size() == static_cast<size_t>(kPenaltyLastN)) {
        accepted_.erase(accepted_.begin());
    }
    accepted_.push_back(token);
    llama_sampler_accept(sampler_.get(), token);
}

std::string LlamaStream::take_complete_utf8(const std::string & piece, bool flush) {
    return eliza::take_complete_utf8(pending_, piece, flush);
}

int LlamaStream::finish_step(const StepBuffers & out, const std::string & text, size_t n_tokens, int result) {
    std::memcpy(out.text_out, text.data(), text.size());
    out.text_out[text.size()] = '\0';
    *out.num_tokens_out = n_tokens;
    return result;
}

int LlamaStream::next(const StepBuffers & out, std::string & message) {
    if (cancelled_.load()) {
        message = "generation was cancelled";
        return ELIZA_ERR_CANCELLED;
    }
    if (out.tokens_cap == 0) {
        message = "tokens_cap is 0: pass room for at least one token";
        return ELIZA_ERR_INVALID_ARG;
    }
    if (out.text_cap < text_bytes_needed()) {
        message = "text_cap " + std::to_string(out.text_cap) + " is too small: one step needs up to " +
                  std::to_string(text_bytes_needed()) + " bytes";
        return ELIZA_ERR_INVALID_ARG;
    }
    if (finished_) {
        return finish_step(out, take_complete_utf8("", true), 0, 1);
    }
    if (!have_logits_) {
        message = "nothing to continue from: call _prefill first";
        return ELIZA_ERR_INVALID_ARG;
    }
    const float * logits = next_logits();
    if (logits == nullptr) {
        message = "no logits available for the last token" + eliza::with_llama_cause();
        return ELIZA_ERR_FFI_FAULT;
    }
    // The sampler accepts the token only once the step has succeeded, so a failed decode
    // leaves its repeat-penalty history where the cache is.
    const llama_token token = choose(logits);
    if (token < 0) {
        message = "the sampler selected no token";
        return ELIZA_ERR_FFI_FAULT;
    }
    if (llama_vocab_is_eog(ctx_.vocab, token)) {
        accept(token);
        finished_ = true;
        set_active(false);
        return finish_step(out, take_complete_utf8("", true), 0, 1);
    }
    const std::string piece = eliza::token_piece(ctx_.vocab, token);
    const bool context_full = history_.size() + 1 > llama_n_ctx(lctx_.get());
    if (drafter_ && !context_full) {
        return speculative_step(out, token, piece, message);
    }
    if (!context_full) {
        history_.reserve(history_.size() + 1);
        const int rc = decode(&token, 1, message);
        if (rc != ELIZA_OK) {
            roll_back(history_.size(), message);
            return rc;
        }
        history_.push_back(token);
        restored_logits_.clear();
    }
    accept(token);
    ++generated_;
    const bool at_max = cfg_.max_tokens > 0 && generated_ >= cfg_.max_tokens;
    finished_ = context_full || at_max;
    if (context_full) {
        have_logits_ = false;  // the last token is not in the cache: a prefill must come next
    }
    if (finished_) {
        set_active(false);
    }
    out.tokens_out[0] = token;
    return finish_step(out, take_complete_utf8(piece, finished_), 1, finished_ ? 1 : 0);
}

const float * LlamaStream::next_logits() {
    return restored_logits_.empty() ? llama_get_logits_ith(lctx_.get(), logits_row_) : restored_logits_.data();
}

int LlamaStream::drafter_catch_up(llama_token first, std::string & message) {
    LlamaDrafter & d = *drafter_;
    if (d.n_past() > history_.size()) d.keep(history_.size());
    std::vector<llama_token> missing(history_.begin() + static_cast<std::ptrdiff_t>(d.n_past()), history_.end());
    missing.push_back(first);
    const int rc = decode_on(d.lctx(), d.attached_threads(), "llama_decode (draft model)", missing.data(),
                             missing.size(), false, 0, message);
    if (rc != ELIZA_OK) {
        if (poisoned_) d.poison();
        d.keep(d.n_past());  // drop whatever the failed evaluation left
        return rc;
    }
    d.set_n_past(history_.size() + 1);
    return ELIZA_OK;
}

// Speculative step (greedy only). `first` is the text model's choice from the current
// logits. The drafter proposes d1..dn after it; the text model evaluates [first, d1..dn] in
// one batch, which gives its own choice after every prefix. d_i is accepted while it equals
// that choice, so the step emits first + the agreeing prefix d1..dk: exactly the tokens
// plain greedy decoding would emit, and the logits after dk (row k of the batch) choose the
// next step's first token, the text model's own correction. Positions of d_{k+1}..dn are
// removed from both caches. Whether a step drafts, and how far, adapts to the drafter
// (DraftBackoff, LlamaDrafter::propose); the emitted tokens never depend on it.
int LlamaStream::speculative_step(const StepBuffers & out, llama_token first, const std::string & first_piece,
                                  std::string & message) {
    LlamaDrafter & d = *drafter_;
    const size_t n_ctx = llama_n_ctx(lctx_.get());
    // The draft length: at most draft_max, and only what the step can still emit: the caller's
    // token and text buffers, the context, max_tokens and one batch, each after `first`.
    size_t room = static_cast<size_t>(d.draft_max());
    room = std::min(room, out.tokens_cap - 1);
    room = std::min(room, n_ctx - history_.size() - 1);
    room = std::min(room, static_cast<size_t>(llama_n_batch(lctx_.get())) - 1);
    if (cfg_.max_tokens > 0) {
        room = std::min(room, static_cast<size_t>(std::max(0, cfg_.max_tokens - generated_ - 1)));
    }
    // text_cap holds pending + every emitted piece + NUL; `first` fits by the caller's check.
    size_t text_room = out.text_cap - 1 - pending_.size() - first_piece.size();

    std::vector<llama_token> step{first};
    std::vector<std::string> pieces{first_piece};
    // A step drafts only when at least max(draft_min, 1) tokens can be drafted and the
    // backoff does not skip it; the draft stops before a token the drafter is not sure of
    // (p_min) and at EOS; a draft shorter than draft_min (the drafter chose EOS or was
    // unsure, or the text ran out of room) is dropped and the step is a plain one.
    const size_t want_min = static_cast<size_t>(std::max(1, d.draft_min()));
    const bool drafting = room >= want_min && d.backoff().should_draft();
    if (drafting) {
        int rc = drafter_catch_up(first, message);
        if (rc != ELIZA_OK) return rc;
        for (size_t i = 0; i < room; ++i) {
            const LlamaDrafter::Proposal p = d.propose();
            const llama_token t = p.token;
            if (t < 0 || !p.confident || llama_vocab_is_eog(ctx_.vocab, t)) break;
            std::string piece = eliza::token_piece(ctx_.vocab, t);
            if (piece.size() > text_room) break;
            text_room -= piece.size();
            step.push_back(t);
            pieces.push_back(std::move(piece));
            if (i + 1 == room) break;
            rc = decode_on(d.lctx(), d.attached_threads(), "llama_decode (draft model)", &t, 1, false, 0, message);
            if (rc != ELIZA_OK) {
                if (poisoned_) d.poison();
                d.keep(history_.size());
                return rc;
            }
            d.set_n_past(d.n_past() + 1);
        }
        if (step.size() - 1 < static_cast<size_t>(d.draft_min())) {
            step.resize(1);
            pieces.resize(1);
        }
    }
    const size_t drafted = step.size() - 1;

    const size_t before = history_.size();
    history_.reserve(before + step.size());
    const int rc = decode_on(lctx_.get(), attached_threads_, "llama_decode", step.data(), step.size(), drafted > 0,
                             static_cast<llama_pos>(before), message);
    if (rc != ELIZA_OK) {
        logits_row_ = -1;
        roll_back(before, message);
        return rc;
    }
    // Each draft token is compared with the text model's choice after the tokens before it,
    // the sampler (its repeat-penalty history) accepting the emitted tokens in order.
    accept(first);
    size_t accepted = 0;
    std::string text = first_piece;
    while (accepted < drafted) {
        const float * logits = llama_get_logits_ith(lctx_.get(), static_cast<int32_t>(accepted));
        if (logits == nullptr || choose(logits) != step[accepted + 1]) break;
        ++accepted;
        accept(step[accepted]);
        text += pieces[accepted];
    }
    const size_t emitted = 1 + accepted;
    if (emitted < step.size() &&
        !llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(before + emitted), -1)) {
        // Only a cache without partial removal (recurrent state) refuses; nothing of the
        // step can be kept, so the stream starts over.
        clear_state();
        message = "llama_memory_seq_rm cannot remove rejected draft positions from this model's cache; the stream was "
                  "reset (speculative decoding needs a model whose cache can drop a suffix)";
        return ELIZA_ERR_FFI_FAULT;
    }
    history_.insert(history_.end(), step.begin(), step.begin() + static_cast<std::ptrdiff_t>(emitted));
    d.keep(history_.size());
    if (drafting) d.backoff().record(accepted > 0);
    restored_logits_.clear();
    logits_row_ = drafted > 0 ? static_cast<int32_t>(accepted) : -1;
    generated_ += static_cast<int32_t>(emitted);
    const bool at_max = cfg_.max_tokens > 0 && generated_ >= cfg_.max_tokens;
    finished_ = at_max;
    if (finished_) {
        set_active(false);
    }
    std::copy(step.begin(), step.begin() + static_cast<std::ptrdiff_t>(emitted), out.tokens_out);
    if (out.drafted_out) *out.drafted_out = static_cast<int32_t>(drafted);
    if (out.accepted_out) *out.accepted_out = static_cast<int32_t>(accepted);
    return finish_step(out, take_complete_utf8(text, finished_), emitted, finished_ ? 1 : 0);
}

void LlamaStream::clear_state() {
    set_active(false);
    llama_memory_clear(llama_get_memory(lctx_.get()), true);
    if (drafter_) {
        drafter_->clear();
        drafter_->backoff().reset();
    }
    llama_sampler_reset(sampler_.get());
    accepted_.clear();
    history_.clear();
    restored_logits_.clear();
    pending_.clear();
    logits_row_ = -1;
    generated_ = 0;
    have_logits_ = false;
    finished_ = false;
}

int LlamaStream::reset() {
    clear_state();
    cancelled_.store(false);
    return ELIZA_OK;
}

int LlamaStream::reset_keep(int32_t n_keep) {
    const size_t keep = std::min<size_t>(n_keep > 0 ? static_cast<size_t>(n_keep) : 0, history_.size());
    if (keep == 0 || !llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(keep), -1)) {
        return reset();
    }
    set_active(false);
    history_.resize(keep);
    if (drafter_) {
        drafter_->keep(keep);
        drafter_->backoff().reset();
    }
    llama_sampler_reset(sampler_.get());
    accepted_.clear();
    restored_logits_.clear();
    pending_.clear();
    generated_ = 0;
    have_logits_ = false;  // the kept prefix's last logits are gone; the next prefill brings new ones
    finished_ = false;
    cancelled_.store(false);
    return static_cast<int>(keep);
}

uint64_t LlamaStream::max_state_bytes() const {
    // A sanity bound on llama.cpp's sequence state for a full context: per token and
    // layer 8 rows of n_embd floats (K and V with generous head-size and type headroom),
    // plus 16 MiB for headers and recurrent state.
    const uint64_t n_ctx = llama_n_ctx(lctx_.get());
    const uint64_t n_layer = static_cast<uint64_t>(std::max(1, llama_model_n_layer(ctx_.model.get())));
    const uint64_t n_embd = static_cast<uint64_t>(std::max(1, llama_model_n_embd(ctx_.model.get())));
    return (n_ctx + 1) * n_layer * n_embd * 8 * sizeof(float) + (16ull << 20);
}

int LlamaStream::save_slot(const char * filename, std::string & message) {
    if (filename == nullptr || filename[0] == '\0') {
        message = "filename is NULL or empty";
        return ELIZA_ERR_INVALID_ARG;
    }
    if (cancelled_.load()) {
        message = "stream was cancelled; its state is not worth saving (reset it first)";
        return ELIZA_ERR_CANCELLED;
    }
    const float * logits = nullptr;
    if (have_logits_) {
        logits = next_logits();
        if (logits == nullptr) {
            message = "no logits available for the last token" + eliza::with_llama_cause();
            return ELIZA_ERR_FFI_FAULT;
        }
    }
    const size_t state_size = llama_state_seq_get_size(lctx_.get(), 0);
    std::string state(state_size, '\0');
    if (state_size == 0 ||
        llama_state_seq_get_data(lctx_.get(), reinterpret_cast<uint8_t *>(state.data()), state_size, 0) != state_size) {
        message = "cannot read the stream's cache state" + eliza::with_llama_cause();
        return ELIZA_ERR_FFI_FAULT;
    }
    SlotHeader h;
    h.model_id = ctx_.model_id;
    h.n_vocab = static_cast<uint32_t>(ctx_.n_vocab);
    h.n_ctx = llama_n_ctx(lctx_.get());
    h.n_history = static_cast<uint32_t>(history_.size());
    h.n_accepted = static_cast<uint32_t>(accepted_.size());
    h.generated = generated_;
    h.n_pending = static_cast<uint32_t>(pending_.size());
    h.flags = (logits != nullptr ? kFlagHaveLogits : 0u) | (finished_ ? kFlagFinished : 0u);
    h.n_state = state.size();
    std::string blob = encode_header(h);
    blob.append(reinterpret_cast<const char *>(history_.data()), history_.size() * sizeof(llama_token));
    blob.append(reinterpret_cast<const char *>(accepted_.data()), accepted_.size() * sizeof(llama_token));
    blob += pending_;
    if (logits != nullptr) {
        blob.append(reinterpret_cast<const char *>(logits), static_cast<size_t>(ctx_.n_vocab) * sizeof(float));
    }
    blob += state;
    put(blob, eliza::Xxh64::of(blob.data(), blob.size()));

    // A private temporary name per save, so two streams saving to one path never mix bytes;
    // written, flushed to disk, then renamed into place.
    static std::atomic<unsigned> counter{0};
    const std::string tmp = std::string(filename) + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter.fetch_add(1));
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
        message = "cannot create slot file '" + tmp + "': " + std::strerror(errno);
        return ELIZA_ERR_INVALID_ARG;
    }
    const bool written = write_fully(fd.get(), blob.data(), blob.size()) && ::fsync(fd.get()) == 0;
    const int write_errno = errno;
    const bool closed = ::close(fd.release()) == 0;
    if (!written || !closed) {
        std::remove(tmp.c_str());
        message = "cannot write slot file '" + tmp + "': " + std::strerror(written ? errno : write_errno);
        return ELIZA_ERR_INVALID_ARG;
    }
    if (std::rename(tmp.c_str(), filename) != 0) {
        const int rename_errno = errno;
        std::remove(tmp.c_str());
        message = "cannot move slot file into place at '" + std::string(filename) + "': " + std::strerror(rename_errno);
        return ELIZA_ERR_INVALID_ARG;
    }
    return ELIZA_OK;
}

int LlamaStream::restore_slot(const char * filename, std::string & message) {
    if (filename == nullptr || filename[0] == '\0') {
        message = "filename is NULL or empty";
        return ELIZA_ERR_INVALID_ARG;
    }
    // Nothing of the stream changes until the file has passed every check and llama.cpp
    // has taken its cache state; a rejected file leaves the stream as it was.
    const std::string bad = "slot file '" + std::string(filename) + "' ";
    auto reject = [&](const std::string & why) {
        message = bad + why;
        return ELIZA_ERR_INVALID_ARG;
    };
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    Fd fd(::open(filename, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (fd.get() < 0) {
        return reject(std::string("cannot be opened: ") + std::strerror(errno));
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
        return reject(std::string("cannot be examined: ") + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return reject("is not a regular file");
    }
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);

    unsigned char head[kSlotHeaderBytes];
    const ssize_t got = read_fully(fd.get(), head, sizeof head);
    if (got < 0) {
        return reject(std::string("cannot be read: ") + std::strerror(errno));
    }
    if (static_cast<size_t>(got) < sizeof kSlotMagic || std::memcmp(head, kSlotMagic, sizeof kSlotMagic) != 0) {
        if (static_cast<size_t>(got) >= sizeof kSlotMagicV1 && std::memcmp(head, kSlotMagicV1, sizeof kSlotMagicV1) == 0) {
            return reject("has the format of an older library (ELZSLOT1); save the state again with this one");
        }
        return reject("is not an eliza slot file (bad magic)");
    }
    if (static_cast<size_t>(got) < sizeof head) {
        return reject("is corrupt: truncated inside its header");
    }
    const SlotHeader h = decode_header(head);
    const uint32_t n_ctx = llama_n_ctx(lctx_.get());
    if (h.model_id != ctx_.model_id) {
        return reject("was written by another model (its model content hash differs from this context's)");
    }
    if (h.n_vocab != static_cast<uint32_t>(ctx_.n_vocab)) {
        return reject("was written by another model (vocabulary of " + std::to_string(h.n_vocab) + " tokens, not " +
                      std::to_string(ctx_.n_vocab) + ")");
    }
    if (h.n_ctx != n_ctx) {
        return reject("was saved from a context of " + std::to_string(h.n_ctx) + " tokens; this stream's holds " +
                      std::to_string(n_ctx) + " (see ELIZA_N_CTX)");
    }
    if (h.n_history > n_ctx) {
        return reject("is corrupt: it holds " + std::to_string(h.n_history) + " tokens, more than its context size " +
                      std::to_string(n_ctx));
    }
    if (h.n_accepted > static_cast<uint32_t>(kPenaltyLastN)) {
        return reject("is corrupt: " + std::to_string(h.n_accepted) + " sampler tokens, more than the " +
                      std::to_string(kPenaltyLastN) + " a slot keeps");
    }
    if (h.n_pending > 3) {
        return reject("is corrupt: " + std::to_string(h.n_pending) + " held-back text bytes, more than 3");
    }
    if ((h.flags & ~(kFlagHaveLogits | kFlagFinished)) != 0 || h.reserved != 0) {
        return reject("is corrupt: unknown flags in its header");
    }
    const bool have_logits = (h.flags & kFlagHaveLogits) != 0;
    if (have_logits && h.n_history == 0) {
        return reject("is corrupt: it holds logits but no tokens");
    }
    if (h.generated < 0 || static_cast<uint64_t>(h.generated) > static_cast<uint64_t>(h.n_history) + 1) {
        return reject("is corrupt: " + std::to_string(h.generated) + " generated tokens with " +
                      std::to_string(h.n_history) + " tokens held");
    }
    const uint64_t state_bound = max_state_bytes();
    if (h.n_state == 0 || h.n_state > state_bound) {
        return reject("is corrupt: a cache state of " + std::to_string(h.n_state) + " bytes (this context's bound is " +
                      std::to_string(state_bound) + ")");
    }
    // Every term is bounded above, so the sum cannot overflow; checked all the same.
    uint64_t expected = kSlotHeaderBytes;
    const bool sized = add_size(expected, uint64_t{h.n_history} * sizeof(llama_token)) &&
                       add_size(expected, uint64_t{h.n_accepted} * sizeof(llama_token)) &&
                       add_size(expected, h.n_pending) &&
                       add_size(expected, have_logits ? uint64_t{h.n_vocab} * sizeof(float) : 0) &&
                       add_size(expected, h.n_state) && add_size(expected, sizeof(uint64_t));
    if (!sized || expected != file_size) {
        return reject("is corrupt: " + std::to_string(file_size) + " bytes where its header describes " +
                      (sized ? std::to_string(expected) : std::string("more than 2^64")) +
                      " (truncated or extended)");
    }

    if (file_size - kSlotHeaderBytes > static_cast<uint64_t>(SIZE_MAX)) {
        return reject("is too large for this platform's address space");
    }
    std::string body(static_cast<size_t>(file_size - kSlotHeaderBytes), '\0');
    const ssize_t body_got = read_fully(fd.get(), body.data(), body.size());
    if (body_got < 0) {
        return reject(std::string("cannot be read: ") + std::strerror(errno));
    }
    char extra;
    if (static_cast<size_t>(body_got) != body.size() || read_fully(fd.get(), &extra, 1) != 0) {
        return reject("changed size while it was read");
    }
    eliza::Xxh64 sum;
    sum.update(head, sizeof head);
    sum.update(body.data(), body.size() - sizeof(uint64_t));
    uint64_t stored_sum = 0;
    std::memcpy(&stored_sum, body.data() + body.size() - sizeof(uint64_t), sizeof stored_sum);
    if (sum.digest() != stored_sum) {
        return reject("is corrupt (checksum mismatch)");
    }

    const unsigned char * p = reinterpret_cast<const unsigned char *>(body.data());
    std::vector<llama_token> history(h.n_history);
    // memcpy with an empty vector's null data() is undefined even for 0 bytes (UBSan).
    if (!history.empty()) std::memcpy(history.data(), p, history.size() * sizeof(llama_token));
    p += history.size() * sizeof(llama_token);
    std::vector<llama_token> accepted(h.n_accepted);
    if (!accepted.empty()) std::memcpy(accepted.data(), p, accepted.size() * sizeof(llama_token));
    p += accepted.size() * sizeof(llama_token);
    std::string pending(reinterpret_cast<const char *>(p), h.n_pending);
    p += h.n_pending;
    std::vector<float> logits;
    if (have_logits) {
        logits.resize(h.n_vocab);
        if (!logits.empty()) std::memcpy(logits.data(), p, logits.size() * sizeof(float));
        p += logits.size() * sizeof(float);
    }
    const uint8_t * state = p;

    for (const std::vector<llama_token> * list : {&history, &accepted}) {
        for (llama_token t : *list) {
            if (t < 0 || t >= ctx_.n_vocab) {
                return reject("is corrupt: token id " + std::to_string(t) + " is outside the vocabulary");
            }
        }
    }
    if (!valid_pending(pending)) {
        return reject("is corrupt: its held-back text bytes are not the start of a UTF-8 character");
    }
    for (float v : logits) {
        if (!std::isfinite(v)) {
            return reject("is corrupt: its logits hold NaN or infinite values");
        }
    }
    SamplerPtr sampler = make_sampler(message);
    if (!sampler) {
        return ELIZA_ERR_OOM;
    }
    for (llama_token t : accepted) {
        llama_sampler_accept(sampler.get(), t);
    }

    // Load the cache state, keeping the current one to put back if llama.cpp refuses the
    // new one or it does not hold exactly the saved tokens.
    llama_memory_t mem = llama_get_memory(lctx_.get());
    std::string previous;
    if (llama_memory_seq_pos_max(mem, 0) >= 0) {
        previous.resize(llama_state_seq_get_size(lctx_.get(), 0));
    }
    if (!previous.empty() &&
        llama_state_seq_get_data(lctx_.get(), reinterpret_cast<uint8_t *>(previous.data()), previous.size(), 0) !=
            previous.size()) {
        message = "cannot keep the stream's current cache state while restoring" + eliza::with_llama_cause();
        return ELIZA_ERR_FFI_FAULT;
    }
    auto put_back = [&](const std::string & why) {
        llama_memory_seq_rm(mem, 0, -1, -1);
        if (previous.empty() ||
            llama_state_seq_set_data(lctx_.get(), reinterpret_cast<const uint8_t *>(previous.data()), previous.size(),
                                     0) != 0) {
            return reject(why);
        }
        clear_state();
        return reject(why + "; the stream's previous cache could not be put back, so it was reset");
    };
    llama_memory_seq_rm(mem, 0, -1, -1);  // an empty saved state would otherwise leave the old cells
    if (llama_state_seq_set_data(lctx_.get(), state, static_cast<size_t>(h.n_state), 0) == 0) {
        return put_back("holds a cache state this context rejects" + eliza::with_llama_cause());
    }
    const llama_pos pos_min = llama_memory_seq_pos_min(mem, 0);
    const llama_pos pos_max = llama_memory_seq_pos_max(mem, 0);
    const bool matches = h.n_history == 0 ? pos_max == -1
                                          : pos_min == 0 && pos_max == static_cast<llama_pos>(h.n_history) - 1;
    if (!matches) {
        return put_back("is inconsistent: it lists " + std::to_string(h.n_history) +
                        " tokens but its cache state holds positions " + std::to_string(pos_min) + ".." +
                        std::to_string(pos_max));
    }

    sampler_ = std::move(sampler);
    // A slot file holds the text model's state only; the drafter's cache is rebuilt from
    // the restored tokens on the next step (it changes speed and stats, never the output).
    if (drafter_) {
        drafter_->clear();
        drafter_->backoff().reset();
    }
    accepted_ = std::move(accepted);
    history_ = std::move(history);
    restored_logits_ = std::move(logits);
    logits_row_ = -1;
    pending_ = std::move(pending);
    generated_ = h.generated;
    have_logits_ = have_logits;
    finished_ = (h.flags & kFlagFinished) != 0;
    cancelled_.store(false);
    set_active(have_logits_ && !finished_);
    return ELIZA_OK;
}
