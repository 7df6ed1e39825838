// MLX backend (milestone M5): the gate `mlx` of matrix.yaml, compiled only when it is ON.
// Its factory name, artifacts and rank come from the matrix (GateSpec).
//
// The runtime is never a load-time dependency of the library. Its forward pass lives in
// the module libelizainference-mlx (backends/mlx/, C++20, linked against libmlx), which
// available() dlopen()s once, from the folder this library was loaded from (or
// ELIZA_BACKEND_MODULE_DIR), the way ggml loads its backends. A host without MLX has no loadable module there: available() is
// false and selection falls through to llama.cpp.
//
// This file holds what the seam's contract says about a stream, on the same code paths
// as the llama.cpp path (sampling.h): the bundle GGUF's vocabulary (loaded vocabulary-only),
// the sampler chain over MLX's logits, UTF-8-safe text, cancel, reset, reset_keep and slot
// files sealed to the weights. The weights directory is the bundle's text/mlx/, an MLX-LM
// checkpoint written by the project's converter, which records the GGUF it came from: a
// directory converted from another GGUF is refused.
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/conversion_record.h"
#include "backends/mlx/mlx_module.h"
#include "backends/runtime_body.h"
#include "backends/stream_args.h"
#include "context.h"
#include "llm-backend.h"
#include "sampling.h"
#include "status.h"
#include "xxh64.h"

namespace fs = std::filesystem;

namespace eliza::backends {
namespace {

constexpr const char * kModuleFile = "libelizainference-mlx.so";
constexpr const char * kWeightsDir = "text/mlx";
constexpr size_t kPrefillChunk = 64;  // tokens per forward call: the granularity of cancel during a prefill

// --- the module -------------------------------------------------------------------------

struct Module {
    const EliMlxModuleApi * api = nullptr;
    std::string why_not;  // why there is no module (for messages), "" when there is one
};

const Module & module() {
    static const Module loaded = [] {
        Module m;
        // ELIZA_BACKEND_MODULE_DIR: another folder to look in (empty or missing: no module,
        // as on a host without the runtime, which is how verify judges the fall-through).
        const char * override_dir = std::getenv("ELIZA_BACKEND_MODULE_DIR");
        const std::string dir = override_dir != nullptr ? std::string(override_dir) : library_directory();
        const std::string path = (dir.empty() ? fs::path(kModuleFile) : fs::path(dir) / kModuleFile).string();
        // RTLD_LOCAL: MLX's symbols stay out of the application's namespace.
        void * handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            const char * why = dlerror();
            m.why_not = "the MLX runtime is not on this host (" + path + ": " + (why ? why : "cannot be loaded") + ")";
            return m;
        }
        auto entry = reinterpret_cast<EliMlxModuleEntry>(dlsym(handle, ELIZA_MLX_MODULE_ENTRY));
        const EliMlxModuleApi * api = entry ? entry() : nullptr;
        if (api == nullptr || api->abi != ELIZA_MLX_MODULE_ABI) {
            m.why_not = path + " is not an MLX module of this library (module ABI " +
                        (api ? std::to_string(api->abi) : std::string("unknown")) + ", expected " +
                        std::to_string(ELIZA_MLX_MODULE_ABI) + ")";
            dlclose(handle);
            return m;
        }
        m.api = api;  // never unloaded: MLX's threads live as long as the process
        return m;
    }();
    return loaded;
}

// --- weights, shared by every stream of a directory ------------------------------------

struct Weights {
    const EliMlxModuleApi * api = nullptr;
    EliMlxModel * model = nullptr;
    uint64_t id = 0;  // the first 64 bits of model.safetensors' sha256: what slot files are sealed to
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    ~Weights() {
        if (model != nullptr) api->free_model(model);
    }
};

// Refuses a weights directory that was not converted from this GGUF, or whose files are
// no longer the ones the conversion wrote (a damaged or edited file would load and compute
// something else without a word). weights_sha256: model.safetensors', as verified.
bool weights_match_gguf(const fs::path & dir, const std::string & gguf, std::string & weights_sha256,
                        std::string & message) {
    const ArtifactRecord record{
        "'" + dir.string() + "'",
        (dir / "eliza-conversion.json").string(),
        "conversion record",
        "converted",
        "its conversion",
        "; convert it again: eliza mlx-weights " + gguf,
        {{"config.json", (dir / "config.json").string()}, {"model.safetensors", (dir / "model.safetensors").string()}},
    };
    return artifact_matches_gguf(record, gguf, weights_sha256, message);
}

// The context's weights: loaded on its first MLX stream and kept with the context, so its
// later streams (and one opened after the last closed) share them. Checked against the
// bundle's GGUF once, when loaded.
std::shared_ptr<Weights> context_weights(const Module & m, EliInferenceContext & ctx, const std::string & dir,
                                         std::string & message) {
    std::lock_guard<std::mutex> lock(ctx.backend_state_mutex);
    std::shared_ptr<void> & slot = ctx.backend_state["mlx"];
    if (slot) return std::static_pointer_cast<Weights>(slot);
    std::string weights_sha256;
    if (!weights_match_gguf(dir, ctx.model_path, weights_sha256, message)) return nullptr;
    auto w = std::make_shared<Weights>();
    w->api = m.api;
    w->id = std::stoull(weights_sha256.substr(0, 16), nullptr, 16);  // the verified file, not read again
    char err[1024] = {0};
    w->model = m.api->load(dir.c_str(), err, sizeof err);
    if (w->model == nullptr) {
        message = err;
        return nullptr;
    }
    w->n_vocab = m.api->n_vocab(w->model);
    w->n_ctx_train = m.api->n_ctx_train(w->model);
    slot = w;
    return w;
}

// --- slot files ---------------------------------------------------------------------------
// "ELZMLXS1", then little-endian u64 weights id, u32 n_vocab, u32 n_history, u32 n_accepted,
// i32 generated, u32 n_pending, u32 flags; the history and accepted token ids (i32), the
// pending bytes; then the XXH64 of everything before it. The cache itself is not stored:
// restoring evaluates the history again, which gives the same cache and logits.
constexpr char kSlotMagic[8] = {'E', 'L', 'Z', 'M', 'L', 'X', 'S', '1'};
constexpr size_t kSlotHeaderBytes = 8 + 8 + 4 * 6;
constexpr uint32_t kFlagHaveLogits = 1u;
constexpr uint32_t kFlagFinished = 2u;

class MlxSession final : public LlmBackendSession {
public:
    MlxSession(std::shared_ptr<Weights> weights, EliMlxSeq * seq, Sampler sampler, const VocabView & vocab,
               const eliza_llm_stream_config_t & cfg, uint32_t n_ctx)
        : weights_(std::move(weights)), seq_(seq), sampler_(std::move(sampler)), vocab_(vocab), cfg_(cfg),
          n_ctx_(n_ctx), logits_(static_cast<size_t>(weights_->n_vocab)) {}
    ~MlxSession() override { weights_->api->free_seq(seq_); }
    MlxSession(const MlxSession &) = delete;
    MlxSession & operator=(const MlxSession &) = delete;

    int prefill(const int32_t * ids, size_t n, char ** out_error) override {
        if (cancelled_.load()) {
            return fail(out_error, ELIZA_ERR_CANCELLED, "stream was cancelled; call _reset or _reset_keep before reusing it");
        }
        if (const int rc = check_prefill(ids, n, vocab_.n_vocab, history_.size(), n_ctx_, out_error); rc != ELIZA_OK) return rc;
        const size_t before = history_.size();
        std::string message;
        for (size_t done = 0; done < n;) {
            if (cancelled_.load()) {
                roll_back(before);
                return fail(out_error, ELIZA_ERR_CANCELLED, "prefill was cancelled");
            }
            const size_t take = std::min(kPrefillChunk, n - done);
            if (!evaluate(ids + done, take, message)) {
                roll_back(before);
                return fail(out_error, ELIZA_ERR_FFI_FAULT, message);
            }
            history_.insert(history_.end(), ids + done, ids + done + take);
            done += take;
        }
        have_logits_ = true;
        finished_ = false;
        generated_ = 0;
        return ELIZA_OK;
    }

    int next(int32_t * tokens_out, size_t tokens_cap, size_t * n_out, char * text_out, size_t text_cap,
             int32_t * drafted_out, int32_t * accepted_out, char ** out_error) override {
        if (drafted_out) *drafted_out = 0;  // no drafter on this runtime
        if (accepted_out) *accepted_out = 0;
        if (cancelled_.load()) return fail(out_error, ELIZA_ERR_CANCELLED, "generation was cancelled");
        const int args = check_next(tokens_out, tokens_cap, n_out, text_out, text_cap, vocab_.max_piece_bytes, out_error);
        if (args != ELIZA_OK) return args;
        auto finish = [&](const std::string & text, size_t n_tokens, int result) {
            std::memcpy(text_out, text.data(), text.size());
            text_out[text.size()] = '\0';
            *n_out = n_tokens;
            return result;
        };
        if (finished_) return finish(take_complete_utf8(pending_, "", true), 0, 1);
        if (!have_logits_) return fail(out_error, ELIZA_ERR_INVALID_ARG, "nothing to continue from: call _prefill first");
        const llama_token token = choose();
        if (token < 0) return fail(out_error, ELIZA_ERR_FFI_FAULT, "the sampler selected no token");
        if (llama_vocab_is_eog(vocab_.vocab, token)) {
            accept(token);
            finished_ = true;
            return finish(take_complete_utf8(pending_, "", true), 0, 1);
        }
        const std::string piece = token_piece(vocab_.vocab, token);
        const bool context_full = history_.size() + 1 > n_ctx_;
        if (!context_full) {
            std::string message;
            if (!evaluate(&token, 1, message)) return fail(out_error, ELIZA_ERR_FFI_FAULT, message);
            history_.push_back(token);
        }
        accept(token);
        ++generated_;
        finished_ = context_full || (cfg_.max_tokens > 0 && generated_ >= cfg_.max_tokens);
        if (context_full) have_logits_ = false;  // the last token is not in the cache
        tokens_out[0] = token;
        return finish(take_complete_utf8(pending_, piece, finished_), 1, finished_ ? 1 : 0);
    }

    int cancel() override {
        cancelled_.store(true);
        return ELIZA_OK;
    }

    int reset() override {
        if (weights_->api->truncate(seq_, 0) != 0) return ELIZA_ERR_FFI_FAULT;
        clear_state();
        cancelled_.store(false);
        return ELIZA_OK;
    }

    // The exact prefix, as the llama.cpp path keeps it: the cache keeps its first
    // min(n_keep, held) positions and says how many; the next prefill continues after them.
    // Nothing to keep: the full reset, returning 0.
    int reset_keep(int32_t n_keep) override {
        const size_t keep = std::min<size_t>(n_keep > 0 ? static_cast<size_t>(n_keep) : 0, history_.size());
        if (keep == 0) {
            const int rc = reset();
            return rc == ELIZA_OK ? 0 : rc;
        }
        if (weights_->api->truncate(seq_, static_cast<int32_t>(keep)) != 0) return ELIZA_ERR_FFI_FAULT;
        std::vector<llama_token> kept(history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(keep));
        clear_state();
        history_ = std::move(kept);
        cancelled_.store(false);
        return static_cast<int>(keep);
    }

    int save_slot(const char * filename, char ** out_error) override {
        if (const int rc = check_slot_save(filename, cancelled_.load(), out_error); rc != ELIZA_OK) return rc;
        std::string out(kSlotMagic, sizeof kSlotMagic);
        put<uint64_t>(out, weights_->id);
        put<uint32_t>(out, static_cast<uint32_t>(vocab_.n_vocab));
        put<uint32_t>(out, static_cast<uint32_t>(history_.size()));
        put<uint32_t>(out, static_cast<uint32_t>(accepted_.size()));
        put<int32_t>(out, generated_);
        put<uint32_t>(out, static_cast<uint32_t>(pending_.size()));
        put<uint32_t>(out, (have_logits_ ? kFlagHaveLogits : 0u) | (finished_ ? kFlagFinished : 0u));
        for (llama_token t : history_) put<int32_t>(out, t);
        for (llama_token t : accepted_) put<int32_t>(out, t);
        out += pending_;
        put<uint64_t>(out, Xxh64::of(out.data(), out.size()));
        return write_slot_file(filename, out, out_error);
    }

    int restore_slot(const char * filename, char ** out_error) override {
        std::string data, name;
        const int read = read_slot_file(filename, kSlotMagic, kSlotHeaderBytes + 8, "an MLX slot file", data, name,
                                        out_error);
        if (read != ELIZA_OK) return read;
        size_t at = data.size() - 8;
        if (get<uint64_t>(data, at) != Xxh64::of(data.data(), data.size() - 8)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " is corrupt (checksum mismatch)");
        }
        at = sizeof kSlotMagic;
        const uint64_t id = get<uint64_t>(data, at);
        const uint32_t n_vocab = get<uint32_t>(data, at), n_history = get<uint32_t>(data, at),
                       n_accepted = get<uint32_t>(data, at);
        const int32_t generated = get<int32_t>(data, at);
        const uint32_t n_pending = get<uint32_t>(data, at), flags = get<uint32_t>(data, at);
        if (id != weights_->id || n_vocab != static_cast<uint32_t>(vocab_.n_vocab)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " was saved with other weights than this stream's");
        }
        const uint64_t body = (uint64_t{n_history} + n_accepted) * 4 + n_pending;
        if (kSlotHeaderBytes + body + 8 != data.size() || n_history > n_ctx_ ||
            n_accepted > static_cast<uint32_t>(kPenaltyLastN) || (flags & ~(kFlagHaveLogits | kFlagFinished)) != 0) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " has inconsistent sizes or flags");
        }
        std::vector<llama_token> history(n_history), accepted(n_accepted);
        for (auto & t : history) t = get<int32_t>(data, at);
        for (auto & t : accepted) t = get<int32_t>(data, at);
        const std::string pending = data.substr(at, n_pending);
        for (llama_token t : history) {
            if (t < 0 || t >= vocab_.n_vocab) return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " holds a token outside the vocabulary");
        }
        if (!valid_pending(pending)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " holds pending bytes that are not a partial UTF-8 character");
        }
        std::string message;
        Sampler sampler = make_sampler_chain(cfg_, vocab_.n_vocab, message);
        if (!sampler) return fail(out_error, ELIZA_ERR_OOM, message);
        // Everything checked: now the stream's state is replaced.
        if (weights_->api->truncate(seq_, 0) != 0) return fail(out_error, ELIZA_ERR_FFI_FAULT, "cannot clear the cache");
        clear_state();
        for (size_t done = 0; done < history.size();) {
            const size_t take = std::min(kPrefillChunk, history.size() - done);
            if (!evaluate(history.data() + done, take, message)) {
                weights_->api->truncate(seq_, 0);
                clear_state();
                return fail(out_error, ELIZA_ERR_FFI_FAULT, message);
            }
            done += take;
        }
        history_ = std::move(history);
        sampler_ = std::move(sampler);
        for (llama_token t : accepted) accept(t);
        generated_ = generated;
        pending_ = pending;
        have_logits_ = (flags & kFlagHaveLogits) != 0 && !history_.empty();
        finished_ = (flags & kFlagFinished) != 0;
        cancelled_.store(false);
        return ELIZA_OK;
    }

private:
    bool evaluate(const llama_token * ids, size_t n, std::string & message) {
        char err[1024] = {0};
        if (weights_->api->forward(seq_, ids, n, logits_.data(), err, sizeof err) != 0) {
            message = err;
            return false;
        }
        return true;
    }

    void roll_back(size_t keep) {
        weights_->api->truncate(seq_, static_cast<int32_t>(keep));
    }

    llama_token choose() {
        candidates_.resize(logits_.size());
        for (size_t t = 0; t < logits_.size(); ++t) {
            candidates_[t] = llama_token_data{static_cast<llama_token>(t), logits_[t], 0.0f};
        }
        llama_token_data_array arr{candidates_.data(), candidates_.size(), -1, false};
        llama_sampler_apply(sampler_.get(), &arr);
        if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
        return arr.data[arr.selected].id;
    }

    void accept(llama_token token) {
        if (accepted_.size() == static_cast<size_t>(kPenaltyLastN)) accepted_.erase(accepted_.begin());
        accepted_.push_back(token);
        llama_sampler_accept(sampler_.get(), token);
    }

    void clear_state() {
        history_.clear();
        accepted_.clear();
        pending_.clear();
        llama_sampler_reset(sampler_.get());
        generated_ = 0;
        have_logits_ = false;
        finished_ = false;
    }

    std::shared_ptr<Weights> weights_;
    EliMlxSeq * seq_;
    Sampler sampler_;
    VocabView vocab_;
    eliza_llm_stream_config_t cfg_;
    uint32_t n_ctx_;
    std::vector<float> logits_;  // of the last evaluated token
    std::vector<llama_token_data> candidates_;
    std::vector<llama_token> history_;   // every token in the cache, in order
    std::vector<llama_token> accepted_;  // the sampler's last accepted tokens (<= its penalty window)
    std::string pending_;                // bytes of an incomplete UTF-8 character
    std::atomic<bool> cancelled_{false};
    int32_t generated_ = 0;
    bool have_logits_ = false;
    bool finished_ = false;
};

class MlxFactory final : public GateFactory {
public:
    using GateFactory::GateFactory;

    bool available() const override { return module().api != nullptr; }

protected:
    // This body computes from MLX weights (text/mlx/) on every platform; the gate's CoreML
    // artifacts (text/*.mlpackage, text/*.mlmodelc) are another body's, which only Apple
    // can have. A bundle carrying only those is not this body's to serve.
    bool loads_artifact(const char * pattern) const override {
        return pattern != nullptr && std::string(pattern) == std::string(kWeightsDir) + "/";
    }

public:

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * cfg,
                             char ** out_error) override {
        const Module & m = module();
        if (m.api == nullptr) {
            fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED, std::string(name()) + ": " + m.why_not);
            return nullptr;
        }
        if (ctx == nullptr || cfg == nullptr) {
            fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(name()) + ": ctx and cfg must be non-NULL");
            return nullptr;
        }
        if (cfg->mtp_drafter_path != nullptr && cfg->mtp_drafter_path[0] != '\0') {
            fail(out_error, ELIZA_ERR_INVALID_ARG,
                 std::string(name()) + ": speculative decoding (mtp_drafter_path) is served by the llama.cpp path only");
            return nullptr;
        }
        if (cfg->gbnf_grammar != nullptr && cfg->gbnf_grammar[0] != '\0') {
            fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED, std::string(name()) + ": grammars are not supported");
            return nullptr;
        }
        int code = ELIZA_OK;
        std::string message;
        VocabView vocab;
        if (!ensure_vocab(*ctx, vocab, code, message)) {
            fail(out_error, code, std::string(name()) + ": " + message);
            return nullptr;
        }
        const std::string dir = (fs::path(llm_backend_context_bundle_dir(ctx)) / kWeightsDir).string();
        std::shared_ptr<Weights> weights = context_weights(m, *ctx, dir, message);
        if (!weights) {
            fail(out_error, ELIZA_ERR_BUNDLE_INVALID, std::string(name()) + ": " + message);
            return nullptr;
        }
        if (weights->n_vocab != vocab.n_vocab) {
            fail(out_error, ELIZA_ERR_BUNDLE_INVALID,
                 std::string(name()) + ": '" + dir + "' has " + std::to_string(weights->n_vocab) +
                     " vocabulary rows, the bundle GGUF's vocabulary " + std::to_string(vocab.n_vocab));
            return nullptr;
        }
        Sampler sampler = make_sampler_chain(*cfg, vocab.n_vocab, message);
        if (!sampler) {
            fail(out_error, ELIZA_ERR_OOM, std::string(name()) + ": " + message);
            return nullptr;
        }
        char err[1024] = {0};
        EliMlxSeq * seq = m.api->new_seq(weights->model, err, sizeof err);
        if (seq == nullptr) {
            fail(out_error, ELIZA_ERR_OOM, std::string(name()) + ": " + err);
            return nullptr;
        }
        const uint32_t n_ctx = stream_context_size(ctx->settings.n_ctx, weights->n_ctx_train);
        auto * session = new (std::nothrow) MlxSession(std::move(weights), seq, std::move(sampler), vocab, *cfg, n_ctx);
        if (session == nullptr) {
            m.api->free_seq(seq);
            fail(out_error, ELIZA_ERR_OOM, std::string(name()) + ": out of memory");
        }
        return session;
    }
};

}  // namespace

LlmBackendFactory & mlx_factory(const GateSpec & spec) {
    static MlxFactory instance(spec);
    return instance;
}

}  // namespace eliza::backends
