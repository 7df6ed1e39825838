#include "llama_stream.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "status.h"

namespace {

bool abort_requested(void * data) { return static_cast<std::atomic<bool> *>(data)->load(); }

// Length of the UTF-8 sequence a lead byte starts; 0 for a continuation or invalid byte.
size_t utf8_sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 0;
}

// --- slot file -------------------------------------------------------------------------
// "ELZSLOT1", then little-endian fields, then a FNV-1a 64 checksum of everything before.
constexpr char kSlotMagic[8] = {'E', 'L', 'Z', 'S', 'L', 'O', 'T', '1'};

uint64_t fnv1a(const std::string & bytes) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

template <typename T> void put(std::string & out, const T & v) {
    out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

class Reader {
public:
    explicit Reader(const std::string & data) : data_(data) {}
    template <typename T> bool get(T & v) { return bytes(&v, sizeof v); }
    bool bytes(void * dst, size_t n) {
        if (n > data_.size() - pos_) return false;
        std::memcpy(dst, data_.data() + pos_, n);
        pos_ += n;
        return true;
    }
    size_t remaining() const { return data_.size() - pos_; }

private:
    const std::string & data_;
    size_t pos_ = 0;
};

}  // namespace

LlamaStream::LlamaStream(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg)
    : ctx_(ctx), cfg_(cfg) {
    // Strings in the config belong to the caller; this path keeps none of them.
    cfg_.prompt_cache_key = nullptr;
    cfg_.mtp_drafter_path = nullptr;
    cfg_.gbnf_grammar = nullptr;
}

std::unique_ptr<LlamaStream> LlamaStream::open(const EliInferenceContext & ctx, const eliza_llm_stream_config_t & cfg,
                                               int & code, std::string & message) {
    code = ELIZA_ERR_INVALID_ARG;
    if (cfg.mtp_drafter_path != nullptr && cfg.mtp_drafter_path[0] != '\0') {
        code = ELIZA_ERR_NOT_IMPLEMENTED;
        message = "mtp_drafter_path is set but speculative decoding is not implemented in this build";
        return nullptr;
    }
    if (cfg.gbnf_grammar != nullptr && cfg.gbnf_grammar[0] != '\0') {
        code = ELIZA_ERR_NOT_IMPLEMENTED;
        message = "gbnf_grammar is set but grammar-constrained sampling is not implemented in this build";
        return nullptr;
    }
    std::unique_ptr<LlamaStream> stream(new LlamaStream(ctx, cfg));

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = ctx.limits.n_ctx;
    cparams.n_batch = std::min<uint32_t>(ctx.limits.n_ctx, 512);
    cparams.n_ubatch = cparams.n_batch;
    cparams.n_seq_max = 1;
    cparams.n_threads = ctx.limits.n_threads;
    cparams.n_threads_batch = ctx.limits.n_threads;
    cparams.no_perf = true;
    cparams.abort_callback = abort_requested;
    cparams.abort_callback_data = &stream->cancelled_;
    eliza::clear_llama_error();
    stream->lctx_.reset(llama_init_from_model(ctx.model.get(), cparams));
    if (!stream->lctx_) {
        code = ELIZA_ERR_OOM;
        const std::string why = eliza::last_llama_error();
        message = "cannot create a llama context of " + std::to_string(cparams.n_ctx) + " tokens" +
                  (why.empty() ? std::string() : ": " + why);
        return nullptr;
    }
    if (!stream->build_sampler(message)) {
        return nullptr;
    }
    code = ELIZA_OK;
    return stream;
}

bool LlamaStream::build_sampler(std::string & message) {
    llama_sampler_chain_params sparams = llama_sampler_chain_default_params();
    sparams.no_perf = true;
    sampler_.reset(llama_sampler_chain_init(sparams));
    if (!sampler_) {
        message = "cannot create the sampler chain";
        return false;
    }
    llama_sampler * chain = sampler_.get();
    if (cfg_.repeat_penalty > 0.0f && cfg_.repeat_penalty != 1.0f) {
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(ctx_.n_vocab, 64, cfg_.repeat_penalty, 0.0f, 0.0f));
    }
    if (cfg_.temperature <= 0.0f) {
        llama_sampler_chain_add(chain, llama_sampler_init_greedy());
        return true;
    }
    if (cfg_.top_k > 0) {
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(cfg_.top_k));
    }
    if (cfg_.top_p > 0.0f && cfg_.top_p < 1.0f) {
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(cfg_.top_p, 1));
    }
    llama_sampler_chain_add(chain, llama_sampler_init_temp(cfg_.temperature));
    // Seeded from slot_id so sampled streams are reproducible too.
    const uint32_t seed = cfg_.slot_id >= 0 ? static_cast<uint32_t>(cfg_.slot_id) : 0u;
    llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
    return true;
}

size_t LlamaStream::text_bytes_needed() const { return ctx_.max_piece_bytes + 3 + 1; }

int LlamaStream::decode(const llama_token * tokens, size_t n, std::string & message) {
    const size_t n_batch = llama_n_batch(lctx_.get());
    for (size_t done = 0; done < n;) {
        const size_t chunk = std::min(n_batch, n - done);
        llama_batch batch = llama_batch_get_one(const_cast<llama_token *>(tokens + done), static_cast<int32_t>(chunk));
        eliza::clear_llama_error();
        const int32_t rc = llama_decode(lctx_.get(), batch);
        if (rc == 2 || cancelled_.load()) {
            message = "generation was cancelled";
            return ELIZA_ERR_CANCELLED;
        }
        if (rc != 0) {
            const std::string why = eliza::last_llama_error();
            message = "llama_decode failed with " + std::to_string(rc) + (why.empty() ? std::string() : ": " + why);
            return rc == 1 ? ELIZA_ERR_OOM : ELIZA_ERR_FFI_FAULT;
        }
        done += chunk;
    }
    return ELIZA_OK;
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
    if (history_.size() + n > n_ctx) {
        message = "prefill of " + std::to_string(n) + " tokens after " + std::to_string(history_.size()) +
                  " exceeds the context size " + std::to_string(n_ctx) + " (override with ELIZA_N_CTX)";
        return ELIZA_ERR_INVALID_ARG;
    }
    const size_t before = history_.size();
    const int rc = decode(token_ids, n, message);
    if (rc != ELIZA_OK) {
        // The cache goes back to what it held; the logits of its last token are gone with the
        // failed evaluation, so a prefill must come before the next step.
        llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(before), -1);
        restored_logits_.clear();
        have_logits_ = false;
        return rc;
    }
    history_.insert(history_.end(), token_ids, token_ids + n);
    restored_logits_.clear();
    have_logits_ = true;
    finished_ = false;
    generated_ = 0;
    return ELIZA_OK;
}

llama_token LlamaStream::sample(const float * logits) {
    candidates_.resize(static_cast<size_t>(ctx_.n_vocab));
    for (llama_token t = 0; t < ctx_.n_vocab; ++t) {
        candidates_[static_cast<size_t>(t)] = llama_token_data{t, logits[t], 0.0f};
    }
    llama_token_data_array arr{candidates_.data(), candidates_.size(), -1, false};
    llama_sampler_apply(sampler_.get(), &arr);
    const llama_token token = arr.data[arr.selected].id;
    llama_sampler_accept(sampler_.get(), token);
    accepted_.push_back(token);
    return token;
}

std::string LlamaStream::take_complete_utf8(const std::string & piece, bool flush) {
    std::string text = pending_ + piece;
    pending_.clear();
    if (flush) {
        return text;
    }
    // Hold back a tail that starts a multi-byte character and is still incomplete.
    const size_t look = std::min<size_t>(3, text.size());
    for (size_t back = 1; back <= look; ++back) {
        const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte: keep looking for the lead
        }
        const size_t want = utf8_sequence_length(c);
        if (want > back) {
            pending_ = text.substr(text.size() - back);
            text.resize(text.size() - back);
        }
        break;
    }
    return text;
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
    const float * logits =
        restored_logits_.empty() ? llama_get_logits_ith(lctx_.get(), -1) : restored_logits_.data();
    if (logits == nullptr) {
        message = "no logits available for the last token";
        return ELIZA_ERR_FFI_FAULT;
    }
    const llama_token token = sample(logits);
    if (llama_vocab_is_eog(ctx_.vocab, token)) {
        finished_ = true;
        return finish_step(out, take_complete_utf8("", true), 0, 1);
    }
    const std::string piece = eliza::token_piece(ctx_.vocab, token);
    const bool context_full = history_.size() + 1 > llama_n_ctx(lctx_.get());
    if (!context_full) {
        const int rc = decode(&token, 1, message);
        if (rc != ELIZA_OK) {
            llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(history_.size()), -1);
            restored_logits_.clear();
            have_logits_ = false;
            return rc;
        }
        history_.push_back(token);
        restored_logits_.clear();
    }
    ++generated_;
    const bool at_max = cfg_.max_tokens > 0 && generated_ >= cfg_.max_tokens;
    finished_ = context_full || at_max;
    if (context_full) {
        have_logits_ = false;  // the last token is not in the cache: a prefill must come next
    }
    out.tokens_out[0] = token;
    return finish_step(out, take_complete_utf8(piece, finished_), 1, finished_ ? 1 : 0);
}

int LlamaStream::reset() {
    llama_memory_clear(llama_get_memory(lctx_.get()), true);
    llama_sampler_reset(sampler_.get());
    accepted_.clear();
    history_.clear();
    restored_logits_.clear();
    pending_.clear();
    generated_ = 0;
    have_logits_ = false;
    finished_ = false;
    cancelled_.store(false);
    return ELIZA_OK;
}

int LlamaStream::reset_keep(int32_t n_keep) {
    const size_t keep = std::min<size_t>(n_keep > 0 ? static_cast<size_t>(n_keep) : 0, history_.size());
    if (keep == 0 || !llama_memory_seq_rm(llama_get_memory(lctx_.get()), 0, static_cast<llama_pos>(keep), -1)) {
        return reset();
    }
    history_.resize(keep);
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
        logits = restored_logits_.empty() ? llama_get_logits_ith(lctx_.get(), -1) : restored_logits_.data();
        if (logits == nullptr) {
            message = "no logits available for the last token";
            return ELIZA_ERR_FFI_FAULT;
        }
    }
    const size_t state_size = llama_state_seq_get_size(lctx_.get(), 0);
    std::string state(state_size, '\0');
    if (state_size > 0 &&
        llama_state_seq_get_data(lctx_.get(), reinterpret_cast<uint8_t *>(state.data()), state_size, 0) != state_size) {
        message = "cannot read the stream's cache state";
        return ELIZA_ERR_FFI_FAULT;
    }
    std::string blob(kSlotMagic, sizeof kSlotMagic);
    put(blob, ctx_.model_id);
    put(blob, static_cast<int32_t>(ctx_.n_vocab));
    put(blob, static_cast<uint64_t>(history_.size()));
    blob.append(reinterpret_cast<const char *>(history_.data()), history_.size() * sizeof(llama_token));
    put(blob, static_cast<uint64_t>(accepted_.size()));
    blob.append(reinterpret_cast<const char *>(accepted_.data()), accepted_.size() * sizeof(llama_token));
    put(blob, static_cast<uint8_t>(have_logits_));
    put(blob, static_cast<uint8_t>(finished_));
    put(blob, generated_);
    put(blob, static_cast<uint32_t>(pending_.size()));
    blob += pending_;
    if (logits != nullptr) {
        blob.append(reinterpret_cast<const char *>(logits), static_cast<size_t>(ctx_.n_vocab) * sizeof(float));
    }
    put(blob, static_cast<uint64_t>(state.size()));
    blob += state;
    put(blob, fnv1a(blob));

    // A private temporary name per save, so two streams saving to one path never mix bytes.
    static std::atomic<unsigned> counter{0};
    const std::string tmp = std::string(filename) + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter.fetch_add(1));
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
    f.close();
    if (!f) {
        std::remove(tmp.c_str());
        message = "cannot write slot file '" + tmp + "'";
        return ELIZA_ERR_INVALID_ARG;
    }
    if (std::rename(tmp.c_str(), filename) != 0) {
        std::remove(tmp.c_str());
        message = "cannot move slot file into place at '" + std::string(filename) + "'";
        return ELIZA_ERR_INVALID_ARG;
    }
    return ELIZA_OK;
}

int LlamaStream::restore_slot(const char * filename, std::string & message) {
    if (filename == nullptr || filename[0] == '\0') {
        message = "filename is NULL or empty";
        return ELIZA_ERR_INVALID_ARG;
    }
    // Whatever happens below, the stream's old state is gone: a rejected file leaves it reset.
    reset();
    std::ifstream f(filename, std::ios::binary);
    if (!f) {
        message = "slot file '" + std::string(filename) + "' cannot be opened";
        return ELIZA_ERR_INVALID_ARG;
    }
    const std::string blob((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string bad = "slot file '" + std::string(filename) + "' ";
    if (blob.size() < sizeof kSlotMagic + sizeof(uint64_t) || std::memcmp(blob.data(), kSlotMagic, sizeof kSlotMagic) != 0) {
        message = bad + "is not an eliza slot file (bad magic)";
        return ELIZA_ERR_INVALID_ARG;
    }
    const std::string body = blob.substr(0, blob.size() - sizeof(uint64_t));
    uint64_t stored_sum = 0;
    std::memcpy(&stored_sum, blob.data() + body.size(), sizeof stored_sum);
    if (fnv1a(body) != stored_sum) {
        message = bad + "is corrupt (checksum mismatch)";
        return ELIZA_ERR_INVALID_ARG;
    }
    Reader r(body);
    char magic[sizeof kSlotMagic];
    uint64_t model_id = 0;
    int32_t n_vocab = 0;
    uint64_t n_history = 0;
    r.bytes(magic, sizeof magic);
    if (!r.get(model_id) || model_id != ctx_.model_id || !r.get(n_vocab) || n_vocab != ctx_.n_vocab) {
        message = bad + "was written by another model";
        return ELIZA_ERR_INVALID_ARG;
    }
    if (!r.get(n_history) || n_history > llama_n_ctx(lctx_.get()) || n_history * sizeof(llama_token) > r.remaining()) {
        message = bad + "holds more tokens than this stream's context size";
        return ELIZA_ERR_INVALID_ARG;
    }
    std::vector<llama_token> history(static_cast<size_t>(n_history));
    uint64_t n_accepted = 0;
    std::vector<llama_token> accepted;
    uint8_t have_logits = 0;
    uint8_t finished = 0;
    int32_t generated = 0;
    uint32_t n_pending = 0;
    std::string pending;
    std::vector<float> logits;
    uint64_t n_state = 0;
    bool ok = r.bytes(history.data(), history.size() * sizeof(llama_token)) && r.get(n_accepted) &&
              n_accepted * sizeof(llama_token) <= r.remaining();
    if (ok) {
        accepted.resize(static_cast<size_t>(n_accepted));
        ok = r.bytes(accepted.data(), accepted.size() * sizeof(llama_token)) && r.get(have_logits) &&
             r.get(finished) && r.get(generated) && r.get(n_pending) && n_pending <= 3;
    }
    if (ok) {
        pending.resize(n_pending);
        ok = r.bytes(pending.data(), n_pending);
    }
    if (ok && have_logits) {
        logits.resize(static_cast<size_t>(n_vocab));
        ok = r.bytes(logits.data(), logits.size() * sizeof(float));
    }
    ok = ok && r.get(n_state) && n_state == r.remaining();
    if (!ok) {
        message = bad + "is truncated or malformed";
        return ELIZA_ERR_INVALID_ARG;
    }
    std::string state(static_cast<size_t>(n_state), '\0');
    r.bytes(state.data(), state.size());

    if (n_state > 0 &&
        llama_state_seq_set_data(lctx_.get(), reinterpret_cast<const uint8_t *>(state.data()), state.size(), 0) == 0) {
        reset();
        message = bad + "holds a cache state this model rejects";
        return ELIZA_ERR_INVALID_ARG;
    }
    // The sampler sees the same history as the saved one (repeat penalties); a sampled
    // stream's random state is not saved.
    for (llama_token t : accepted) {
        llama_sampler_accept(sampler_.get(), t);
    }
    accepted_ = std::move(accepted);
    history_ = std::move(history);
    restored_logits_ = std::move(logits);
    pending_ = std::move(pending);
    generated_ = generated;
    have_logits_ = have_logits != 0;
    finished_ = finished != 0;
    return ELIZA_OK;
}
