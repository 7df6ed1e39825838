// The C ABI. Every entry point validates its handles, runs inside guarded() so no C++
// exception crosses the boundary, and reports failures as a status plus *out_error.
#include <cstddef>
#include <cstdio>
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
    std::string backend_name;                    // its factory's name, for messages
    std::unique_ptr<LlamaStream> llama;          // in-tree llama.cpp path
    EliInferenceContext * context = nullptr;     // held (retain_context) while the stream is open
};

const char * llm_backend_context_bundle_dir(const EliInferenceContext * ctx) {
    return ctx ? ctx->bundle_dir.c_str() : nullptr;
}

namespace {

using eliza::fail;

// "<fn>: <what><detail>" into *out_error without C++ allocation: for catch blocks, which
// must not throw. A message that does not fit is cut on a UTF-8 character boundary (an
// exception's text may hold a path); a failed malloc leaves NULL.
int fail_fixed(char ** out_error, int code, const char * fn, const char * what, const char * detail) noexcept {
    if (out_error) {
        std::free(*out_error);
        char buf[1024];
        const int n = std::snprintf(buf, sizeof buf, "%s: %s%s", fn, what, detail ? detail : "");
        size_t len = n < 0 ? 0 : static_cast<size_t>(n);
        if (len > sizeof buf - 1) len = eliza::utf8_boundary(buf, sizeof buf - 1);
        *out_error = n < 0 ? nullptr : eliza::dup_c_string(buf, len);
    }
    return code;
}

// Runs body inside a CallScope (which collects llama.cpp's error lines and lets the ggml
// abort hook unwind to here) and turns any escaping exception into a status: the C ABI
// never throws. A ggml fatal error inside a stream's call poisons that stream.
template <typename Body>
int guarded(const char * fn, char ** out_error, Body && body, LlamaStream * stream = nullptr) noexcept {
    try {
        eliza::CallScope scope;
        return body();
    } catch (const eliza::GgmlFatal & e) {
        if (stream) stream->poison();
        return fail_fixed(out_error, ELIZA_ERR_FFI_FAULT, fn, "llama.cpp/ggml fatal error: ", e.what());
    } catch (const std::bad_alloc &) {
        return fail_fixed(out_error, ELIZA_ERR_OOM, fn, "out of memory", nullptr);
    } catch (const std::exception & e) {
        return fail_fixed(out_error, ELIZA_ERR_FFI_FAULT, fn, "unexpected C++ exception: ", e.what());
    } catch (...) {
        return fail_fixed(out_error, ELIZA_ERR_FFI_FAULT, fn, "unknown exception", nullptr);
    }
}

// Prefixes a component's message with the entry point's name.
int report(const char * fn, char ** out_error, int rc, const std::string & message) {
    return rc < 0 ? fail(out_error, rc, std::string(fn) + ": " + message) : rc;
}

// An alternate backend's status, its message prefixed with the entry point and backend
// name; a failure without a message gets one, a success never carries one.
int from_backend(const char * fn, const EliLlmStream & stream, int rc, char * backend_error, char ** out_error) {
    const std::string why = backend_error ? backend_error : "";
    std::free(backend_error);
    if (rc >= 0) return rc;
    return fail(out_error, rc,
                std::string(fn) + ": backend '" + stream.backend_name + "': " +
                    (why.empty() ? "failed with status " + std::to_string(rc) + " and gave no reason" : why));
}

// The header promises _reset_keep's caller a count in [0, n_keep] (what is kept) or 0 after
// a full reset. A backend that fails, or claims more than it was asked to keep, may hold any
// prefix, and a caller trusting the count would prefill a suffix onto the wrong one; so the
// fallback the seam asks of backends is enforced here. When even the reset fails, the
// stream's state is unknown: ELIZA_ERR_FFI_FAULT, the header's "close this stream".
int backend_reset_keep(LlmBackendSession & backend, int32_t n_keep) {
    const int kept = backend.reset_keep(n_keep);
    const int asked = n_keep > 0 ? n_keep : 0;
    if (kept >= 0 && kept <= asked) return kept;
    return backend.reset() >= 0 ? 0 : ELIZA_ERR_FFI_FAULT;
}

int poisoned(const char * fn, char ** out_error) {
    return fail(out_error, ELIZA_ERR_FFI_FAULT,
                std::string(fn) + ": an earlier llama.cpp/ggml fatal error left this stream unusable; close it");
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

void eliza_inference_destroy(EliInferenceContext * ctx) {
    if (ctx == nullptr) return;
    guarded("eliza_inference_destroy", nullptr, [&] {
        eliza::release_context(ctx);  // freed now, or when its last open stream closes
        return ELIZA_OK;
    });
}

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
        int code = ELIZA_OK;
        std::string message;
        eliza::VocabView vocab;  // the GGUF's vocabulary, without its weights when another runtime serves them
        if (!eliza::ensure_vocab(*ctx, vocab, code, message)) {
            return report(fn, out_error, code, message);
        }
        if (len > static_cast<size_t>(INT32_MAX)) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": text longer than 2^31-1 bytes");
        }
        const int32_t text_len = static_cast<int32_t>(len);
        std::vector<llama_token> tokens(len + 2);
        int32_t n = llama_tokenize(vocab.vocab, text ? text : "", text_len, tokens.data(),
                                   static_cast<int32_t>(tokens.size()), add_special != 0, parse_special != 0);
        if (n < 0) {
            tokens.resize(static_cast<size_t>(-n));
            n = llama_tokenize(vocab.vocab, text, text_len, tokens.data(), static_cast<int32_t>(tokens.size()),
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
        int code = ELIZA_OK;
        std::string message;
        eliza::VocabView vocab;
        if (!eliza::ensure_vocab(*ctx, vocab, code, message)) {
            return report(fn, out_error, code, message);
        }
        for (size_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || tokens[i] >= vocab.n_vocab) {
                return fail(out_error, ELIZA_ERR_INVALID_ARG,
                            std::string(fn) + ": tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                                " is outside the vocabulary [0, " + std::to_string(vocab.n_vocab) + ")");
            }
        }
        std::string text(n * 8 + 16, '\0');
        int32_t got = llama_detokenize(vocab.vocab, tokens, static_cast<int32_t>(n), text.data(),
                                       static_cast<int32_t>(text.size()), remove_special != 0, unparse_special != 0);
        if (got < 0) {
            text.resize(static_cast<size_t>(-got));
            got = llama_detokenize(vocab.vocab, tokens, static_cast<int32_t>(n), text.data(),
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
        std::string message;
        if (!eliza::validate_config(*cfg, message)) {
            return report(fn, out_error, ELIZA_ERR_INVALID_ARG, message);
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
            stream->backend_name = factory->name();
            stream->backend.reset(factory->open(ctx, cfg, &open_error));
            const std::string why = open_error ? open_error : "it returned no session and no reason";
            std::free(open_error);
            if (!stream->backend) {
                return fail(out_error, ELIZA_ERR_NOT_IMPLEMENTED,
                            std::string(fn) + ": backend '" + stream->backend_name + "' could not open: " + why);
            }
            eliza::retain_context(ctx);
            stream->context = ctx;
            result = stream.release();
            return ELIZA_OK;
        }
        int code = ELIZA_OK;
        if (!eliza::ensure_model(*ctx, code, message)) {
            return report(fn, out_error, code, message);
        }
        stream->llama = LlamaStream::open(*ctx, *cfg, code, message);
        if (!stream->llama) {
            return report(fn, out_error, code, message);
        }
        eliza::retain_context(ctx);
        stream->context = ctx;
        result = stream.release();
        return ELIZA_OK;
    });
    return result;
}

int eliza_inference_llm_stream_prefill(EliLlmStream * stream, const int32_t * token_ids, size_t n, char ** out_error) {
    if (out_error) *out_error = nullptr;
    const char * fn = "eliza_inference_llm_stream_prefill";
    return guarded(fn, out_error, [&] {
        if (stream == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": stream is NULL");
        }
        if (stream->backend) {
            char * err = nullptr;
            const int rc = stream->backend->prefill(token_ids, n, &err);
            return from_backend(fn, *stream, rc, err, out_error);
        }
        if (stream->llama->poisoned()) return poisoned(fn, out_error);
        std::string message;
        return report(fn, out_error, stream->llama->prefill(token_ids, n, message), message);
    }, stream ? stream->llama.get() : nullptr);
}

int eliza_inference_llm_stream_next(EliLlmStream * stream, int32_t * tokens_out, size_t tokens_cap,
                                    size_t * num_tokens_out, char * text_out, size_t text_cap,
                                    int32_t * drafter_drafted_out, int32_t * drafter_accepted_out, char ** out_error) {
    if (out_error) *out_error = nullptr;
    if (drafter_drafted_out) *drafter_drafted_out = 0;
    if (drafter_accepted_out) *drafter_accepted_out = 0;
    const char * fn = "eliza_inference_llm_stream_next";
    return guarded(fn, out_error, [&] {
        if (stream == nullptr || tokens_out == nullptr || num_tokens_out == nullptr || text_out == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG,
                        std::string(fn) + ": stream, tokens_out, num_tokens_out and text_out must be non-NULL");
        }
        *num_tokens_out = 0;
        if (text_cap > 0) text_out[0] = '\0';
        if (stream->backend) {
            char * err = nullptr;
            const int rc = stream->backend->next(tokens_out, tokens_cap, num_tokens_out, text_out, text_cap,
                                                 drafter_drafted_out, drafter_accepted_out, &err);
            return from_backend(fn, *stream, rc, err, out_error);
        }
        if (stream->llama->poisoned()) return poisoned(fn, out_error);
        std::string message;
        const StepBuffers out{tokens_out, tokens_cap, num_tokens_out, text_out, text_cap, drafter_drafted_out,
                                drafter_accepted_out};
        return report(fn, out_error, stream->llama->next(out, message), message);
    }, stream ? stream->llama.get() : nullptr);
}

int eliza_inference_llm_stream_cancel(EliLlmStream * stream) {
    if (stream == nullptr) return ELIZA_ERR_INVALID_ARG;
    return guarded("eliza_inference_llm_stream_cancel", nullptr, [&] {
        if (stream->backend) return stream->backend->cancel();
        stream->llama->cancel();
        return ELIZA_OK;
    });
}

int eliza_inference_llm_stream_reset(EliLlmStream * stream) {
    if (stream == nullptr) return ELIZA_ERR_INVALID_ARG;
    return guarded("eliza_inference_llm_stream_reset", nullptr, [&] {
        if (stream->backend) return stream->backend->reset();
        if (stream->llama->poisoned()) return ELIZA_ERR_FFI_FAULT;
        return stream->llama->reset();
    }, stream ? stream->llama.get() : nullptr);
}

int eliza_inference_llm_stream_reset_keep(EliLlmStream * stream, int32_t n_keep) {
    if (stream == nullptr) return ELIZA_ERR_INVALID_ARG;
    return guarded("eliza_inference_llm_stream_reset_keep", nullptr, [&] {
        if (stream->backend) return backend_reset_keep(*stream->backend, n_keep);
        if (stream->llama->poisoned()) return ELIZA_ERR_FFI_FAULT;
        return stream->llama->reset_keep(n_keep);
    }, stream ? stream->llama.get() : nullptr);
}

int eliza_inference_llm_stream_save_slot(EliLlmStream * stream, const char * filename, char ** out_error) {
    if (out_error) *out_error = nullptr;
    const char * fn = "eliza_inference_llm_stream_save_slot";
    return guarded(fn, out_error, [&] {
        if (stream == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": stream is NULL");
        }
        if (stream->backend) {
            char * err = nullptr;
            const int rc = stream->backend->save_slot(filename, &err);
            return from_backend(fn, *stream, rc, err, out_error);
        }
        if (stream->llama->poisoned()) return poisoned(fn, out_error);
        std::string message;
        return report(fn, out_error, stream->llama->save_slot(filename, message), message);
    }, stream ? stream->llama.get() : nullptr);
}

int eliza_inference_llm_stream_restore_slot(EliLlmStream * stream, const char * filename, char ** out_error) {
    if (out_error) *out_error = nullptr;
    const char * fn = "eliza_inference_llm_stream_restore_slot";
    return guarded(fn, out_error, [&] {
        if (stream == nullptr) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string(fn) + ": stream is NULL");
        }
        if (stream->backend) {
            char * err = nullptr;
            const int rc = stream->backend->restore_slot(filename, &err);
            return from_backend(fn, *stream, rc, err, out_error);
        }
        if (stream->llama->poisoned()) return poisoned(fn, out_error);
        std::string message;
        return report(fn, out_error, stream->llama->restore_slot(filename, message), message);
    }, stream ? stream->llama.get() : nullptr);
}

void eliza_inference_llm_stream_close(EliLlmStream * stream) {
    if (stream == nullptr) return;
    guarded("eliza_inference_llm_stream_close", nullptr, [&] {
        if (stream->llama) stream->llama->shutdown();
        EliInferenceContext * context = stream->context;
        // A poisoned stream leaks its llama.cpp objects (see shutdown), which may still
        // point into the model: it keeps its hold on the context, so the model stays too.
        const bool keep_context = stream->llama && stream->llama->poisoned();
        delete stream;
        if (!keep_context) eliza::release_context(context);
        return ELIZA_OK;
    });
}

}  // extern "C"
