// The C ABI. Every entry point validates its handles, runs inside guarded() so no C++
// exception crosses the boundary, and reports failures as a status plus *out_error.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "context.h"
#include "eliza-inference-ffi.h"
#include "llama_stream.h"
#include "llm-backend.h"
#include "status.h"

struct EliLlmStream {
    std::unique_ptr<LlmBackendSession> backend;  // non-null: an alternate runtime owns this stream
    std::unique_ptr<LlamaStream> llama;          // in-tree llama.cpp path
};

const char * llm_backend_context_bundle_dir(const EliInferenceContext * ctx) {
    return ctx ? ctx->bundle_dir.c_str() : nullptr;
}

static_assert(sizeof(eliza_llm_stream_config_t) == 64, "eliza_llm_stream_config_t is 64 bytes on LP64");
static_assert(offsetof(eliza_llm_stream_config_t, max_tokens) == 0, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, temperature) == 4, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, top_p) == 8, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, top_k) == 12, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, repeat_penalty) == 16, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, slot_id) == 20, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, prompt_cache_key) == 24, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, draft_min) == 32, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, draft_max) == 36, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, mtp_drafter_path) == 40, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, gbnf_grammar) == 48, "ABI offset");
static_assert(offsetof(eliza_llm_stream_config_t, disable_thinking) == 56, "ABI offset");

namespace {

using eliza::fail;

// Runs body and turns any escaping exception into a status: the C ABI never throws.
template <typename Body> int guarded(const char * fn, char ** out_error, Body && body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        return fail(out_error, ELIZA_ERR_OOM, std::string(fn) + ": out of memory");
    } catch (const std::exception & e) {
        return fail(out_error, ELIZA_ERR_FFI_FAULT, std::string(fn) + ": " + e.what());
    } catch (...) {
        return fail(out_error, ELIZA_ERR_FFI_FAULT, std::string(fn) + ": unknown exception");
    }
}

// Prefixes a component's message with the entry point's name.
int report(const char * fn, char ** out_error, int rc, const std::string & message) {
    return rc < 0 ? fail(out_error, rc, std::string(fn) + ": " + message) : rc;
}

}  // namespace

extern "C" {

const char * eliza_inference_abi_version(void) {
#define ELIZA_STR2(x) #x
#define ELIZA_STR(x) ELIZA_STR2(x)
    return ELIZA_STR(ELIZA_INFERENCE_ABI_VERSION);
}

void eliza_inference_free_string(char * s) { std::free(s); }

EliInferenceContext * eliza_inference_create(const char * bundle_dir, char ** out_error) {
    if (out_error) *out_error = nullptr;
    EliInferenceContext * result = nullptr;
    guarded("eliza_inference_create", out_error, [&] {
        if (bundle_dir == nullptr || bundle_dir[0] == '\0') {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, "eliza_inference_create: bundle_dir is NULL or empty");
        }
        int code = ELIZA_OK;
        std::string message;
        std::unique_ptr<EliInferenceContext> ctx = eliza::load_context(bundle_dir, code, message);
        if (!ctx) {
            return report("eliza_inference_create", out_error, code, message);
        }
        result = ctx.release();
        return ELIZA_OK;
    });
    return result;
}

void eliza_inference_destroy(EliInferenceContext * ctx) { delete ctx; }

int eliza_inference_tokenize_supported(void) { return 1; }

int eliza_inference_tokenize(EliInferenceContext * ctx, const char * text, size_t len, int add_special,
                             int parse_special, int ** out_tokens, size_t * out_n, char ** out_error) {
    if (out_error) *out_error = nullptr;
    return guarded("eliza_inference_tokenize", out_error, [&] {
        const char * fn = "eliza_inference_tokenize";
        if (ctx == nullptr || out_tokens == nullptr || out_n == nullptr || (text == nullptr && len > 0)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG,
                        std::string(fn) + ": ctx, out_tokens and out_n must be non-NULL (text too when len > 0)");
        }
        *out_tokens = nullptr;
        *out_n = 0;
        if (len > static_cast<size_t>(INT32_MAX)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": text longer than 2^31-1 bytes");
        }
        const int32_t text_len = static_cast<int32_t>(len);
        std::vector<llama_token> tokens(len + 2);
        int32_t n = llama_tokenize(ctx->vocab, text ? text : "", text_len, tokens.data(),
                                   static_cast<int32_t>(tokens.size()), add_special != 0, parse_special != 0);
        if (n < 0) {
            tokens.resize(static_cast<size_t>(-n));
            n = llama_tokenize(ctx->vocab, text, text_len, tokens.data(), static_cast<int32_t>(tokens.size()),
                               add_special != 0, parse_special != 0);
        }
        if (n < 0) {
            return fail(out_error, ELIZA_ERR_FFI_FAULT, std::string(fn) + ": llama_tokenize failed");
        }
        if (n > 0) {
            int * out = static_cast<int *>(std::malloc(sizeof(int) * static_cast<size_t>(n)));
            if (out == nullptr) {
                return fail(out_error, ELIZA_ERR_OOM, std::string(fn) + ": out of memory");
            }
            for (int32_t i = 0; i < n; ++i) out[i] = tokens[static_cast<size_t>(i)];
            *out_tokens = out;
        }
        *out_n = static_cast<size_t>(n);
        return static_cast<int>(n);
    });
}

int eliza_inference_detokenize(EliInferenceContext * ctx, const int32_t * tokens, size_t n, int remove_special,
                               int unparse_special, char ** out_text, size_t * out_len, char ** out_error) {
    if (out_error) *out_error = nullptr;
    return guarded("eliza_inference_detokenize", out_error, [&] {
        const char * fn = "eliza_inference_detokenize";
        if (ctx == nullptr || out_text == nullptr || out_len == nullptr || (tokens == nullptr && n > 0)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG,
                        std::string(fn) + ": ctx, out_text and out_len must be non-NULL (tokens too when n > 0)");
        }
        if (n > static_cast<size_t>((INT32_MAX - 16) / 8)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": too many tokens (n > 2^28)");
        }
        *out_text = nullptr;
        *out_len = 0;
        for (size_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || tokens[i] >= ctx->n_vocab) {
                return fail(out_error, ELIZA_ERR_INVALID_ARG,
                            std::string(fn) + ": tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                                " is outside the vocabulary [0, " + std::to_string(ctx->n_vocab) + ")");
            }
        }
        std::string text(n * 8 + 16, '\0');
        int32_t got = llama_detokenize(ctx->vocab, tokens, static_cast<int32_t>(n), text.data(),
                                       static_cast<int32_t>(text.size()), remove_special != 0, unparse_special != 0);
        if (got < 0) {
            text.resize(static_cast<size_t>(-got));
            got = llama_detokenize(ctx->vocab, tokens, static_cast<int32_t>(n), text.data(),
                                   static_cast<int32_t>(text.size()), remove_special != 0, unparse_special != 0);
        }
        if (got < 0) {
            return fail(out_error, ELIZA_ERR_FFI_FAULT, std::string(fn) + ": llama_detokenize failed");
        }
        text.resize(static_cast<size_t>(got));
        *out_text = eliza::dup_c_string(text);
        if (*out_text == nullptr) {
            return fail(out_error, ELIZA_ERR_OOM, std::string(fn) + ": out of memory");
        }
        *out_len = text.size();
        return ELIZA_OK;
    });
}

void eliza_inference_free_tokens(int * tokens) { std::free(tokens); }

int eliza_inference_llm_stream_supported(void) { return 1; }

EliLlmStream * eliza_inference_llm_stream_open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * cfg,
                                               char ** out_error) {
    if (out_error) *out_error = nullptr;
    EliLlmStream * result = nullptr;
    guarded("eliza_inference_llm_stream_open", out_error, [&] {
        const char * fn = "eliza_inference_llm_stream_open";
        if (ctx == nullptr || cfg == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": ctx and cfg must be non-NULL");
        }
        auto stream = std::make_unique<EliLlmStream>();
        llm_backend_register_builtins();
        char * select_error = nullptr;
        LlmBackendFactory * factory = llm_backend_select(ctx->bundle_dir.c_str(), cfg, &select_error);
        if (select_error != nullptr) {
            const std::string why = select_error;
            std::free(select_error);
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": " + why);
        }
        if (factory != nullptr) {
            char * open_error = nullptr;
            stream->backend.reset(factory->open(ctx, cfg, &open_error));
            if (!stream->backend) {
                const std::string why = open_error ? open_error : "it returned no session and no reason";
                std::free(open_error);
                return fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
                            std::string(fn) + ": backend '" + factory->name() + "' could not open: " + why);
            }
            std::free(open_error);
            result = stream.release();
            return ELIZA_OK;
        }
        int code = ELIZA_OK;
        std::string message;
        stream->llama = LlamaStream::open(*ctx, *cfg, code, message);
        if (!stream->llama) {
            return report(fn, out_error, code, message);
        }
        result = stream.release();
        return ELIZA_OK;
    });
    return result;
}

int eliza_inference_llm_stream_prefill(EliLlmStream * stream, const int32_t * token_ids, size_t n, char ** out_error) {
    if (out_error) *out_error = nullptr;
    return guarded("eliza_inference_llm_stream_prefill", out_error, [&] {
        const char * fn = "eliza_inference_llm_stream_prefill";
        if (stream == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": stream is NULL");
        }
        if (stream->backend) return stream->backend->prefill(token_ids, n, out_error);
        std::string message;
        return report(fn, out_error, stream->llama->prefill(token_ids, n, message), message);
    });
}

int eliza_inference_llm_stream_next(EliLlmStream * stream, int32_t * tokens_out, size_t tokens_cap,
                                    size_t * num_tokens_out, char * text_out, size_t text_cap,
                                    int32_t * drafter_drafted_out, int32_t * drafter_accepted_out, char ** out_error) {
    if (out_error) *out_error = nullptr;
    if (drafter_drafted_out) *drafter_drafted_out = 0;
    if (drafter_accepted_out) *drafter_accepted_out = 0;
    return guarded("eliza_inference_llm_stream_next", out_error, [&] {
        const char * fn = "eliza_inference_llm_stream_next";
        if (stream == nullptr || tokens_out == nullptr || num_tokens_out == nullptr || text_out == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG,
                        std::string(fn) + ": stream, tokens_out, num_tokens_out and text_out must be non-NULL");
        }
        *num_tokens_out = 0;
        if (text_cap > 0) text_out[0] = '\0';
        if (stream->backend) {
            return stream->backend->next(tokens_out, tokens_cap, num_tokens_out, text_out, text_cap,
                                         drafter_drafted_out, drafter_accepted_out, out_error);
        }
        std::string message;
        const StepBuffers out{tokens_out, tokens_cap, num_tokens_out, text_out, text_cap};
        return report(fn, out_error, stream->llama->next(out, message), message);
    });
}

int eliza_inference_llm_stream_cancel(EliLlmStream * stream) {
    if (stream == nullptr) return ELIZA_ERR_INVALID_ARG;
    if (stream->backend) {
        try {
            return stream->backend->cancel();
        } catch (...) {
            return ELIZA_ERR_FFI_FAULT;
        }
    }
    stream->llama->cancel();
    return ELIZA_OK;
}

int eliza_inference_llm_stream_reset(EliLlmStream * stream) {
    if (stream == nullptr) return ELIZA_ERR_INVALID_ARG;
    return guarded("eliza_inference_llm_stream_reset", nullptr, [&] {
        if (stream->backend) return stream->backend->reset();
        return stream->llama->reset();
    });
}

int eliza_inference_llm_stream_reset_keep(EliLlmStream * stream, int32_t n_keep) {
    if (stream == nullptr) return ELIZA_ERR_INVALID_ARG;
    return guarded("eliza_inference_llm_stream_reset_keep", nullptr, [&] {
        if (stream->backend) return stream->backend->reset_keep(n_keep);
        return stream->llama->reset_keep(n_keep);
    });
}

int eliza_inference_llm_stream_save_slot(EliLlmStream * stream, const char * filename, char ** out_error) {
    if (out_error) *out_error = nullptr;
    return guarded("eliza_inference_llm_stream_save_slot", out_error, [&] {
        const char * fn = "eliza_inference_llm_stream_save_slot";
        if (stream == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": stream is NULL");
        }
        if (stream->backend) return stream->backend->save_slot(filename, out_error);
        std::string message;
        return report(fn, out_error, stream->llama->save_slot(filename, message), message);
    });
}

int eliza_inference_llm_stream_restore_slot(EliLlmStream * stream, const char * filename, char ** out_error) {
    if (out_error) *out_error = nullptr;
    return guarded("eliza_inference_llm_stream_restore_slot", out_error, [&] {
        const char * fn = "eliza_inference_llm_stream_restore_slot";
        if (stream == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": stream is NULL");
        }
        if (stream->backend) return stream->backend->restore_slot(filename, out_error);
        std::string message;
        return report(fn, out_error, stream->llama->restore_slot(filename, message), message);
    });
}

void eliza_inference_llm_stream_close(EliLlmStream * stream) { delete stream; }

}  // extern "C"
