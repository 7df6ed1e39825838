// Error plumbing shared by the C ABI and the backends: a status code plus a message that
// becomes the caller's *out_error. Nothing here throws across the C ABI.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "eliza-inference-ffi.h"

namespace eliza {

// Heap copy for *out_error / *out_text; freed by eliza_inference_free_string (free()).
inline char * dup_c_string(const std::string & s) {
    char * out = static_cast<char *>(std::malloc(s.size() + 1));
    if (out) {
        std::memcpy(out, s.data(), s.size());
        out[s.size()] = '\0';
    }
    return out;
}

// Sets *out_error (when the caller asked for it) and returns code, so error paths read
// `return fail(out_error, ELIZA_ERR_INVALID_ARG, "...")`.
inline int fail(char ** out_error, int code, const std::string & message) {
    if (out_error) {
        *out_error = dup_c_string(message);
    }
    return code;
}

// The last error llama.cpp/ggml logged on this thread, or "" (see log_capture.cpp).
std::string last_llama_error();
void clear_llama_error();

// llama_backend_init and the silent log sink, once per process.
void ensure_backend_initialised();

}  // namespace eliza
