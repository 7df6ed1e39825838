// abi_loader.h: the C ABI of a libelizainference loaded at run time (dlopen), for the
// tools that must drive any build of the library without linking it: e2e_loop_bench (a
// baseline from an older commit too) and case_runner (on the target, under an emulator).
//
// Header-only and free of the library's own sources, so a tool built once loads every
// cell's library. Errors go to stderr prefixed with the tool's name; no exception is used.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "eliza-inference-ffi.h"

namespace abi_loader {

// The functions the tools call, resolved by name.
struct Api {
    decltype(&eliza_inference_abi_version) abi_version;
    decltype(&eliza_inference_free_string) free_string;
    decltype(&eliza_inference_create) create;
    decltype(&eliza_inference_destroy) destroy;
    decltype(&eliza_inference_tokenize) tokenize;
    decltype(&eliza_inference_free_tokens) free_tokens;
    decltype(&eliza_inference_llm_stream_open) open;
    decltype(&eliza_inference_llm_stream_prefill) prefill;
    decltype(&eliza_inference_llm_stream_next) next;
    decltype(&eliza_inference_llm_stream_close) close;
};

// The library's handle (kept open for the life of the process), or nullptr after saying why.
inline void * open_library(const char * tool, const std::string & path) {
    void * handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) std::fprintf(stderr, "%s: cannot load library '%s': %s\n", tool, path.c_str(), dlerror());
    return handle;
}

template <typename F> bool resolve(const char * tool, void * handle, const char * name, F & fn) {
    fn = reinterpret_cast<F>(dlsym(handle, name));
    if (!fn) std::fprintf(stderr, "%s: symbol %s missing from the library\n", tool, name);
    return fn != nullptr;
}

enum class Loaded { ok, unloadable, abi_mismatch };

// Whether the library behind handle reports this tool's ABI version, the header's
// ELIZA_INFERENCE_ABI_VERSION. Only eliza_inference_abi_version is resolved and called, so
// a library of another version is refused before anything else of it is looked up; the
// refusal is one line on stderr.
inline Loaded check_abi(const char * tool, void * handle, const std::string & path) {
    decltype(&eliza_inference_abi_version) abi_version = nullptr;
    if (!resolve(tool, handle, "eliza_inference_abi_version", abi_version)) return Loaded::unloadable;
    const char * reported = abi_version();
    const std::string expected = std::to_string(ELIZA_INFERENCE_ABI_VERSION);
    if (reported != nullptr && expected == reported) return Loaded::ok;
    std::fprintf(stderr,
                 "%s: library '%s' reports ABI version %s%s%s; %s is built for ABI %s "
                 "(ELIZA_INFERENCE_ABI_VERSION of eliza-inference-ffi.h): use a library and a %s of the same ABI "
                 "version\n",
                 tool, path.c_str(), reported ? "\"" : "", reported ? reported : "NULL", reported ? "\"" : "", tool,
                 expected.c_str(), tool);
    return Loaded::abi_mismatch;
}

// The library at path, checked by check_abi, with every function of Api; anything but
// Loaded::ok has been explained on stderr.
inline Loaded load_api(const char * tool, const std::string & path, Api & api) {
    void * handle = open_library(tool, path);
    if (!handle) return Loaded::unloadable;
    const Loaded abi = check_abi(tool, handle, path);
    if (abi != Loaded::ok) return abi;
    const bool all = resolve(tool, handle, "eliza_inference_abi_version", api.abi_version) &&
                     resolve(tool, handle, "eliza_inference_free_string", api.free_string) &&
                     resolve(tool, handle, "eliza_inference_create", api.create) &&
                     resolve(tool, handle, "eliza_inference_destroy", api.destroy) &&
                     resolve(tool, handle, "eliza_inference_tokenize", api.tokenize) &&
                     resolve(tool, handle, "eliza_inference_free_tokens", api.free_tokens) &&
                     resolve(tool, handle, "eliza_inference_llm_stream_open", api.open) &&
                     resolve(tool, handle, "eliza_inference_llm_stream_prefill", api.prefill) &&
                     resolve(tool, handle, "eliza_inference_llm_stream_next", api.next) &&
                     resolve(tool, handle, "eliza_inference_llm_stream_close", api.close);
    return all ? Loaded::ok : Loaded::unloadable;
}

// A string the library allocated, copied and freed ("" for none).
inline std::string owned(decltype(&eliza_inference_free_string) free_string, char * s) {
    std::string out = s ? s : "";
    free_string(s);
    return out;
}

}  // namespace abi_loader
