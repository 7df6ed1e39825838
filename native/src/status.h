// Error plumbing shared by the C ABI and the backends: a status code plus a message that
// becomes the caller's *out_error. Nothing here throws across the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "eliza-inference-ffi.h"

namespace eliza {

// Heap copy for *out_error / *out_text; freed by eliza_inference_free_string (free()).
// nullptr when malloc fails.
inline char * dup_c_string(const char * s, size_t n) noexcept {
    char * out = static_cast<char *>(std::malloc(n + 1));
    if (out) {
        std::memcpy(out, s, n);
        out[n] = '\0';
    }
    return out;
}
inline char * dup_c_string(const std::string & s) noexcept { return dup_c_string(s.data(), s.size()); }

// How many of the n bytes at s to keep so that they do not end inside a UTF-8 character:
// n when s[0, n) ends on a character boundary, else the start of the character cut off.
// Every place that cuts a message to a fixed size cuts here: a consumer that decodes
// strictly (Java's CharsetDecoder, JavaScript's TextDecoder with fatal) rejects a whole
// message over one dangling lead byte. Bytes that are not UTF-8 to begin with are left
// as they are (a message is only ever shortened by an incomplete last character).
inline size_t utf8_boundary(const char * s, size_t n) noexcept {
    size_t lead = n;
    while (lead > 0 && n - lead < 3 && (static_cast<unsigned char>(s[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead == 0) return n;
    const unsigned char c = static_cast<unsigned char>(s[lead - 1]);
    const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return n - (lead - 1) < len ? lead - 1 : n;
}

// Sets *out_error (when the caller asked for it) and returns code, so error paths read
// `return fail(out_error, ELIZA_ERR_INVALID_ARG, "...")`.
inline int fail(char ** out_error, int code, const std::string & message) noexcept {
    if (out_error) {
        *out_error = dup_c_string(message);
    }
    return code;
}

// --- llama.cpp / ggml log lines (log_capture.cpp) ---------------------------------------
//
// The library never writes to stdout/stderr: llama.cpp and ggml log into a sink that keeps
// their ERROR lines. A CallScope spans one entry point of the C ABI; its chain() is the
// error lines logged while it was open, on the calling thread and on threads that run no
// call of this library (ggml's worker threads), bounded in count and length.
class CallScope {
public:
    CallScope() noexcept;
    ~CallScope();
    CallScope(const CallScope &) = delete;
    CallScope & operator=(const CallScope &) = delete;

    // "line; line; ..." (oldest first), or "" when nothing was logged.
    std::string chain() const;
    void add(const char * line) noexcept;
    // A ggml fatal error (failed GGML_ASSERT) was hooked during this scope, even if
    // llama.cpp caught the exception and reported a plain failure.
    bool saw_fatal() const { return fatal_; }

private:
    friend struct ScopeAccess;
    static constexpr size_t kMaxLines = 8;
    static constexpr size_t kMaxLineBytes = 400;
    CallScope * prev_;
    uint64_t start_seq_;
    char lines_[kMaxLines][kMaxLineBytes + 1];
    uint64_t seqs_[kMaxLines];
    size_t n_lines_ = 0;
    size_t dropped_ = 0;
    bool fatal_ = false;
};

// The chain of the innermost CallScope of this thread, "" when there is none.
std::string llama_error_chain();
// " (llama.cpp: <chain>)" or "" — appended to messages of failed llama.cpp calls.
std::string with_llama_cause();
// Whether the innermost CallScope of this thread saw a ggml fatal error.
bool ggml_fatal_in_call();

// Thrown by the ggml abort hook on a thread that is inside a call of this library: a
// failed GGML_ASSERT/GGML_ABORT becomes an error status instead of ending the host.
class GgmlFatal : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// llama_backend_init, the silent log sink and the ggml abort hook, once per process.
void ensure_backend_initialised();

}  // namespace eliza
