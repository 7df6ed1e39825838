// LiteRT-LM backend (milestone M4): the gate `litert` of matrix.yaml, compiled only when it
// is ON. Its factory name, artifacts and rank come from the matrix (GateSpec).
//
// The engine is LiteRT-LM's C API (litert-lm-api 0.18.1, backends/litert/litert_lm_c_api.h),
// dlopen()ed with RTLD_LOCAL from <the folder this library was loaded from>/litert_lm/ (or
// ELIZA_BACKEND_MODULE_DIR), then beside the library, then by name (on Android the app
// provides it), and resolved by name: never a load-time dependency. A host without it:
// available() is false and selection falls through to llama.cpp.
//
// The C API speaks text, the seam speaks token ids. What this file does about it
// (docs/backends.md, "LiteRT-LM"):
//   - prefill(ids): the ids become the text the engine re-tokenizes (each token as
//     llama.cpp renders it; the engine adds BOS itself on the first turn, so the first
//     prefill must begin with BOS and BOS is not sent). The engine's tokenizer, written
//     from the bundle GGUF's vocabulary, must give back exactly these ids, or the prefill
//     is refused: never a silently different input.
//   - next(): one chunk of the engine's run_decode_async per call, the engine's thread held
//     in its callback until the stream asks for the next one (a step is computed on demand,
//     as the llama.cpp path computes one in next()). A chunk is one token's text, so its id
//     is the piece whose text it is; a chunk that is not one piece's text (the engine merged
//     the bytes of one character, or a byte that is not UTF-8 came back as U+FFFD) gets the
//     engine tokenizer's encoding of it: its text is exact, its ids are the canonical ones.
//   - cancel: the engine's cancel_process, from any thread; reset: rewind_to_step(0);
//     reset_keep(n): rewind_to_step(n) (BOS counted) within the prefix whose ids are known
//     exactly, else the full reset, returning 0. Slot files hold what the engine was given
//     and gave (its cache has no way out of the C API) and restore by sending it again.
//   - sampling: greedy is the engine's top-p sampler with top_k 1; otherwise top-k, top-p,
//     temperature and slot_id as the seed. The engine has no repeat penalty: a stream that
//     asks for one is refused.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/conversion_record.h"
#include "backends/litert/litert_lm_c_api.h"
#include "backends/runtime_body.h"
#include "backends/stream_args.h"
#include "context.h"
#include "llm-backend.h"
#include "sampling.h"
#include "sha256.h"
#include "status.h"
#include "xxh64.h"

namespace fs = std::filesystem;

namespace eliza::backends {
namespace {

using litert_c::Api;

constexpr const char * kEngineFile = "liblitert-lm.so";
constexpr const char * kEngineDir = "litert_lm";
constexpr const char * kArtifactExt = ".litertlm";
constexpr int kMaxThreads = 8;
// The engine computes a step only when the stream asks for one (on_chunk), as the llama.cpp
// path does: a stream that stops or rolls back never paid for a step nobody asked for, and a
// cost of the stream's own (its caller's work between tokens included) shows in its speed
// instead of hiding behind the engine's next step. So the engine's state holds at most one
// generated token the stream has not given out: the step it was computing when stopped.
constexpr size_t kUngiven = 1;
// Each side of that handoff spins a while before it sleeps, where the other side's answer is
// near: waking a sleeping thread costs tens of microseconds, more than a whole step of the
// tiny bundle (handing over by sleeping alone decoded it at 0.83x-0.89x of the engine's own
// session API). The engine waits for the stream's caller to ask again, usually within
// microseconds: it spins up to kEngineSpin. The stream waits for a step: it spins only while
// steps are short (the last one under kShortStep), up to twice the last one, since a core
// spinning beside the engine slows it (a stream that always spun 200 us made the tiny
// bundle's first token about 7 % slower) and a long step makes a wake-up's cost negligible.
constexpr auto kEngineSpin = std::chrono::microseconds(200);
constexpr auto kShortStep = std::chrono::microseconds(500);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// --- the engine library -----------------------------------------------------------------

struct Runtime {
    Api api{};
    std::string why_not;  // why there is no engine (for messages), "" when there is one
};

template <typename F> bool resolve(void * handle, const char * name, F & out, std::string & missing) {
    out = reinterpret_cast<F>(dlsym(handle, name));
    if (out == nullptr && missing.empty()) missing = name;
    return out != nullptr;
}

// Each function is the Api member of its name without the "litert_lm_" prefix.
#define ELIZA_LITERT_RESOLVE(member) ok &= resolve(h, "litert_lm_" #member, a.member, missing)
bool resolve_all(void * h, Api & a, std::string & missing) {
    bool ok = true;
    ELIZA_LITERT_RESOLVE(set_min_log_level);
    ELIZA_LITERT_RESOLVE(engine_settings_create);
    ELIZA_LITERT_RESOLVE(engine_settings_delete);
    ELIZA_LITERT_RESOLVE(engine_settings_set_max_num_tokens);
    ELIZA_LITERT_RESOLVE(engine_settings_set_num_threads);
    ELIZA_LITERT_RESOLVE(engine_settings_set_activation_data_type);
    ELIZA_LITERT_RESOLVE(engine_create);
    ELIZA_LITERT_RESOLVE(engine_delete);
    ELIZA_LITERT_RESOLVE(engine_tokenize);
    ELIZA_LITERT_RESOLVE(tokenize_result_delete);
    ELIZA_LITERT_RESOLVE(tokenize_result_get_tokens);
    ELIZA_LITERT_RESOLVE(tokenize_result_get_num_tokens);
    ELIZA_LITERT_RESOLVE(sampler_params_create);
    ELIZA_LITERT_RESOLVE(sampler_params_delete);
    ELIZA_LITERT_RESOLVE(sampler_params_set_top_k);
    ELIZA_LITERT_RESOLVE(sampler_params_set_top_p);
    ELIZA_LITERT_RESOLVE(sampler_params_set_temperature);
    ELIZA_LITERT_RESOLVE(sampler_params_set_seed);
    ELIZA_LITERT_RESOLVE(session_config_create);
    ELIZA_LITERT_RESOLVE(session_config_set_max_output_tokens);
    ELIZA_LITERT_RESOLVE(session_config_set_apply_prompt_template);
    ELIZA_LITERT_RESOLVE(session_config_set_sampler_params);
    ELIZA_LITERT_RESOLVE(session_config_delete);
    ELIZA_LITERT_RESOLVE(engine_create_session);
    ELIZA_LITERT_RESOLVE(session_delete);
    ELIZA_LITERT_RESOLVE(input_data_create);
    ELIZA_LITERT_RESOLVE(input_data_delete);
    ELIZA_LITERT_RESOLVE(session_run_prefill);
    ELIZA_LITERT_RESOLVE(session_run_decode_async);
    ELIZA_LITERT_RESOLVE(stream_chunk_get_text);
    ELIZA_LITERT_RESOLVE(stream_chunk_is_final);
    ELIZA_LITERT_RESOLVE(stream_chunk_get_error);
    ELIZA_LITERT_RESOLVE(session_cancel_process);
    ELIZA_LITERT_RESOLVE(session_rewind_to_step);
    return ok;
}
#undef ELIZA_LITERT_RESOLVE

const Runtime & runtime() {
    static const Runtime loaded = [] {
        Runtime r;
        // ELIZA_BACKEND_MODULE_DIR: another folder to look in (empty or missing: no engine,
        // as on a host without the runtime, which is how verify judges the fall-through).
        const char * override_dir = std::getenv("ELIZA_BACKEND_MODULE_DIR");
        std::vector<std::string> candidates;
        if (override_dir != nullptr) {
            candidates.push_back((fs::path(override_dir) / kEngineDir / kEngineFile).string());
        } else {
            const fs::path own = library_directory();
            candidates = {(own / kEngineDir / kEngineFile).string(), (own / kEngineFile).string(), kEngineFile};
        }
        std::string tried;
        for (const std::string & path : candidates) {
            // RTLD_LOCAL: the engine's absl, TFLite and operator new stay out of the process's namespace.
            void * handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (handle == nullptr) {
                const char * why = dlerror();
                tried += (tried.empty() ? "" : "; ") + path + ": " + (why ? why : "cannot be loaded");
                continue;
            }
            std::string missing;
            if (!resolve_all(handle, r.api, missing)) {
                r.why_not = path + " is not the LiteRT-LM C API this backend was written for (0.18.1): no " + missing;
                dlclose(handle);
                return r;
            }
            r.api.set_min_log_level(kLiteRtLmLogSilent);  // the engine's log would land on the host's stderr
            return r;  // never unloaded: the engine's threads live as long as the process
        }
        r.why_not = "the LiteRT-LM engine is not on this host (" + tried + ")";
        return r;
    }();
    return loaded;
}

// --- the engine of a context, shared by its streams -------------------------------------

// The ring caches of a .litertlm's sliding-window layers, as its record states them
// ("cache": ring_rows, sliding_window, widest_prefill; none: every layer keeps the context).
// Position p is written at row p mod rows, so a later position overwrites it: a session may
// be rewound in place only while every row the new position's window needs holds its own.
struct RingCache {
    size_t rows = 0;
    size_t window = 0;
    size_t widest_prefill = 0;

    // `written`: the positions the engine has processed; a padded prefill may also have
    // written up to widest_prefill - 1 rows past them. Rewinding to `keep` (the next position
    // written) is exact when nothing was overwritten, or when everything overwritten lies
    // before keep's window (keep - window < p).
    bool rewinds_in_place(size_t written, size_t keep) const {
        if (rows == 0) return true;
        const size_t end = written + widest_prefill;  // past the highest row a prefill may have written
        return end <= rows || end - rows + window <= keep + 1;
    }
};

RingCache ring_cache_of(const std::string & record) {
    RingCache ring;
    ring.rows = recorded_count(record, "ring_rows");
    ring.window = recorded_count(record, "sliding_window");
    ring.widest_prefill = recorded_count(record, "widest_prefill");
    return ring;
}

struct Engine {
    const Api * api = nullptr;
    LiteRtLmEngine * handle = nullptr;
    RingCache ring;
    // Each piece's text as llama.cpp renders it -> its id, for the vocabulary's normal and
    // user-defined pieces (a chunk of one token is that token's text; a piece's text is
    // unique among them). Byte and control pieces are left out: their text is not theirs alone.
    std::unordered_map<std::string, int32_t> piece_ids;
    ~Engine() {
        if (handle != nullptr) api->engine_delete(handle);
    }
};

std::unordered_map<std::string, int32_t> piece_map(const VocabView & vocab) {
    std::unordered_map<std::string, int32_t> out;
    out.reserve(static_cast<size_t>(vocab.n_vocab));
    for (int32_t t = 0; t < vocab.n_vocab; ++t) {
        const llama_token_attr attr = llama_vocab_get_attr(vocab.vocab, t);
        if ((attr & (LLAMA_TOKEN_ATTR_NORMAL | LLAMA_TOKEN_ATTR_USER_DEFINED)) == 0) continue;
        std::string text = token_piece(vocab.vocab, t);
        if (!text.empty()) out.emplace(std::move(text), t);  // the first id of a text keeps it
    }
    return out;
}

std::string artifact_of(const std::string & bundle_dir) {
    std::error_code ec;
    std::vector<fs::path> found;
    for (const auto & entry : fs::directory_iterator(fs::path(bundle_dir) / "text", ec)) {
        if (entry.path().extension() == kArtifactExt && entry.is_regular_file(ec)) found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end());
    return found.empty() ? "" : found.front().string();
}

int thread_count(const EliInferenceContext & ctx) {
    if (ctx.settings.n_threads > 0) return static_cast<int>(std::min<long>(ctx.settings.n_threads, kMaxThreads));
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(std::min<unsigned>(hw, kMaxThreads));
}

// The stream's context from the GGUF's training context. Called after ensure_vocab: one
// of the two models is loaded.
uint32_t context_size(const EliInferenceContext & ctx) {
    const llama_model * model = ctx.loaded.load() ? ctx.model.get() : ctx.vocab_model.get();
    return stream_context_size(ctx.settings.n_ctx, model != nullptr ? llama_model_n_ctx_train(model) : 0);
}

// Refuses a .litertlm that was not written from this GGUF by `eliza litertlm`, or whose
// bytes are no longer the ones it wrote (its record, <name>.litertlm.json).
bool litertlm_matches_gguf(const std::string & model, const std::string & gguf, std::string & message) {
    const ArtifactRecord record{
        "'" + model + "'",
        model + ".json",
        "writer's record",
        "written",
        "its writer",
        "; write it again: eliza litertlm " + gguf,
        {{"output_sha256", model}},
    };
    std::string model_sha256;
    return artifact_matches_gguf(record, gguf, model_sha256, message);
}

// An advisory lock on the model file for as long as it lives (flock on a read-only
// descriptor: a model on a read-only disk is locked too); a model that cannot be opened is
// not locked, and the engine's own open then reports it.
class ModelLock {
public:
    explicit ModelLock(const std::string & model) : fd_(::open(model.c_str(), O_RDONLY | O_CLOEXEC)) {
        if (fd_ >= 0) {
            while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
            }
        }
    }
    ~ModelLock() {
        if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
    }
    ModelLock(const ModelLock &) = delete;
    ModelLock & operator=(const ModelLock &) = delete;

private:
    int fd_;
};

std::shared_ptr<Engine> context_engine(const Runtime & rt, EliInferenceContext & ctx, const VocabView & vocab,
                                       uint32_t n_ctx, std::string & message) {
    std::lock_guard<std::mutex> lock(ctx.backend_state_mutex);
    std::shared_ptr<void> & slot = ctx.backend_state["litert"];
    if (slot) return std::static_pointer_cast<Engine>(slot);
    const std::string model = artifact_of(ctx.bundle_dir);
    if (model.empty()) {
        message = "bundle '" + ctx.bundle_dir + "' has no text/*" + kArtifactExt;
        return nullptr;
    }
    if (!litertlm_matches_gguf(model, ctx.model_path, message)) return nullptr;
    LiteRtLmEngineSettings * settings = rt.api.engine_settings_create(model.c_str(), "cpu", nullptr, nullptr);
    if (settings == nullptr) {
        message = "the LiteRT-LM engine refused the settings for '" + model + "'";
        return nullptr;
    }
    // f32 activations: the engine's CPU default is f16, which would round away agreement
    // with the llama.cpp path. The weight cache is left as the engine ships it: no cache
    // directory set, so the first engine writes the weights XNNPACK packs beside the model
    // (<model>_<mtime>_<size>.xnnpack_cache) and later ones map them instead of packing
    // again; a model written anew has another mtime, so another cache.
    rt.api.engine_settings_set_activation_data_type(settings, kLiteRtLmActivationDataTypeFloat32);
    rt.api.engine_settings_set_num_threads(settings, thread_count(ctx));
    rt.api.engine_settings_set_max_num_tokens(settings, static_cast<int>(n_ctx));
    auto engine = std::make_shared<Engine>();
    engine->api = &rt.api;
    {
        // Two processes starting on one cold model would both write its cache: the first
        // to hold the model's lock writes it, the next finds it written.
        const ModelLock lock(model);
        engine->handle = rt.api.engine_create(settings);
    }
    rt.api.engine_settings_delete(settings);
    if (engine->handle == nullptr) {
        message = "the LiteRT-LM engine cannot load '" + model +
                  "' (is it a .litertlm written by `eliza litertlm` from this bundle's GGUF?)";
        return nullptr;
    }
    engine->piece_ids = piece_map(vocab);
    engine->ring = ring_cache_of(read_text_file(model + ".json"));
    slot = engine;
    return engine;
}

// The engine's tokenization of `text`: the SentencePiece model of the bundle's .litertlm.
bool engine_tokenize(const Engine & e, const std::string & text, std::vector<int32_t> & out) {
    LiteRtLmTokenizeResult * r = e.api->engine_tokenize(e.handle, text.c_str());
    if (r == nullptr) return false;
    const int * ids = e.api->tokenize_result_get_tokens(r);
    const size_t n = e.api->tokenize_result_get_num_tokens(r);
    out.assign(ids, ids + n);
    e.api->tokenize_result_delete(r);
    return true;
}

struct SessionConfigDeleter {
    const Api * api;
    void operator()(LiteRtLmSessionConfig * c) const { api->session_config_delete(c); }
};
struct SamplerDeleter_ {
    const Api * api;
    void operator()(LiteRtLmSamplerParams * p) const { api->sampler_params_delete(p); }
};

LiteRtLmSession * new_session(const Engine & e, const eliza_llm_stream_config_t & cfg, uint32_t n_ctx) {
    const Api & api = *e.api;
    std::unique_ptr<LiteRtLmSamplerParams, SamplerDeleter_> sampler(
        api.sampler_params_create(kLiteRtLmSamplerTypeTopP), SamplerDeleter_{&api});
    std::unique_ptr<LiteRtLmSessionConfig, SessionConfigDeleter> config(api.session_config_create(),
                                                                        SessionConfigDeleter{&api});
    if (!sampler || !config) return nullptr;
    if (cfg.temperature <= 0.0f) {  // greedy
        api.sampler_params_set_top_k(sampler.get(), 1);
        api.sampler_params_set_top_p(sampler.get(), 1.0f);
        api.sampler_params_set_temperature(sampler.get(), 1.0f);
    } else {
        api.sampler_params_set_top_k(sampler.get(), cfg.top_k > 0 ? cfg.top_k : 0);
        api.sampler_params_set_top_p(sampler.get(), cfg.top_p > 0.0f && cfg.top_p <= 1.0f ? cfg.top_p : 1.0f);
        api.sampler_params_set_temperature(sampler.get(), cfg.temperature);
    }
    api.sampler_params_set_seed(sampler.get(), cfg.slot_id);
    api.session_config_set_sampler_params(config.get(), sampler.get());
    api.session_config_set_apply_prompt_template(config.get(), false);
    api.session_config_set_max_output_tokens(config.get(),
                                             cfg.max_tokens > 0 ? cfg.max_tokens : static_cast<int>(n_ctx));
    return api.engine_create_session(e.handle, config.get());
}

// --- slot files -----------------------------------------------------------------------------

constexpr char kSlotMagic[8] = {'E', 'L', 'Z', 'L', 'R', 'T', 'S', '1'};
constexpr uint32_t kFlagPrefilled = 1u;
constexpr uint32_t kFlagFinished = 2u;

std::string slot_key_of(const eliza_llm_stream_config_t & cfg) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "litert-lm 0.18.1 t%g p%g k%d s%d", static_cast<double>(cfg.temperature),
                  static_cast<double>(cfg.top_p), cfg.top_k, cfg.slot_id);
    return buf;
}

// --- a stream -----------------------------------------------------------------------------

class LiteRtSession final : public LlmBackendSession {
public:
    LiteRtSession(std::shared_ptr<Engine> engine, LiteRtLmSession * session, const VocabView & vocab,
                  const eliza_llm_stream_config_t & cfg, uint32_t n_ctx)
        : engine_(std::move(engine)), api_(*engine_->api), session_(session), vocab_(vocab), cfg_(cfg), n_ctx_(n_ctx),
          slot_key_(std::string(slot_key_of(cfg))) {}

    ~LiteRtSession() override {
        stop_decode();  // the engine's thread must be done with `this` before it goes
        api_.session_delete(session_);
    }
    LiteRtSession(const LiteRtSession &) = delete;
    LiteRtSession & operator=(const LiteRtSession &) = delete;

    int prefill(const int32_t * ids, size_t n, char ** out_error) override {
        if (cancelled_.load()) {
            return fail(out_error, ELIZA_ERR_CANCELLED, "stream was cancelled; call _reset or _reset_keep before reusing it");
        }
        if (const int rc = check_prefill(ids, n, vocab_.n_vocab, steps_, n_ctx_, out_error); rc != ELIZA_OK) return rc;
        stop_decode();  // a generation left unfinished ends here; the new input follows it
        size_t from = 0;
        if (steps_ == 0) {
            const llama_token bos = llama_vocab_bos(vocab_.vocab);
            if (ids[0] != bos) {
                return fail(out_error, ELIZA_ERR_INVALID_ARG,
                            "litert-lm: the engine begins a conversation with BOS itself: the first prefill must "
                            "begin with BOS (id " + std::to_string(bos) + "), got " + std::to_string(ids[0]));
            }
            from = 1;
        }
        std::string text;
        for (size_t i = from; i < n; ++i) text += token_piece(vocab_.vocab, ids[i]);
        std::vector<int32_t> again;
        if (from < n) {
            if (!engine_tokenize(*engine_, text, again)) {
                return fail(out_error, ELIZA_ERR_FFI_FAULT, "litert-lm: the engine could not tokenize the prefill text");
            }
            const size_t want = n - from;
            size_t same = 0;
            while (same < want && same < again.size() && again[same] == ids[from + same]) ++same;
            if (same != want || again.size() != want) {
                const std::string got = same < again.size() ? std::to_string(again[same]) : std::string("nothing");
                return fail(out_error, ELIZA_ERR_INVALID_ARG,
                            "litert-lm: token_ids[" + std::to_string(from + same) + "] = " +
                                (same < want ? std::to_string(ids[from + same]) : std::string("(end)")) +
                                " does not survive the engine's text input (its text re-encodes as " + got +
                                "): LiteRT-LM's C API takes text, so only ids that are the encoding of their own "
                                "text can be sent; the llama.cpp path takes any ids");
            }
            if (!send_text(text)) {
                if (cancelled_.load()) return fail(out_error, ELIZA_ERR_CANCELLED, "prefill was cancelled");
                return fail(out_error, ELIZA_ERR_FFI_FAULT, "litert-lm: the engine's prefill failed");
            }
        }
        decoded_ = false;
        if (exact_) {
            exact_ids_.insert(exact_ids_.end(), ids, ids + n);  // ids the engine holds exactly as sent
        } else {
            text_after_ += text;
        }
        steps_ += n;
        prefilled_ = true;
        finished_ = false;
        generated_text_.clear();
        out_pending_.clear();
        id_backlog_.clear();
        handed_ids_ = 0;
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
        if (!prefilled_) return fail(out_error, ELIZA_ERR_INVALID_ARG, "nothing to continue from: call _prefill first");
        // What a previous chunk left (more bytes or ids than one call could carry) goes first.
        if (out_pending_.empty() && id_backlog_.empty() && !finished_) {
            std::string chunk;
            bool done = false;
            std::string error;
            if (!take_chunk(chunk, done, error)) {
                return fail(out_error, ELIZA_ERR_CANCELLED, "generation was cancelled");
            }
            if (!error.empty() && chunk.empty()) {
                finished_ = true;
                if (generated_ == 0) return fail(out_error, ELIZA_ERR_FFI_FAULT, "litert-lm: " + error);
            }
            const size_t budget = cfg_.max_tokens > 0 ? static_cast<size_t>(cfg_.max_tokens) : SIZE_MAX;
            if (!chunk.empty()) {
                generated_text_ += chunk;
                text_after_ += chunk;
                out_pending_ += chunk;
                ++generated_;
                exact_ = false;  // a generated token's id is inferred from its text (below)
                steps_ = std::min<size_t>(steps_ + 1, n_ctx_);
                std::vector<int32_t> ids = chunk_ids(chunk);
                if (handed_ids_ + id_backlog_.size() + ids.size() > budget) {
                    // A chunk of several tokens past the budget: its ids and its text end at it.
                    ids.resize(budget - std::min(budget, handed_ids_ + id_backlog_.size()));
                    std::string kept;
                    for (int32_t id : ids) kept += token_piece(vocab_.vocab, id);
                    out_pending_.resize(out_pending_.size() - chunk.size());
                    out_pending_ += kept;
                }
                id_backlog_.insert(id_backlog_.end(), ids.begin(), ids.end());
            }
            if (done || static_cast<size_t>(generated_) >= budget || handed_ids_ + id_backlog_.size() >= budget) {
                finished_ = true;
                stop_decode();
            }
        }
        // Text: whole UTF-8 characters, at most text_cap - 1 bytes per call.
        size_t cut = std::min(out_pending_.size(), text_cap - 1);
        while (cut > 0 && cut < out_pending_.size() &&
               (static_cast<unsigned char>(out_pending_[cut]) & 0xC0) == 0x80) {
            --cut;
        }
        std::memcpy(text_out, out_pending_.data(), cut);
        text_out[cut] = '\0';
        out_pending_.erase(0, cut);
        size_t n_ids = std::min(tokens_cap, id_backlog_.size());
        std::copy(id_backlog_.begin(), id_backlog_.begin() + static_cast<std::ptrdiff_t>(n_ids), tokens_out);
        id_backlog_.erase(id_backlog_.begin(), id_backlog_.begin() + static_cast<std::ptrdiff_t>(n_ids));
        *n_out = n_ids;
        handed_ids_ += n_ids;
        const bool last = finished_ && out_pending_.empty() && id_backlog_.empty();
        return last ? 1 : 0;
    }

    int cancel() override {
        cancelled_.store(true);
        api_.session_cancel_process(session_);
        std::lock_guard<std::mutex> lock(m_);
        signal();
        return ELIZA_OK;
    }

    // A new engine session: the engine's state and its "first turn" (it adds BOS then) are
    // those of a fresh stream, whatever the old session was doing.
    int reset() override {
        stop_decode();
        LiteRtLmSession * fresh = new_session(*engine_, cfg_, n_ctx_);
        if (fresh == nullptr) return ELIZA_ERR_FFI_FAULT;
        api_.session_delete(session_);
        session_ = fresh;
        clear_state();
        steps_ = 0;
        exact_ids_.clear();
        text_after_.clear();
        exact_ = true;
        cancelled_.store(false);
        return ELIZA_OK;
    }

    // The engine keeps its first n steps (BOS counted, as the seam counts the prefill's ids)
    // within the prefix whose ids it holds exactly as sent; past it, or with nothing to
    // keep, the full reset, returning 0. After a decode the engine's rewind_to_step does it,
    // where the model's ring caches still hold the window it resumes from (RingCache);
    // right after a prefill the engine still holds the prompt's last token as the next
    // decode's input, which a rewind does not drop, so the prefix is sent again to a fresh
    // session instead (the same state, at the cost of its prefill).
    int reset_keep(int32_t n_keep) override {
        const size_t keep = std::min<size_t>(n_keep > 0 ? static_cast<size_t>(n_keep) : 0, exact_ids_.size());
        if (keep == 0) {
            const int rc = reset();
            return rc == ELIZA_OK ? 0 : rc;
        }
        stop_decode();
        if (decoded_ && engine_->ring.rewinds_in_place(steps_ + kUngiven, keep) &&
            api_.session_rewind_to_step(session_, static_cast<int>(keep)) == 0) {
            clear_state();
            steps_ = keep;
            exact_ids_.resize(keep);
            text_after_.clear();
            exact_ = true;
            cancelled_.store(false);
            return static_cast<int>(keep);
        }
        std::vector<int32_t> kept(exact_ids_.begin(), exact_ids_.begin() + static_cast<std::ptrdiff_t>(keep));
        const int rc = reset();
        if (rc != ELIZA_OK) return rc;
        char * error = nullptr;
        if (prefill(kept.data(), kept.size(), &error) != ELIZA_OK) {
            std::free(error);
            const int again = reset();
            return again == ELIZA_OK ? 0 : again;
        }
        prefilled_ = false;  // as after a rewind: the next call is a prefill
        return static_cast<int>(keep);
    }

    // A slot file holds what the engine was given and gave, not its cache (the C API has no
    // way out for it): the exact ids, the text after them, and this turn's generation.
    // Restoring sends them to a fresh session again, which rebuilds the same state as far as
    // the generated text is the canonical encoding of the engine's tokens.
    // "ELZLRTS1", then little-endian u32 n_ids, u32 text bytes, u32 generated-text bytes (a
    // suffix of the text), i32 generated chunks, u32 generated ids, u32 flags; the ids (i32),
    // the text; the XXH64 of the stream's config key and everything before it.
    int save_slot(const char * filename, char ** out_error) override {
        if (const int rc = check_slot_save(filename, cancelled_.load(), out_error); rc != ELIZA_OK) return rc;
        std::string out(kSlotMagic, sizeof kSlotMagic);
        put<uint32_t>(out, static_cast<uint32_t>(exact_ids_.size()));
        put<uint32_t>(out, static_cast<uint32_t>(text_after_.size()));
        put<uint32_t>(out, static_cast<uint32_t>(generated_text_.size()));
        put<int32_t>(out, generated_);
        put<uint32_t>(out, static_cast<uint32_t>(handed_ids_ + id_backlog_.size()));
        put<uint32_t>(out, (prefilled_ ? kFlagPrefilled : 0u) | (finished_ ? kFlagFinished : 0u));
        for (int32_t t : exact_ids_) put<int32_t>(out, t);
        out += text_after_;
        put<uint64_t>(out, seal(out));
        return write_slot_file(filename, out, out_error);
    }

    int restore_slot(const char * filename, char ** out_error) override {
        constexpr size_t header = sizeof kSlotMagic + 4 * 6;
        std::string data, name;
        const int read = read_slot_file(filename, kSlotMagic, header + 8, "a LiteRT-LM slot file", data, name, out_error);
        if (read != ELIZA_OK) return read;
        size_t at = data.size() - 8;
        if (get<uint64_t>(data, at) != seal(data.substr(0, data.size() - 8))) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG,
                        name + " is corrupt or was saved by a stream of another configuration (checksum mismatch)");
        }
        at = sizeof kSlotMagic;
        const uint32_t n_ids = get<uint32_t>(data, at), n_text = get<uint32_t>(data, at), n_gen = get<uint32_t>(data, at);
        const int32_t generated = get<int32_t>(data, at);
        const uint32_t handed = get<uint32_t>(data, at);
        const uint32_t flags = get<uint32_t>(data, at);
        if (header + uint64_t{n_ids} * 4 + n_text + 8 != data.size() || n_gen > n_text || n_ids > n_ctx_ ||
            (flags & ~(kFlagPrefilled | kFlagFinished)) != 0) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " has inconsistent sizes or flags");
        }
        std::vector<int32_t> ids(n_ids);
        for (auto & t : ids) t = get<int32_t>(data, at);
        const std::string text = data.substr(at, n_text);
        // Everything checked: now the stream's state is replaced.
        const int rc = reset();
        if (rc != ELIZA_OK) return fail(out_error, rc, "litert-lm: cannot start a fresh session");
        if (!ids.empty()) {
            const int p = prefill(ids.data(), ids.size(), out_error);
            if (p != ELIZA_OK) return p;
        }
        if (!text.empty()) {
            if (!send_text(text)) {
                reset();
                return fail(out_error, ELIZA_ERR_FFI_FAULT, "litert-lm: the engine's prefill of the slot's text failed");
            }
            text_after_ = text;
            exact_ = false;
        }
        generated_text_ = text.substr(text.size() - n_gen);
        handed_ids_ = handed;
        generated_ = generated;
        prefilled_ = (flags & kFlagPrefilled) != 0;
        finished_ = (flags & kFlagFinished) != 0;
        return ELIZA_OK;
    }

private:
    static void on_chunk(void * data, const LiteRtLmStreamChunk * chunk) {
        auto * self = static_cast<LiteRtSession *>(data);
        const Api & api = self->api_;
        const char * text = api.stream_chunk_get_text(chunk);
        const char * error = api.stream_chunk_get_error(chunk);
        const bool final = api.stream_chunk_is_final(chunk);
        std::unique_lock<std::mutex> lock(self->m_);
        if (error != nullptr && error[0] != '\0') self->error_ = error;
        if (text != nullptr && text[0] != '\0' && !self->stopping_) self->chunks_.emplace_back(text);
        if (final) self->decoding_ = false;
        self->signal();
        // The engine's thread returns (and computes the next step) once the stream has taken
        // every chunk and asks for another, or stops.
        if (!final) {
            self->await(lock, [self] {
                return (self->wanted_ && self->chunks_.empty()) || self->stopping_ || self->cancelled_.load();
            }, kEngineSpin);
        }
    }

    void signal() {
        signals_.fetch_add(1, std::memory_order_release);
        cv_.notify_all();
    }

    // Waits (m_ held) until ready(): a spin on signals_ of up to `spin` first, then the
    // condition variable.
    template <typename Ready>
    void await(std::unique_lock<std::mutex> & lock, Ready ready, std::chrono::steady_clock::duration spin) {
        if (ready()) return;
        if (spin.count() > 0) {
            const uint64_t seen = signals_.load(std::memory_order_acquire);
            lock.unlock();
            const auto until = std::chrono::steady_clock::now() + spin;
            while (signals_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
                cpu_relax();
            }
            lock.lock();
        }
        cv_.wait(lock, ready);
    }

    // One chunk of the running decode (started here when none runs). False: cancelled.
    bool take_chunk(std::string & chunk, bool & done, std::string & error) {
        std::unique_lock<std::mutex> lock(m_);
        if (!decoding_ && !decode_ended_) {
            decoding_ = true;
            decoded_ = true;
            stopping_ = false;
            last_step_ = std::chrono::steady_clock::duration::max();  // the first step is not a short one
            lock.unlock();
            const int rc = api_.session_run_decode_async(session_, &LiteRtSession::on_chunk, this);
            lock.lock();
            if (rc != 0) {
                decoding_ = false;
                error = "the engine could not start decoding";
                done = true;
                return true;
            }
        }
        wanted_ = true;
        signal();
        const auto asked = std::chrono::steady_clock::now();
        const auto spin = last_step_ < kShortStep ? 2 * last_step_ : std::chrono::steady_clock::duration::zero();
        await(lock, [this] { return !chunks_.empty() || !decoding_ || cancelled_.load(); }, spin);
        wanted_ = false;
        last_step_ = std::chrono::steady_clock::now() - asked;
        if (cancelled_.load()) return false;
        if (!chunks_.empty()) {
            chunk = std::move(chunks_.front());
            chunks_.pop_front();
        }
        done = !decoding_ && chunks_.empty();
        if (done) {
            decode_ended_ = true;
            error = error_;
            error_.clear();
        }
        return true;
    }

    bool send_text(const std::string & text) {
        LiteRtLmInputData * input = api_.input_data_create(kLiteRtLmInputDataTypeText, text.data(), text.size());
        if (input == nullptr) return false;
        const LiteRtLmInputData * inputs[] = {input};
        const int rc = api_.session_run_prefill(session_, inputs, 1);
        api_.input_data_delete(input);
        return rc == 0;
    }

    uint64_t seal(const std::string & bytes) const {
        std::string keyed = slot_key_;
        keyed += bytes;
        return Xxh64::of(keyed.data(), keyed.size());
    }

    // Ends a decode in flight and waits for the engine's last callback: nothing of the
    // engine's thread touches this stream afterwards.
    void stop_decode() {
        std::unique_lock<std::mutex> lock(m_);
        if (decoding_) {
            stopping_ = true;
            chunks_.clear();
            signal();
            lock.unlock();
            api_.session_cancel_process(session_);
            lock.lock();
            cv_.wait(lock, [this] { return !decoding_; });
        }
        chunks_.clear();
        stopping_ = false;
        decode_ended_ = false;
        error_.clear();
    }

    // The ids of a chunk: the piece whose text it is (a chunk is one token's text, unless
    // the engine merged the bytes of one character, or a byte that is not UTF-8 came back
    // as U+FFFD); otherwise the engine's tokenizer's encoding of the chunk.
    std::vector<int32_t> chunk_ids(const std::string & chunk) const {
        const auto found = engine_->piece_ids.find(chunk);
        if (found != engine_->piece_ids.end()) return {found->second};
        std::vector<int32_t> ids;
        engine_tokenize(*engine_, chunk, ids);
        return ids;
    }

    void clear_state() {
        prefilled_ = false;
        finished_ = false;
        generated_text_.clear();
        out_pending_.clear();
        id_backlog_.clear();
        handed_ids_ = 0;
        generated_ = 0;
    }

    std::shared_ptr<Engine> engine_;
    const Api & api_;
    LiteRtLmSession * session_;
    VocabView vocab_;
    eliza_llm_stream_config_t cfg_;
    uint32_t n_ctx_;
    std::string slot_key_;  // what a slot file is sealed to: the sampling that produced it

    std::mutex m_;
    std::condition_variable cv_;
    std::atomic<uint64_t> signals_{0};  // counts signal(): what await() spins on
    std::deque<std::string> chunks_;  // at most one: the engine waits until it is taken
    bool wanted_ = false;             // take_chunk waits for a chunk: the engine may compute one
    // how long take_chunk last waited for its chunk (none yet: long, so the first does not spin)
    std::chrono::steady_clock::duration last_step_ = std::chrono::steady_clock::duration::max();
    bool decoding_ = false;           // a run_decode_async has not delivered its final chunk
    bool decode_ended_ = false;       // this turn's decode delivered its final chunk
    bool stopping_ = false;           // stop_decode: the engine's thread must not wait
    std::string error_;               // the engine's error for this decode, if any
    std::atomic<bool> cancelled_{false};

    size_t steps_ = 0;          // tokens in the engine's state (BOS counted), as far as known
    std::vector<int32_t> exact_ids_;  // the prefix of the engine's state known to be exactly these ids
    std::string text_after_;          // what the engine holds after them, as text (generated, later prefills)
    bool exact_ = true;         // nothing generated since the last (re)start
    bool decoded_ = false;      // a decode ran since the last prefill
    bool prefilled_ = false;
    bool finished_ = false;
    int32_t generated_ = 0;     // chunks of this turn
    std::string generated_text_;
    std::string out_pending_;   // text not yet handed out
    std::vector<int32_t> id_backlog_;
    size_t handed_ids_ = 0;  // ids handed out this turn
};

class LiteRtFactory final : public GateFactory {
public:
    using GateFactory::GateFactory;

    bool available() const override { return runtime().why_not.empty(); }

    LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * cfg,
                             char ** out_error) override {
        const Runtime & rt = runtime();
        if (!rt.why_not.empty()) {
            fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED, std::string(name()) + ": " + rt.why_not);
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
        if (cfg->repeat_penalty > 0.0f && cfg->repeat_penalty != 1.0f) {
            fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
                 std::string(name()) + ": LiteRT-LM's sampler has no repeat penalty (repeat_penalty " +
                     std::to_string(cfg->repeat_penalty) + "); use 1 (off), or the llama.cpp path");
            return nullptr;
        }
        int code = ELIZA_OK;
        std::string message;
        VocabView vocab;
        if (!ensure_vocab(*ctx, vocab, code, message)) {
            fail(out_error, code, std::string(name()) + ": " + message);
            return nullptr;
        }
        const uint32_t n_ctx = context_size(*ctx);
        std::shared_ptr<Engine> engine = context_engine(rt, *ctx, vocab, n_ctx, message);
        if (!engine) {
            fail(out_error, ELIZA_ERR_BUNDLE_INVALID, std::string(name()) + ": " + message);
            return nullptr;
        }
        LiteRtLmSession * session = new_session(*engine, *cfg, n_ctx);
        if (session == nullptr) {
            fail(out_error, ELIZA_ERR_FFI_FAULT,
                 std::string(name()) + ": the engine refused a session (one stream at a time per context: close "
                                       "the other stream first)");
            return nullptr;
        }
        auto * stream = new (std::nothrow) LiteRtSession(std::move(engine), session, vocab, *cfg, n_ctx);
        if (stream == nullptr) {
            rt.api.session_delete(session);
            fail(out_error, ELIZA_ERR_OOM, std::string(name()) + ": out of memory");
        }
        return stream;
    }
};

}  // namespace

LlmBackendFactory & litert_factory(const GateSpec & spec) {
    static LiteRtFactory instance(spec);
    return instance;
}

}  // namespace eliza::backends
