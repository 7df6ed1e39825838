#include "context.h"

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <locale>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "llm-backend.h"
#include "status.h"
#include "xxh64.h"

namespace fs = std::filesystem;

namespace eliza {
namespace {

constexpr uint32_t kMaxDefaultCtx = 4096;
constexpr int32_t kMaxPoolThreads = 8;     // default threads of one stream's decode
constexpr long kMaxThreadOverride = 512;   // GGML_MAX_N_THREADS

// Reads a positive integer override up to max; absent -> 0; malformed or too big -> false.
bool positive_env(const char * name, long max, long & value, std::string & message) {
    value = 0;
    const char * raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') {
        return true;
    }
    errno = 0;
    char * end = nullptr;
    long parsed = std::strtol(raw, &end, 10);
    if (errno != 0 || end == raw || *end != '\0' || parsed <= 0 || parsed > max) {
        message = std::string(name) + "='" + raw + "' is not a positive integer up to " + std::to_string(max) +
                  "; unset it or give e.g. 512";
        return false;
    }
    value = parsed;
    return true;
}

// XXH64 of the whole model file: metadata and every tensor's data, so a slot file of a
// model that differs anywhere (same shapes, other weights) is refused. Read with plain
// read(2) in 4 MiB blocks; llama.cpp maps the same file lazily, so this also brings it
// into the page cache.
bool model_identity(const fs::path & path, uint64_t & out, std::string & message) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        message = "cannot reopen '" + path.string() + "' to hash it: " + std::strerror(errno);
        return false;
    }
    Xxh64 h;
    std::vector<unsigned char> block(4u << 20);
    for (;;) {
        const ssize_t got = ::read(fd, block.data(), block.size());
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            message = "cannot read '" + path.string() + "' to hash it: " + std::strerror(errno);
            ::close(fd);
            return false;
        }
        if (got == 0) break;
        h.update(block.data(), static_cast<size_t>(got));
    }
    ::close(fd);
    out = h.digest();
    return true;
}

// Reads an integer from 0 to max; absent -> fallback; malformed or out of range -> false.
bool count_env(const char * name, long max, long fallback, long & value, std::string & message) {
    value = fallback;
    const char * raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') {
        return true;
    }
    errno = 0;
    char * end = nullptr;
    const long parsed = std::strtol(raw, &end, 10);
    if (errno != 0 || end == raw || *end != '\0' || parsed < 0 || parsed > max) {
        message = std::string(name) + "='" + raw + "' is not an integer from 0 to " + std::to_string(max) +
                  "; unset it or give e.g. " + std::to_string(fallback);
        return false;
    }
    value = parsed;
    return true;
}

// Reads a decimal number from 0 to 1 (a '.' as the decimal point, whatever the process's
// locale); absent -> fallback; malformed or out of range -> false.
bool fraction_env(const char * name, double fallback, double & value, std::string & message) {
    value = fallback;
    const char * raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') {
        return true;
    }
    std::istringstream in{std::string(raw)};
    in.imbue(std::locale::classic());
    double parsed = -1.0;
    in >> std::noskipws >> parsed;
    if (in.fail() || !in.eof() || !std::isfinite(parsed) || parsed < 0.0 || parsed > 1.0) {
        std::ostringstream example;
        example.imbue(std::locale::classic());
        example << fallback;
        message = std::string(name) + "='" + raw + "' is not a number from 0 to 1; unset it or give e.g. " +
                  example.str();
        return false;
    }
    value = parsed;
    return true;
}

}  // namespace

bool read_settings(Settings & out, std::string & message) {
    return positive_env("ELIZA_N_CTX", 1L << 24, out.n_ctx, message) &&
           positive_env("ELIZA_N_THREADS", kMaxThreadOverride, out.n_threads, message) &&
           fraction_env("ELIZA_DRAFT_P_MIN", Settings::kDefaultDraftPMin, out.draft_p_min, message) &&
           count_env("ELIZA_DRAFT_BACKOFF_MAX", Settings::kMaxDraftBackoff, Settings::kDefaultDraftBackoffMax,
                     out.draft_backoff_max, message);
}

int available_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadBudget & ThreadBudget::instance() {
    static ThreadBudget * budget = new ThreadBudget();  // never destroyed: streams may outlive statics
    return *budget;
}

void ThreadBudget::set_capacity(int n) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        capacity_ = std::max(1, n);
    }
    cv_.notify_all();
}

int ThreadBudget::capacity() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return capacity_;
}

void ThreadBudget::enter() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++active_;
}

void ThreadBudget::leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    --active_;
}

int ThreadBudget::acquire(int want, const std::atomic<bool> & cancelled) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        if (cancelled.load()) {
            return 0;
        }
        const int share = capacity_ / std::max(1, active_);
        const int free = capacity_ - in_use_;
        if (want >= 2 && share >= 2 && free >= 2) {
            // Several threads, only within free cores: every thread of the decode runs.
            const int granted = std::min({want, share, free});
            in_use_ += granted;
            ++multi_;
            return granted;
        }
        if (multi_ == 0 || free >= 1) {
            in_use_ += 1;
            return 1;
        }
        cv_.wait(lock);
    }
}

void ThreadBudget::release(int n) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        in_use_ -= n;
        if (n >= 2) --multi_;
    }
    cv_.notify_all();
}

void ThreadBudget::wake() {
    { std::lock_guard<std::mutex> lock(mutex_); }
    cv_.notify_all();
}

bool resolve_runtime_limits(const llama_model * model, const Settings & settings, RuntimeLimits & out,
                            std::string & message) {
    (void) message;
    const int32_t trained = llama_model_n_ctx_train(model);
    out.n_ctx = settings.n_ctx > 0 ? static_cast<uint32_t>(settings.n_ctx)
                                   : std::min<uint32_t>(trained > 0 ? static_cast<uint32_t>(trained) : kMaxDefaultCtx,
                                                        kMaxDefaultCtx);
    const int cpus = available_cpus();
    const int budget = settings.n_threads > 0 ? static_cast<int>(settings.n_threads) : cpus;
    out.n_threads = settings.n_threads > 0 ? static_cast<int32_t>(settings.n_threads)
                                           : std::min<int32_t>(cpus, kMaxPoolThreads);
    ThreadBudget::instance().set_capacity(budget);
    return true;
}

std::string token_piece(const llama_vocab * vocab, llama_token token) {
    char small[64];
    int32_t n = llama_token_to_piece(vocab, token, small, sizeof small, 0, false);
    if (n >= 0) {
        return std::string(small, static_cast<size_t>(n));
    }
    std::string big(static_cast<size_t>(-n), '\0');
    n = llama_token_to_piece(vocab, token, big.data(), static_cast<int32_t>(big.size()), 0, false);
    big.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return big;
}

namespace {

// A loaded model's vocabulary and the longest text one of its tokens renders to.
VocabView vocab_view(const llama_model * model) {
    VocabView v;
    v.vocab = llama_model_get_vocab(model);
    v.n_vocab = llama_vocab_n_tokens(v.vocab);
    for (llama_token t = 0; t < v.n_vocab; ++t) {
        v.max_piece_bytes = std::max(v.max_piece_bytes, token_piece(v.vocab, t).size());
    }
    return v;
}

// Loads ctx.model_path and fills what the llama.cpp path reads from the context.
bool load_model(EliInferenceContext & ctx, int & code, std::string & message) {
    code = ELIZA_ERR_BUNDLE_INVALID;
    ensure_backend_initialised();
    llama_model_params mparams = llama_model_default_params();
    LlamaModelPtr model(llama_model_load_from_file(ctx.model_path.c_str(), mparams));
    if (!model) {
        const std::string why = llama_error_chain();
        message = "cannot load text model '" + ctx.model_path + "'" +
                  (why.empty() ? std::string(": not a valid GGUF model") : ": " + why);
        return false;
    }
    if (!resolve_runtime_limits(model.get(), ctx.settings, ctx.limits, message)) {
        code = ELIZA_ERR_INVALID_ARG;
        return false;
    }
    if (!model_identity(fs::path(ctx.model_path), ctx.model_id, message)) {
        return false;
    }
    const VocabView v = vocab_view(model.get());
    ctx.vocab = v.vocab;
    ctx.n_vocab = v.n_vocab;
    ctx.max_piece_bytes = v.max_piece_bytes;
    ctx.model = std::move(model);
    ctx.loaded.store(true, std::memory_order_release);
    code = ELIZA_OK;
    return true;
}

}  // namespace

bool ensure_model(EliInferenceContext & ctx, int & code, std::string & message) {
    if (ctx.loaded.load(std::memory_order_acquire)) {
        return true;
    }
    std::lock_guard<std::mutex> lock(ctx.load_mutex);
    if (ctx.loaded.load(std::memory_order_acquire)) {
        return true;
    }
    if (ctx.model_path.empty()) {
        code = ELIZA_ERR_BUNDLE_INVALID;
        message = "bundle '" + ctx.bundle_dir + "' has no text/*.gguf for the llama.cpp path (it holds an artifact of " +
                  ctx.served_by + ", which did not serve this call)";
        return false;
    }
    return load_model(ctx, code, message);
}

bool ensure_vocab(EliInferenceContext & ctx, VocabView & out, int & code, std::string & message) {
    if (ctx.loaded.load(std::memory_order_acquire)) {
        out = VocabView{ctx.vocab, ctx.n_vocab, ctx.max_piece_bytes};
        return true;
    }
    if (ctx.vocab_loaded.load(std::memory_order_acquire)) {
        out = ctx.vocab_only;
        return true;
    }
    std::lock_guard<std::mutex> lock(ctx.load_mutex);
    if (ctx.loaded.load(std::memory_order_acquire)) {
        out = VocabView{ctx.vocab, ctx.n_vocab, ctx.max_piece_bytes};
        return true;
    }
    if (!ctx.vocab_loaded.load(std::memory_order_acquire)) {
        code = ELIZA_ERR_BUNDLE_INVALID;
        if (ctx.model_path.empty()) {
            message = "bundle '" + ctx.bundle_dir + "' has no text/*.gguf for the llama.cpp path (it holds an "
                      "artifact of " + ctx.served_by + ", which did not serve this call); its vocabulary is the "
                      "one every backend tokenizes with";
            return false;
        }
        ensure_backend_initialised();
        llama_model_params mparams = llama_model_default_params();
        mparams.vocab_only = true;
        LlamaModelPtr model(llama_model_load_from_file(ctx.model_path.c_str(), mparams));
        if (!model) {
            const std::string why = llama_error_chain();
            message = "cannot load the vocabulary of '" + ctx.model_path + "'" +
                      (why.empty() ? std::string(": not a valid GGUF model") : ": " + why);
            return false;
        }
        ctx.vocab_only = vocab_view(model.get());
        ctx.vocab_model = std::move(model);
        ctx.vocab_loaded.store(true, std::memory_order_release);
    }
    out = ctx.vocab_only;
    return true;
}

std::unique_ptr<EliInferenceContext> load_context(const char * bundle_dir, int & code, std::string & message) {
    code = ELIZA_ERR_INVALID_ARG;
    auto ctx = std::make_unique<EliInferenceContext>();
    if (!read_settings(ctx->settings, message)) {
        return nullptr;
    }
    code = ELIZA_ERR_BUNDLE_INVALID;
    std::error_code ec;
    const fs::path root(bundle_dir);
    if (!fs::is_directory(root, ec)) {
        message = "bundle directory '" + root.string() + "' does not exist or is not a directory";
        return nullptr;
    }
    const fs::path text_dir = root / "text";
    std::vector<fs::path> ggufs;
    if (fs::is_directory(text_dir, ec)) {
        for (const auto & entry : fs::directory_iterator(text_dir, ec)) {
            if (entry.path().extension() == ".gguf" && entry.is_regular_file(ec)) {
                ggufs.push_back(entry.path());
            }
        }
    }
    if (ggufs.size() > 1) {
        std::sort(ggufs.begin(), ggufs.end());
        message = "bundle '" + root.string() + "' has " + std::to_string(ggufs.size()) +
                  " text/*.gguf files (" + ggufs[0].filename().string() + ", " + ggufs[1].filename().string() +
                  ", ...); keep exactly one";
        return nullptr;
    }
    llm_backend_register_builtins();
    ctx->served_by = seam::serving_names(bundle_dir);
    if (ggufs.empty() && ctx->served_by.empty()) {
        const std::string registered = seam::registered_names();
        message = "bundle '" + root.string() + "' has no text model: expected exactly one text/*.gguf" +
                  (registered.empty() ? std::string()
                                      : ", or an artifact one of the compiled-in backends serves (" + registered + ")");
        return nullptr;
    }
    ctx->bundle_dir = root.string();
    ctx->model_path = ggufs.empty() ? std::string() : ggufs[0].string();
    // Loaded now when only the llama.cpp path can serve the bundle, so a bad GGUF fails
    // _create; otherwise when the llama.cpp path first needs it.
    if (ctx->served_by.empty() && !load_model(*ctx, code, message)) {
        return nullptr;
    }
    code = ELIZA_OK;
    return ctx;
}

void destroy_context(EliInferenceContext * ctx) {
    if (ctx == nullptr) return;
    llama_model * model = ctx->model.release();
    delete ctx;
    llama_model_free(model);
}

void retain_context(EliInferenceContext * ctx) {
    if (ctx != nullptr) ctx->holders.fetch_add(1, std::memory_order_relaxed);
}

void release_context(EliInferenceContext * ctx) {
    // acq_rel: every stream's last use of the model happens before the free.
    if (ctx != nullptr && ctx->holders.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        destroy_context(ctx);
    }
}

}  // namespace eliza
