#include "context.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <thread>
#include <vector>

#include "status.h"

namespace fs = std::filesystem;

namespace eliza {
namespace {

constexpr uint32_t kMaxDefaultCtx = 4096;
constexpr int32_t kMaxDefaultThreads = 8;

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

// FNV-1a over the file size, the parameter count, llama.cpp's description and the first
// and last 64 KiB of the file (header and tensor data): cheap, and different for another
// model even when its vocabulary and shapes match.
uint64_t model_identity(const fs::path & path, const llama_model * model) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void * data, size_t n) {
        const auto * p = static_cast<const unsigned char *>(data);
        for (size_t i = 0; i < n; ++i) {
            h ^= p[i];
            h *= 1099511628211ull;
        }
    };
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    const uint64_t params = llama_model_n_params(model);
    char desc[256] = {0};
    llama_model_desc(model, desc, sizeof desc);
    mix(&size, sizeof size);
    mix(&params, sizeof params);
    mix(desc, std::strlen(desc));
    std::ifstream f(path, std::ios::binary);
    std::vector<char> block(64 * 1024);
    f.read(block.data(), static_cast<std::streamsize>(block.size()));
    mix(block.data(), static_cast<size_t>(f.gcount()));
    f.clear();
    f.seekg(size > block.size() ? static_cast<std::streamoff>(size - block.size()) : 0);
    f.read(block.data(), static_cast<std::streamsize>(block.size()));
    mix(block.data(), static_cast<size_t>(f.gcount()));
    return h;
}

}  // namespace

bool resolve_runtime_limits(const llama_model * model, RuntimeLimits & out, std::string & message) {
    long ctx_override = 0;
    long threads_override = 0;
    if (!positive_env("ELIZA_N_CTX", 1L << 24, ctx_override, message) ||
        !positive_env("ELIZA_N_THREADS", 1024, threads_override, message)) {
        return false;
    }
    const int32_t trained = llama_model_n_ctx_train(model);
    out.n_ctx = ctx_override > 0 ? static_cast<uint32_t>(ctx_override)
                                 : std::min<uint32_t>(trained > 0 ? static_cast<uint32_t>(trained) : kMaxDefaultCtx,
                                                      kMaxDefaultCtx);
    const int32_t hw = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    out.n_threads = threads_override > 0 ? static_cast<int32_t>(threads_override) : std::min(hw, kMaxDefaultThreads);
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

std::unique_ptr<EliInferenceContext> load_context(const char * bundle_dir, int & code, std::string & message) {
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
    if (ggufs.empty()) {
        message = "bundle '" + root.string() + "' has no text model: expected exactly one text/*.gguf";
        return nullptr;
    }
    if (ggufs.size() > 1) {
        std::sort(ggufs.begin(), ggufs.end());
        message = "bundle '" + root.string() + "' has " + std::to_string(ggufs.size()) +
                  " text/*.gguf files (" + ggufs[0].filename().string() + ", " + ggufs[1].filename().string() +
                  ", ...); keep exactly one";
        return nullptr;
    }

    ensure_backend_initialised();
    clear_llama_error();
    llama_model_params mparams = llama_model_default_params();
    LlamaModelPtr model(llama_model_load_from_file(ggufs[0].string().c_str(), mparams));
    if (!model) {
        const std::string why = last_llama_error();
        message = "cannot load text model '" + ggufs[0].string() + "'" +
                  (why.empty() ? std::string(": not a valid GGUF model") : ": " + why);
        return nullptr;
    }

    auto ctx = std::make_unique<EliInferenceContext>();
    if (!resolve_runtime_limits(model.get(), ctx->limits, message)) {
        code = ELIZA_ERR_INVALID_ARG;
        return nullptr;
    }
    ctx->bundle_dir = root.string();
    ctx->model_path = ggufs[0].string();
    ctx->vocab = llama_model_get_vocab(model.get());
    ctx->n_vocab = llama_vocab_n_tokens(ctx->vocab);
    for (llama_token t = 0; t < ctx->n_vocab; ++t) {
        ctx->max_piece_bytes = std::max(ctx->max_piece_bytes, token_piece(ctx->vocab, t).size());
    }
    ctx->model_id = model_identity(ggufs[0], model.get());
    ctx->model = std::move(model);
    code = ELIZA_OK;
    return ctx;
}

}  // namespace eliza
