// The multi-backend seam: alternate in-process runtimes answering the same streaming FFI.
//
// One LlmBackendFactory per linked-in runtime registers itself; at every
// eliza_inference_llm_stream_open the selector picks a factory or returns nullptr, which
// means "use the in-tree llama.cpp path". The FFI then forwards every stream call to the
// session verbatim. Nothing below the FFI's `if (stream->backend)` branches changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "eliza-inference-ffi.h"

// Opaque here: a backend reads the bundle root through llm_backend_context_bundle_dir.
struct EliInferenceContext;

// One active generation on an alternate runtime. Methods mirror the FFI minus the handle;
// status conventions are the FFI's (>= 0 success, ELIZA_ERR_* on failure, *out_error heap).
class LlmBackendSession {
public:
    virtual ~LlmBackendSession() = default;
    virtual int prefill(const int32_t * token_ids, size_t num_tokens, char ** out_error) = 0;
    // 0 = more, 1 = final, < 0 = ELIZA_* error (ELIZA_ERR_CANCELLED after cancel()).
    virtual int next(int32_t * tokens_out, size_t tokens_cap, size_t * num_tokens_out, char * text_out,
                     size_t text_cap, int32_t * drafter_drafted_out, int32_t * drafter_accepted_out,
                     char ** out_error) = 0;
    virtual int cancel() = 0;  // ELIZA_OK; safe from another thread
    virtual int reset() = 0;   // clear KV + sampler/counters
    // Prefix-preserving reset; a backend without prefix reuse does a full reset and returns 0.
    // The FFI holds every backend to that: an error, or a count above max(n_keep, 0), is
    // followed by reset() and answered 0 (ELIZA_ERR_FFI_FAULT if that reset fails too).
    virtual int reset_keep(int32_t n_keep) = 0;
    // Defaults: ELIZA_ERR_INVALID_ARG, "this backend does not support slot files".
    virtual int save_slot(const char * filename, char ** out_error);
    virtual int restore_slot(const char * filename, char ** out_error);
};

// A static-lifetime singleton per linked-in runtime.
class LlmBackendFactory {
public:
    virtual ~LlmBackendFactory() = default;
    virtual const char * name() const = 0;                // what ELIZA_LLM_BACKEND matches
    virtual bool available() const = 0;                   // compiled in AND its runtime present on this host; cheap after its first call (which may load the runtime)
    virtual bool can_serve(const char * bundle_dir) const = 0;  // its artifact exists under <bundle>/text; cheap
    virtual int preference_rank() const = 0;              // higher wins; the in-tree llama.cpp path is 0
    // The FFI owns the returned session. nullptr + *out_error on failure.
    virtual LlmBackendSession * open(EliInferenceContext * ctx, const eliza_llm_stream_config_t * cfg,
                                     char ** out_error) = 0;
};

// Adds a factory. Idempotent by name (case-insensitive): a name already registered keeps
// its first factory and the call returns false. Thread-safe.
bool llm_backend_register(LlmBackendFactory * factory);

// Registers every factory whose build gate (ELIZA_ENABLE_*) is on, in matrix.yaml order.
// Idempotent; the FFI calls it at each _open.
void llm_backend_register_builtins();

// Resolution (ELIZA_LLM_BACKEND, matched case-insensitively after trimming whitespace;
// empty or all-whitespace counts as unset):
//   "llama.cpp" / "llamacpp"              -> nullptr, *out_error == nullptr (in-tree path)
//   X registered, available, can serve    -> X
//   X registered, not available           -> nullptr + error (unavailable on this host)
//   X available, cannot serve the bundle  -> nullptr + error (bundle lacks X's artifact)
//   X not registered                      -> nullptr + error (not registered in this build)
//   unset: the highest preference_rank among available factories that can serve the
//   bundle, if that rank is above llama.cpp's 0; ties go to the earliest registered;
//   none -> nullptr, no error (in-tree path).
// The return contract: non-null = open this backend; nullptr + no error = llama.cpp;
// nullptr + error = hard failure, the FFI aborts the _open.
LlmBackendFactory * llm_backend_select(const char * bundle_dir, const eliza_llm_stream_config_t * cfg,
                                       char ** out_error);

// The bundle root of a context, for backends (defined where the struct is complete).
const char * llm_backend_context_bundle_dir(const EliInferenceContext * ctx);

namespace eliza::seam {

// llm_backend_select with the override passed in (nullptr = unset) instead of read from
// the environment: the one implementation both paths share.
LlmBackendFactory * select_with_override(const char * bundle_dir, const char * override_value, char ** out_error);

// true when the bundle holds what one artifact pattern of matrix.yaml names. The forms:
//   "text/*.ext"  an entry (file or directory) of text/ named <something>.ext
//   "text/name/"  a directory text/name
//   "text/name"   a regular file text/name
// CMake refuses any other form at configure time, so here it only ever means false.
bool bundle_has_artifact(const char * bundle_dir, const char * pattern) noexcept;

// Snapshot of the registered names in registration order (for messages and tests).
std::string registered_names();
// The registered factories that can serve the bundle (whether or not available on this
// host), comma-separated in registration order; "" when none.
std::string serving_names(const char * bundle_dir);

// Empties the registry. For the test kit only; never exported from the shipped library.
void clear_registry_for_tests();

}  // namespace eliza::seam

namespace eliza::backends {

// One gate as matrix.yaml declares it. CMake generates one per gate that is ON (from the
// table conanfile.py passes in) and hands it to the gate's factory, so the name
// ELIZA_LLM_BACKEND matches, the artifacts can_serve() probes and the rank are stated once,
// in the matrix, and cannot drift from it. Static storage: factories keep a reference.
struct GateSpec {
    const char * id;                 // the gate id, e.g. "litert"
    const char * factory_name;       // the factory's name(), e.g. "litert-lm"
    const char * const * artifacts;  // patterns for seam::bundle_has_artifact
    size_t n_artifacts;
    int preference_rank;             // higher wins auto-selection; llama.cpp is 0
};

// The base of every gate's factory. What the matrix states is final here; a gate's file
// supplies only what depends on its runtime: available(), open(), and which of the gate's
// artifacts its body can load here (loads_artifact).
class GateFactory : public LlmBackendFactory {
public:
    explicit GateFactory(const GateSpec & spec) noexcept : spec_(spec) {}
    const char * name() const final { return spec_.factory_name; }
    // Any of the spec's artifacts that this body loads: a bundle that carries only an
    // artifact of the gate that another body of it loads (a CoreML package on Linux) falls
    // through as a bundle without any does.
    bool can_serve(const char * bundle_dir) const final;
    int preference_rank() const final { return spec_.preference_rank; }
    const GateSpec & spec() const noexcept { return spec_; }

protected:
    // Whether this build's body loads artifacts of the spec's `pattern` (one of
    // spec().artifacts) on this platform. Default: every one.
    virtual bool loads_artifact(const char * pattern) const {
        (void)pattern;
        return true;
    }

private:
    const GateSpec & spec_;
};

// A gate compiled into this build: its spec and its factory singleton.
struct BuiltinGate {
    const GateSpec * spec;
    LlmBackendFactory * factory;
};

// The gates that are ON in this build, in matrix.yaml order (what
// llm_backend_register_builtins registers; the test kit lists them).
size_t builtin_gate_count();
const BuiltinGate * builtin_gate(size_t index);  // nullptr past the end

// Each gate <id> that is ON defines, in native/src/backends/<id>.cpp,
//   LlmBackendFactory & <id with '-' -> '_'>_factory(const GateSpec & spec);
// returning its singleton (see docs/adding-a-gate.md). The generated table declares and calls it.

}  // namespace eliza::backends
