// The library never writes to stdout/stderr. llama.cpp and ggml log through capture(),
// which keeps their ERROR lines for the CallScope of the calling thread, or, on a thread
// that runs no call of this library (a ggml worker), in a small process-wide ring that
// every open scope reads from. ggml's fatal-error hook records its message the same way
// and, inside a call, throws GgmlFatal so the call fails instead of the host ending.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "ggml.h"
#include "llama.h"
#include "status.h"

namespace eliza {

struct ScopeAccess {
    static void add(CallScope & s, const char * text, uint64_t seq) noexcept;
    static void append(CallScope & s, const char * text) noexcept;
    static void mark_fatal(CallScope & s) noexcept { s.fatal_ = true; }
};

namespace {

thread_local CallScope * t_scope = nullptr;
thread_local bool t_last_was_error = false;  // a CONT line continues the thread's last error line

// Copies text without trailing newlines/spaces into dst (cap bytes + NUL), truncating on
// a UTF-8 character boundary (a path in llama.cpp's line may be cut).
void copy_line(char * dst, size_t cap, const char * text) noexcept {
    size_t n = text ? std::strlen(text) : 0;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) --n;
    if (n > cap) n = utf8_boundary(text, cap);
    if (n > 0) std::memcpy(dst, text, n);
    dst[n] = '\0';
}

void append_line(char * dst, size_t cap, const char * text) noexcept {
    const size_t have = std::strlen(dst);
    if (have < cap) copy_line(dst + have, cap - have, text);
}

// Lines logged by threads without a scope, newest last; seq orders them with scope lines.
class Ring {
public:
    static constexpr size_t kSize = 16;
    static constexpr size_t kBytes = 400;

    uint64_t next_seq() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return ++seq_;
    }
    uint64_t current_seq() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return seq_;
    }
    void add(const char * text, bool cont) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        const std::thread::id self = std::this_thread::get_id();
        if (cont) {
            for (size_t i = 0; i < count_; ++i) {
                Entry & e = entries_[(head_ + kSize - 1 - i) % kSize];
                if (e.thread == self) {
                    append_line(e.text, kBytes, text);
                    return;
                }
            }
            return;
        }
        Entry & e = entries_[head_];
        e.seq = ++seq_;
        e.thread = self;
        copy_line(e.text, kBytes, text);
        head_ = (head_ + 1) % kSize;
        if (count_ < kSize) ++count_;
    }
    // Calls fn(seq, text) for entries newer than after, oldest first.
    template <typename Fn> void since(uint64_t after, Fn && fn) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (size_t i = count_; i > 0; --i) {
            const Entry & e = entries_[(head_ + kSize - i) % kSize];
            if (e.seq > after) fn(e.seq, e.text);
        }
    }

private:
    struct Entry {
        uint64_t seq = 0;
        std::thread::id thread;
        char text[kBytes + 1] = {0};
    };
    std::mutex mutex_;
    Entry entries_[kSize];
    size_t head_ = 0;
    size_t count_ = 0;
    uint64_t seq_ = 0;
};

Ring & ring() {
    static Ring * r = new Ring();  // never destroyed: worker threads may log during exit
    return *r;
}

void capture(ggml_log_level level, const char * text, void * /*user_data*/) noexcept {
    if (text == nullptr) return;
    const bool cont = level == GGML_LOG_LEVEL_CONT;
    if (cont ? !t_last_was_error : level != GGML_LOG_LEVEL_ERROR) {
        if (!cont) t_last_was_error = false;
        return;
    }
    t_last_was_error = true;
    if (t_scope != nullptr) {
        if (cont) {
            ScopeAccess::append(*t_scope, text);
        } else {
            ScopeAccess::add(*t_scope, text, ring().next_seq());
        }
    } else {
        ring().add(text, cont);
    }
}

void on_ggml_abort(const char * message) {
    capture(GGML_LOG_LEVEL_ERROR, message ? message : "ggml_abort", nullptr);
    if (t_scope != nullptr) {
        ScopeAccess::mark_fatal(*t_scope);
        // Inside a call of this library: unwind to its guard, which turns this into a status.
        throw GgmlFatal(message ? message : "ggml_abort");
    }
    // A thread that runs no call of this library (a ggml worker): nothing can unwind it, so
    // ggml_abort ends the process after this returns — without printing anything.
}

}  // namespace

void ScopeAccess::add(CallScope & s, const char * text, uint64_t seq) noexcept {
    if (s.n_lines_ == CallScope::kMaxLines) {
        // Keep the first lines (the cause) and the last one (what failed in the end).
        ++s.dropped_;
        copy_line(s.lines_[CallScope::kMaxLines - 1], CallScope::kMaxLineBytes, text);
        s.seqs_[CallScope::kMaxLines - 1] = seq;
        return;
    }
    copy_line(s.lines_[s.n_lines_], CallScope::kMaxLineBytes, text);
    s.seqs_[s.n_lines_] = seq;
    ++s.n_lines_;
}

void ScopeAccess::append(CallScope & s, const char * text) noexcept {
    if (s.n_lines_ > 0) append_line(s.lines_[s.n_lines_ - 1], CallScope::kMaxLineBytes, text);
}

CallScope::CallScope() noexcept : prev_(t_scope), start_seq_(ring().current_seq()) {
    t_scope = this;
}

CallScope::~CallScope() { t_scope = prev_; }

void CallScope::add(const char * line) noexcept { ScopeAccess::add(*this, line, ring().next_seq()); }

std::string CallScope::chain() const {
    // This thread's lines merged with the ring's newer lines (other threads), by sequence.
    std::string merged;
    size_t taken = 0;
    size_t dropped = dropped_;
    size_t own = 0;
    auto emit = [&](const char * text) {
        if (taken == kMaxLines) {
            ++dropped;
            return;
        }
        if (!merged.empty()) merged += "; ";
        merged += text;
        ++taken;
    };
    ring().since(start_seq_, [&](uint64_t seq, const char * text) {
        while (own < n_lines_ && seqs_[own] < seq) emit(lines_[own++]);
        emit(text);
    });
    while (own < n_lines_) emit(lines_[own++]);
    if (dropped > 0) merged += " (" + std::to_string(dropped) + " more error lines not shown)";
    return merged;
}

std::string llama_error_chain() { return t_scope ? t_scope->chain() : std::string(); }

bool ggml_fatal_in_call() { return t_scope != nullptr && t_scope->saw_fatal(); }

std::string with_llama_cause() {
    const std::string chain = llama_error_chain();
    return chain.empty() ? std::string() : " (llama.cpp: " + chain + ")";
}

void ensure_backend_initialised() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(capture, nullptr);
        ggml_set_abort_callback(on_ggml_abort);
        llama_backend_init();
    });
}

}  // namespace eliza
