// The library never writes to stdout/stderr: llama.cpp and ggml log through this sink,
// which keeps the last error of the calling thread so it can be put into *out_error.
#include <mutex>
#include <string>

#include "llama.h"
#include "status.h"

namespace eliza {
namespace {

thread_local std::string g_last_error;

void capture(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (level == GGML_LOG_LEVEL_CONT && !g_last_error.empty()) {
        g_last_error += text ? text : "";
        return;
    }
    if (level != GGML_LOG_LEVEL_ERROR || text == nullptr) {
        return;
    }
    g_last_error = text;
    while (!g_last_error.empty() && (g_last_error.back() == '\n' || g_last_error.back() == ' ')) {
        g_last_error.pop_back();
    }
}

}  // namespace

std::string last_llama_error() { return g_last_error; }
void clear_llama_error() { g_last_error.clear(); }

void ensure_backend_initialised() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(capture, nullptr);
        llama_backend_init();
    });
}

}  // namespace eliza
