// libelizainference_testkit: the shipped library's objects plus a C surface that lets the
// tests drive the real compiled selector, and the FFI's backend branch of every stream
// function, with fake factories. Built for tests only; the shipped libelizainference.so
// exports none of this and never registers a fake.
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "context.h"
#include "llm-backend.h"
#include "status.h"

#define TESTKIT_API extern "C" __attribute__((visibility("default")))

namespace {

// --- the fake backend ----------------------------------------------------------------------
// One session class drives every branch of the seam: what it does on each call is set per
// fake by a session spec (native/cases/seam.cases documents the words), so a case table can
// ask for a backend that drafts, blocks until cancelled, cannot keep a prefix, lies about the
// count it kept, or has slot files, without a second fake design beside the selector's.

struct SessionSpec {
    enum class Keep { prefix, none, fail, overcount };
    int drafted = 0;   // draft=D:A: each step that has room drafts D tokens and accepts A
    int accepted = 0;
    Keep keep = Keep::prefix;
    bool reset_fails = false;  // reset=fail
    bool slots = false;        // slots=file: overrides save_slot/restore_slot
    bool blocks = false;       // next=block: next waits for a cancel
    bool quiet = false;        // errors=quiet: failures carry no message
};

bool parse_int(const std::string & s, int & out) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::atoi(s.c_str());
    return true;
}

// "-" or space-separated key=value words; false with *why naming the word it refuses.
bool parse_spec(const std::string & text, SessionSpec & spec, std::string & why) {
    std::istringstream words(text);
    for (std::string word; words >> word;) {
        if (word == "-") continue;
        const size_t eq = word.find('=');
        const std::string key = word.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
        bool ok = true;
        if (key == "draft") {
            const size_t colon = value.find(':');
            ok = colon != std::string::npos && parse_int(value.substr(0, colon), spec.drafted) &&
                 parse_int(value.substr(colon + 1), spec.accepted) && spec.accepted <= spec.drafted;
        } else if (key == "keep") {
            ok = value == "prefix" || value == "none" || value == "fail" || value == "overcount";
            spec.keep = value == "none"        ? SessionSpec::Keep::none
                        : value == "fail"      ? SessionSpec::Keep::fail
                        : value == "overcount" ? SessionSpec::Keep::overcount
                                               : SessionSpec::Keep::prefix;
        } else if (key == "reset") {
            ok = value == "ok" || value == "fail";
            spec.reset_fails = value == "fail";
        } else if (key == "slots") {
            ok = value == "default" || value == "file";
            spec.slots = value == "file";
        } else if (key == "next") {
            ok = value == "step" || value == "block";
            spec.blocks = value == "block";
        } else if (key == "errors") {
            ok = value == "said" || value == "quiet";
            spec.quiet = value == "quiet";
        } else {
            ok = false;
        }
        if (!ok) {
            why = "session spec word '" + word +
                  "' is not one of draft=D:A (A <= D), keep=prefix|none|fail|overcount, reset=ok|fail, "
                  "slots=default|file, next=step|block, errors=said|quiet";
            return false;
        }
    }
    return true;
}

// A session's state, shared with the kit's probe so a test can read what the backend holds
// (and wait for a blocked next) without owning the session, which the FFI owns.
struct SessionState {
    std::mutex mutex;
    std::condition_variable cv;  // a cancel, and a next that starts to block
    std::vector<int32_t> held;   // prefilled and generated tokens, in order
    int generated = 0;           // since the last prefill, against max_tokens
    bool cancelled = false;
    bool in_next = false;        // a next=block step is waiting for its cancel
};

// The most recently opened fake session and how many are alive, for the probe hooks.
struct Probe {
    std::mutex mutex;
    std::weak_ptr<SessionState> last;
    int live = 0;
};

Probe & probe() {
    static Probe instance;
    return instance;
}

// A blocking next gives up after this, so a cancel that never arrives fails its case
// instead of hanging the run (qemu is slow, so the margin is wide).
constexpr std::chrono::seconds kBlockLimit{30};

// Tokens 1, 2, ... render as "[1]", "[2]", after the fake's name: a step's text shows who
// served it and which ids it carries ("seam:[7][8]").
std::string piece(int32_t id) { return "[" + std::to_string(id) + "]"; }

class FakeSession : public LlmBackendSession {
public:
    FakeSession(std::string name, const SessionSpec & spec, int max_tokens)
        : name_(std::move(name)), spec_(spec), max_tokens_(max_tokens) {
        std::lock_guard<std::mutex> lock(probe().mutex);
        probe().last = state_;
        ++probe().live;
    }
    ~FakeSession() override {
        std::lock_guard<std::mutex> lock(probe().mutex);
        --probe().live;
    }
    FakeSession(const FakeSession &) = delete;
    FakeSession & operator=(const FakeSession &) = delete;

    int prefill(const int32_t * token_ids, size_t num_tokens, char ** out_error) override {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (state_->cancelled) return say(out_error, ELIZA_ERR_CANCELLED, "cancelled");
        if (token_ids == nullptr && num_tokens > 0) return say(out_error, ELIZA_ERR_INVALID_ARG, "token_ids is NULL");
        for (size_t i = 0; i < num_tokens; ++i) {
            if (token_ids[i] < 0) {
                return say(out_error, ELIZA_ERR_INVALID_ARG,
                           "token " + std::to_string(token_ids[i]) + " is outside the fake's vocabulary");
            }
        }
        state_->held.insert(state_->held.end(), token_ids, token_ids + num_tokens);
        state_->generated = 0;
        return ELIZA_OK;
    }

    int next(int32_t * tokens_out, size_t tokens_cap, size_t * num_tokens_out, char * text_out, size_t text_cap,
             int32_t * drafted, int32_t * accepted, char ** out_error) override {
        std::unique_lock<std::mutex> lock(state_->mutex);
        if (spec_.blocks && !state_->cancelled) {
            state_->in_next = true;
            state_->cv.notify_all();
            const bool woken = state_->cv.wait_for(lock, kBlockLimit, [&] { return state_->cancelled; });
            state_->in_next = false;
            if (!woken) return say(out_error, ELIZA_ERR_FFI_FAULT, "next=block: no cancel came within 30 s");
        }
        if (state_->cancelled) return say(out_error, ELIZA_ERR_CANCELLED, "cancelled");
        if (state_->held.empty()) return say(out_error, ELIZA_ERR_INVALID_ARG, "nothing to continue: prefill first");
        if (max_tokens_ > 0 && state_->generated >= max_tokens_) return 1;
        const int left = max_tokens_ > 0 ? max_tokens_ - state_->generated : INT_MAX;
        const int with_draft = 1 + spec_.accepted;
        const bool drafts = spec_.drafted > 0 && with_draft <= left && static_cast<size_t>(with_draft) <= tokens_cap;
        const int n = drafts ? with_draft : 1;
        std::string text = name_ + ":";
        for (int i = 0; i < n; ++i) text += piece(state_->held.back() + 1 + i);
        if (tokens_cap == 0 || text_cap <= text.size()) return say(out_error, ELIZA_ERR_INVALID_ARG, "buffers too small");
        for (int i = 0; i < n; ++i) {
            tokens_out[i] = state_->held.back() + 1;
            state_->held.push_back(tokens_out[i]);
        }
        *num_tokens_out = static_cast<size_t>(n);
        text.copy(text_out, text.size());
        text_out[text.size()] = '\0';
        if (drafted) *drafted = drafts ? spec_.drafted : 0;
        if (accepted) *accepted = drafts ? spec_.accepted : 0;
        state_->generated += n;
        return max_tokens_ > 0 && state_->generated >= max_tokens_ ? 1 : 0;
    }

    int cancel() override {
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->cancelled = true;
        state_->cv.notify_all();
        return ELIZA_OK;
    }

    int reset() override {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (spec_.reset_fails) return ELIZA_ERR_NOT_IMPLEMENTED;
        clear(0);
        return ELIZA_OK;
    }

    int reset_keep(int32_t n_keep) override {
        std::lock_guard<std::mutex> lock(state_->mutex);
        const size_t want = n_keep > 0 ? static_cast<size_t>(n_keep) : 0;
        const size_t kept = want < state_->held.size() ? want : state_->held.size();
        switch (spec_.keep) {
        case SessionSpec::Keep::prefix:
            clear(kept);
            return static_cast<int>(kept);
        case SessionSpec::Keep::none:  // what the seam asks of a backend without prefix reuse
            clear(0);
            return 0;
        case SessionSpec::Keep::fail:  // the state is left as it was: only a reset clears it
            return ELIZA_ERR_NOT_IMPLEMENTED;
        case SessionSpec::Keep::overcount:
            clear(kept);
            return n_keep < INT_MAX && n_keep >= 0 ? n_keep + 1 : INT_MAX;
        }
        return ELIZA_ERR_FFI_FAULT;
    }

protected:
    // A failure as the spec wants it reported: with its reason, or (errors=quiet) without
    // one, which the FFI must then supply.
    int say(char ** out_error, int code, const std::string & why) const {
        return spec_.quiet ? code : eliza::fail(out_error, code, "fake session: " + why);
    }
    void clear(size_t keep) {  // the caller holds the state's mutex
        state_->held.resize(keep);
        state_->generated = 0;
        state_->cancelled = false;
    }

    const std::string name_;
    const SessionSpec spec_;
    const int max_tokens_;
    const std::shared_ptr<SessionState> state_ = std::make_shared<SessionState>();
};

// slots=file: a backend that has slot files; without it the seam's defaults answer.
class SlotFakeSession final : public FakeSession {
public:
    using FakeSession::FakeSession;

    int save_slot(const char * filename, char ** out_error) override {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (state_->cancelled) return say(out_error, ELIZA_ERR_CANCELLED, "cancelled");
        if (filename == nullptr) return say(out_error, ELIZA_ERR_INVALID_ARG, "filename is NULL");
        std::ofstream out(filename, std::ios::trunc);
        out << kMagic << '\n' << state_->generated << '\n' << state_->held.size();
        for (int32_t id : state_->held) out << ' ' << id;
        out << '\n';
        out.close();
        if (!out) return say(out_error, ELIZA_ERR_INVALID_ARG, std::string("cannot write '") + filename + "'");
        return ELIZA_OK;
    }

    int restore_slot(const char * filename, char ** out_error) override {
        if (filename == nullptr) return say(out_error, ELIZA_ERR_INVALID_ARG, "filename is NULL");
        std::ifstream in(filename);
        std::string magic;
        int generated = -1;
        size_t count = 0;
        std::vector<int32_t> held;
        if (!std::getline(in, magic) || magic != kMagic || !(in >> generated >> count) || generated < 0 ||
            count > 1u << 20) {
            return say(out_error, ELIZA_ERR_INVALID_ARG,
                       std::string("no slot file of the fake backend at '") + filename + "'");
        }
        held.resize(count);
        for (int32_t & id : held) {
            if (!(in >> id) || id < 0) {
                return say(out_error, ELIZA_ERR_INVALID_ARG, std::string("'") + filename + "' is truncated");
            }
        }
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->held = std::move(held);
        state_->generated = generated;
        state_->cancelled = false;
        return ELIZA_OK;
    }

private:
    static constexpr const char * kMagic = "eliza-testkit fake slot 1";
};

class FakeFactory final : public LlmBackendFactory {
public:
    FakeFactory(std::string name, bool available, bool can_serve, int rank, const SessionSpec & spec)
        : name_(std::move(name)), available_(available), can_serve_(can_serve), rank_(rank), spec_(spec) {}
    const char * name() const override { return name_.c_str(); }
    bool available() const override { return available_; }
    bool can_serve(const char *) const override { return can_serve_; }
    int preference_rank() const override { return rank_; }
    LlmBackendSession * open(EliInferenceContext *, const eliza_llm_stream_config_t * cfg, char **) override {
        ++opens;
        const int max_tokens = cfg ? cfg->max_tokens : 0;
        if (spec_.slots) return new SlotFakeSession(name_, spec_, max_tokens);
        return new FakeSession(name_, spec_, max_tokens);
    }
    std::atomic<int> opens{0};

private:
    std::string name_;
    bool available_;
    bool can_serve_;
    int rank_;
    SessionSpec spec_;
};

std::mutex g_mutex;
std::deque<FakeFactory> g_fakes;  // stable addresses; kept for the process lifetime like real factories

// The probe's session, if one is still open.
std::shared_ptr<SessionState> last_session() {
    std::lock_guard<std::mutex> lock(probe().mutex);
    return probe().last.lock();
}

}  // namespace

// Empties the registry (builtins included; the next _open re-registers them).
TESTKIT_API void eliza_testkit_clear_registry(void) { eliza::seam::clear_registry_for_tests(); }

TESTKIT_API void eliza_testkit_register_builtins(void) { llm_backend_register_builtins(); }

// 1 when registered, 0 when the name was already taken (registration is idempotent by name).
// Its sessions behave as the session spec "-" says (every default).
TESTKIT_API int eliza_testkit_register_fake(const char * name, int available, int can_serve, int rank) {
    try {
        std::lock_guard<std::mutex> lock(g_mutex);
        g_fakes.emplace_back(name ? name : "", available != 0, can_serve != 0, rank, SessionSpec{});
        return llm_backend_register(&g_fakes.back()) ? 1 : 0;
    } catch (...) {
        return ELIZA_ERR_OOM;
    }
}

// The same, with the behaviour of its sessions given by a session spec (the words of
// native/cases/seam.cases); ELIZA_ERR_INVALID_ARG and *out_error (heap) for a spec it
// cannot read, and nothing registered.
TESTKIT_API int eliza_testkit_register_fake_session(const char * name, int available, int can_serve, int rank,
                                                    const char * session, char ** out_error) {
    if (out_error) *out_error = nullptr;
    try {
        SessionSpec spec;
        std::string why;
        if (!parse_spec(session ? session : "-", spec, why)) return eliza::fail(out_error, ELIZA_ERR_INVALID_ARG, why);
        std::lock_guard<std::mutex> lock(g_mutex);
        g_fakes.emplace_back(name ? name : "", available != 0, can_serve != 0, rank, spec);
        return llm_backend_register(&g_fakes.back()) ? 1 : 0;
    } catch (...) {
        return eliza::fail(out_error, ELIZA_ERR_OOM, "eliza_testkit_register_fake_session: out of memory");
    }
}

// Runs the selector. override_value: the ELIZA_LLM_BACKEND value to use; use_env != 0
// reads the real environment instead (llm_backend_select itself).
// Returns 1 and *out_name (heap) when a factory was chosen, 0 for the in-tree path with no
// error, or a negative status with *out_error (heap) set.
TESTKIT_API int eliza_testkit_select(const char * bundle_dir, const char * override_value, int use_env,
                                     char ** out_name, char ** out_error) {
    *out_name = nullptr;
    *out_error = nullptr;
    LlmBackendFactory * f = use_env ? llm_backend_select(bundle_dir, nullptr, out_error)
                                    : eliza::seam::select_with_override(bundle_dir, override_value, out_error);
    if (f != nullptr) {
        *out_name = eliza::dup_c_string(f->name());
        return 1;
    }
    return *out_error != nullptr ? ELIZA_ERR_INVALID_ARG : 0;
}

// How many sessions the named fake has opened (which factory an _open chose).
TESTKIT_API int eliza_testkit_fake_opens(const char * name) {
    std::lock_guard<std::mutex> lock(g_mutex);
    int total = 0;
    for (const FakeFactory & f : g_fakes) {
        if (name && std::string(f.name()) == name) total += f.opens.load();
    }
    return total;
}

// --- driving the seam's stream branches ------------------------------------------------------

// A context with no model, as _create makes for a bundle that only a compiled-in backend
// serves: a stream a fake serves never reaches the llama.cpp path, so a case needs no bundle
// on disk (on a target there is none). Freed by eliza_inference_destroy; NULL + *out_error.
TESTKIT_API EliInferenceContext * eliza_testkit_context_without_model(const char * bundle_dir, char ** out_error) {
    if (out_error) *out_error = nullptr;
    try {
        auto ctx = std::make_unique<EliInferenceContext>();
        ctx->bundle_dir = bundle_dir ? bundle_dir : "";
        ctx->served_by = "the test kit's fakes";
        return ctx.release();
    } catch (...) {
        eliza::fail(out_error, ELIZA_ERR_OOM, "eliza_testkit_context_without_model: out of memory");
        return nullptr;
    }
}

// The context's holders (its owner plus one per open stream); -1 for NULL.
TESTKIT_API int eliza_testkit_context_holders(const EliInferenceContext * ctx) {
    return ctx ? ctx->holders.load() : -1;
}

// How many fake sessions exist (opened and not yet destroyed by _close).
TESTKIT_API int eliza_testkit_sessions_live(void) {
    std::lock_guard<std::mutex> lock(probe().mutex);
    return probe().live;
}

// The tokens the most recently opened fake session holds, space-separated ("" for none), as
// a heap string; NULL when that session is closed (or on allocation failure).
TESTKIT_API char * eliza_testkit_session_held(void) {
    try {
        const std::shared_ptr<SessionState> state = last_session();
        if (!state) return nullptr;
        std::lock_guard<std::mutex> lock(state->mutex);
        std::string out;
        for (int32_t id : state->held) out += (out.empty() ? "" : " ") + std::to_string(id);
        return eliza::dup_c_string(out);
    } catch (...) {
        return nullptr;
    }
}

// 1 once the most recently opened fake session is blocked in a next=block step (so a cancel
// sent now lands in the middle of the call), 0 if that does not happen within timeout_ms.
TESTKIT_API int eliza_testkit_session_wait_in_next(int timeout_ms) {
    try {
        const std::shared_ptr<SessionState> state = last_session();
        if (!state) return 0;
        std::unique_lock<std::mutex> lock(state->mutex);
        return state->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return state->in_next; }) ? 1
                                                                                                              : 0;
    } catch (...) {
        return 0;
    }
}

// Registered names in order, comma-separated (heap string; free with eliza_inference_free_string).
TESTKIT_API char * eliza_testkit_registered(void) { return eliza::dup_c_string(eliza::seam::registered_names()); }

// --- the built-in gates of this build (what llm_backend_register_builtins registers) -------
// Lets the tests compare each compiled factory with its matrix.yaml entry directly, so a
// fake registered under the same name cannot stand in for it.

namespace {

// nullptr past the end, or if building the table threw: no exception leaves the kit.
const eliza::backends::BuiltinGate * builtin(int index) noexcept {
    try {
        return index < 0 ? nullptr : eliza::backends::builtin_gate(static_cast<size_t>(index));
    } catch (...) {
        return nullptr;
    }
}

}  // namespace

// How many gates are ON in this build; -1 if the table could not be built.
TESTKIT_API int eliza_testkit_builtin_count(void) {
    try {
        return static_cast<int>(eliza::backends::builtin_gate_count());
    } catch (...) {
        return -1;
    }
}

// The gate id of built-in i ("litert"), or NULL past the end. Static string; never freed.
TESTKIT_API const char * eliza_testkit_builtin_gate(int index) {
    const eliza::backends::BuiltinGate * gate = builtin(index);
    return gate ? gate->spec->id : nullptr;
}

// The factory's own name() ("litert-lm"), or NULL past the end. Static string; never freed.
TESTKIT_API const char * eliza_testkit_builtin_name(int index) {
    const eliza::backends::BuiltinGate * gate = builtin(index);
    return gate ? gate->factory->name() : nullptr;
}

// The factory's can_serve(bundle_dir): 1 or 0; -1 past the end.
TESTKIT_API int eliza_testkit_builtin_can_serve(int index, const char * bundle_dir) {
    const eliza::backends::BuiltinGate * gate = builtin(index);
    return gate ? (gate->factory->can_serve(bundle_dir) ? 1 : 0) : -1;
}

// The factory's preference_rank(); INT_MIN past the end.
TESTKIT_API int eliza_testkit_builtin_rank(int index) {
    const eliza::backends::BuiltinGate * gate = builtin(index);
    return gate ? gate->factory->preference_rank() : INT_MIN;
}
