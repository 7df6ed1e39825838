// libelizainference_testkit: the shipped library's objects plus a C surface that lets the
// tests drive the real compiled selector with fake factories. Built for tests only; the
// shipped libelizainference.so exports none of this.
#include <climits>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>

#include "llm-backend.h"
#include "status.h"

#define TESTKIT_API extern "C" __attribute__((visibility("default")))

namespace {

// A fake session answers with its factory's name so a test can see who served a stream.
class FakeSession final : public LlmBackendSession {
public:
    explicit FakeSession(std::string name) : name_(std::move(name)) {}
    int prefill(const int32_t *, size_t, char **) override { return ELIZA_OK; }
    int next(int32_t * tokens_out, size_t tokens_cap, size_t * num_tokens_out, char * text_out, size_t text_cap,
             int32_t * drafted, int32_t * accepted, char ** out_error) override {
        const std::string text = "fake:" + name_;
        if (tokens_cap == 0 || text_cap <= text.size()) {
            return eliza::fail(out_error, ELIZA_ERR_INVALID_ARG, "fake session: buffers too small");
        }
        tokens_out[0] = 0;
        *num_tokens_out = 1;
        text.copy(text_out, text.size());
        text_out[text.size()] = '\0';
        if (drafted) *drafted = 0;
        if (accepted) *accepted = 0;
        return 1;
    }
    int cancel() override { return ELIZA_OK; }
    int reset() override { return ELIZA_OK; }
    int reset_keep(int32_t) override { return 0; }

private:
    std::string name_;
};

class FakeFactory final : public LlmBackendFactory {
public:
    FakeFactory(std::string name, bool available, bool can_serve, int rank)
        : name_(std::move(name)), available_(available), can_serve_(can_serve), rank_(rank) {}
    const char * name() const override { return name_.c_str(); }
    bool available() const override { return available_; }
    bool can_serve(const char *) const override { return can_serve_; }
    int preference_rank() const override { return rank_; }
    LlmBackendSession * open(EliInferenceContext *, const eliza_llm_stream_config_t *, char **) override {
        ++opens;
        return new FakeSession(name_);
    }
    int opens = 0;

private:
    std::string name_;
    bool available_;
    bool can_serve_;
    int rank_;
};

std::mutex g_mutex;
std::deque<FakeFactory> g_fakes;  // stable addresses; kept for the process lifetime like real factories

}  // namespace

// Empties the registry (builtins included; the next _open re-registers them).
TESTKIT_API void eliza_testkit_clear_registry(void) { eliza::seam::clear_registry_for_tests(); }

TESTKIT_API void eliza_testkit_register_builtins(void) { llm_backend_register_builtins(); }

// 1 when registered, 0 when the name was already taken (registration is idempotent by name).
TESTKIT_API int eliza_testkit_register_fake(const char * name, int available, int can_serve, int rank) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_fakes.emplace_back(name ? name : "", available != 0, can_serve != 0, rank);
    return llm_backend_register(&g_fakes.back()) ? 1 : 0;
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
        if (name && std::string(f.name()) == name) total += f.opens;
    }
    return total;
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
