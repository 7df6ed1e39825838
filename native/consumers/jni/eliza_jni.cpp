// eliza_jni: the JNI glue of the JVM consumer, the way the Android Capacitor bridge binds
// libelizainference. It is compiled against the released header only (no source of the
// library) and dlopens the library named at run time, so one glue drives every cell.
//
// The glue only carries calls across: statuses come back to Java as the raw integers, and
// every text the library produces (messages, detokenized text, step text) comes back as a
// byte[] that Java decodes strictly. JNI's NewStringUTF takes "modified UTF-8" and would
// turn a malformed message into garbage or an abort instead of an error Java can see.
//
// No C++ exception crosses into the JVM: every entry point runs inside guarded(), which
// turns bad_alloc into OutOfMemoryError and anything else into an IllegalStateException.
// A failure of the library becomes eliza.inference.jni.ElizaException(function, status,
// hasStatus, message bytes).
#include <dlfcn.h>
#include <jni.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "eliza-inference-ffi.h"

namespace {

struct Api {
    decltype(&eliza_inference_abi_version) abi_version = nullptr;
    decltype(&eliza_inference_free_string) free_string = nullptr;
    decltype(&eliza_inference_create) create = nullptr;
    decltype(&eliza_inference_destroy) destroy = nullptr;
    decltype(&eliza_inference_tokenize_supported) tokenize_supported = nullptr;
    decltype(&eliza_inference_tokenize) tokenize = nullptr;
    decltype(&eliza_inference_detokenize) detokenize = nullptr;
    decltype(&eliza_inference_free_tokens) free_tokens = nullptr;
    decltype(&eliza_inference_llm_stream_supported) stream_supported = nullptr;
    decltype(&eliza_inference_llm_stream_open) open = nullptr;
    decltype(&eliza_inference_llm_stream_prefill) prefill = nullptr;
    decltype(&eliza_inference_llm_stream_next) next = nullptr;
    decltype(&eliza_inference_llm_stream_cancel) cancel = nullptr;
    decltype(&eliza_inference_llm_stream_reset) reset = nullptr;
    decltype(&eliza_inference_llm_stream_reset_keep) reset_keep = nullptr;
    decltype(&eliza_inference_llm_stream_save_slot) save_slot = nullptr;
    decltype(&eliza_inference_llm_stream_restore_slot) restore_slot = nullptr;
    decltype(&eliza_inference_llm_stream_close) close = nullptr;
};

// Filled by load() and bind() on the Java thread that starts the consumer, before it
// starts any other thread; Thread.start() orders these writes before the other thread's
// reads, so the table needs no lock.
Api g_api;
void * g_library = nullptr;
bool g_bound = false;

constexpr const char * kExceptionClass = "eliza/inference/jni/ElizaException";

jbyteArray to_bytes(JNIEnv * env, const char * data, size_t n) {
    if (n > static_cast<size_t>(INT32_MAX)) n = static_cast<size_t>(INT32_MAX);
    jbyteArray out = env->NewByteArray(static_cast<jsize>(n));
    if (out != nullptr && n > 0) env->SetByteArrayRegion(out, 0, static_cast<jsize>(n), reinterpret_cast<const jbyte *>(data));
    return out;
}

// The bytes of a Java byte[] as a NUL-terminated string (paths and texts arrive as UTF-8
// bytes: GetStringUTFChars would hand over modified UTF-8, wrong for characters outside
// the BMP such as emoji in a path).
bool from_bytes(JNIEnv * env, jbyteArray array, std::string & out) {
    if (array == nullptr) {
        env->ThrowNew(env->FindClass("java/lang/NullPointerException"), "byte[] argument is null");
        return false;
    }
    const jsize n = env->GetArrayLength(array);
    out.assign(static_cast<size_t>(n), '\0');
    if (n > 0) env->GetByteArrayRegion(array, 0, n, reinterpret_cast<jbyte *>(&out[0]));
    return !env->ExceptionCheck();
}

// Throws ElizaException(function, status, has_status, message) with message's bytes as they are.
void throw_eliza(JNIEnv * env, const char * function, int status, bool has_status, const char * message, size_t n) {
    if (env->ExceptionCheck()) return;
    jclass cls = env->FindClass(kExceptionClass);
    if (cls == nullptr) return;  // NoClassDefFoundError is pending
    jmethodID ctor = env->GetMethodID(cls, "<init>", "(Ljava/lang/String;IZ[B)V");
    if (ctor == nullptr) return;
    jstring fn = env->NewStringUTF(function);  // ASCII names only
    jbyteArray bytes = message ? to_bytes(env, message, n) : nullptr;
    if (env->ExceptionCheck()) return;
    auto * error = static_cast<jthrowable>(env->NewObject(cls, ctor, fn, static_cast<jint>(status),
                                                          has_status ? JNI_TRUE : JNI_FALSE, bytes));
    if (error != nullptr) env->Throw(error);
}

// A string the library allocated (*out_error, *out_text), freed with its free_string when
// the holder goes, on every path out of a call.
class LibString {
public:
    LibString() = default;
    LibString(const LibString &) = delete;
    LibString & operator=(const LibString &) = delete;
    ~LibString() {
        if (p_ != nullptr) g_api.free_string(p_);
    }
    char ** out() { return &p_; }
    const char * get() const { return p_; }

private:
    char * p_ = nullptr;
};

// The same for the token array of eliza_inference_tokenize.
class LibTokens {
public:
    LibTokens() = default;
    LibTokens(const LibTokens &) = delete;
    LibTokens & operator=(const LibTokens &) = delete;
    ~LibTokens() {
        if (p_ != nullptr) g_api.free_tokens(p_);
    }
    int ** out() { return &p_; }
    const int * get() const { return p_; }

private:
    int * p_ = nullptr;
};

// The library's *out_error (may be unset) as an ElizaException.
void throw_library_error(JNIEnv * env, const char * function, int status, bool has_status, const LibString & error) {
    const char * text = error.get();
    throw_eliza(env, function, status, has_status, text, text ? std::strlen(text) : 0);
}

void throw_state(JNIEnv * env, const char * message) {
    if (env->ExceptionCheck()) return;
    jclass cls = env->FindClass("java/lang/IllegalStateException");
    if (cls != nullptr) env->ThrowNew(cls, message);
}

template <typename R, typename Body> R guarded(JNIEnv * env, R fallback, Body && body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        if (!env->ExceptionCheck()) {
            jclass cls = env->FindClass("java/lang/OutOfMemoryError");
            if (cls != nullptr) env->ThrowNew(cls, "eliza_jni: out of memory in the glue");
        }
    } catch (...) {
        throw_state(env, "eliza_jni: unexpected C++ exception in the glue");
    }
    return fallback;
}

bool ready(JNIEnv * env) {
    if (!g_bound) throw_state(env, "eliza_jni: bind() has not succeeded; load() and bind() come first");
    return g_bound;
}

template <typename P> P * handle(jlong h) { return reinterpret_cast<P *>(static_cast<intptr_t>(h)); }
template <typename P> jlong to_handle(P * p) { return static_cast<jlong>(reinterpret_cast<intptr_t>(p)); }

template <typename F> bool resolve(void * library, const char * name, F & fn, std::string & missing) {
    fn = reinterpret_cast<F>(dlsym(library, name));
    if (fn == nullptr && missing.empty()) missing = name;
    return fn != nullptr;
}

template <typename Fn>
void slot_call(JNIEnv * env, const char * function, Fn fn, jlong stream, jbyteArray path) {
    guarded<int>(env, 0, [&] {
        std::string file;
        if (!ready(env) || !from_bytes(env, path, file)) return 0;
        LibString error;
        const int rc = fn(handle<EliLlmStream>(stream), file.c_str(), error.out());
        if (rc < 0) throw_library_error(env, function, rc, true, error);
        return 0;
    });
}

}  // namespace

extern "C" {

// dlopens the library and resolves eliza_inference_abi_version only; returns what it
// reports (ASCII digits), so Java can refuse another ABI before anything else is bound.
JNIEXPORT jbyteArray JNICALL Java_eliza_inference_jni_ElizaNative_load(JNIEnv * env, jclass, jbyteArray path) {
    return guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
        std::string file;
        if (!from_bytes(env, path, file)) return nullptr;
        void * library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (library == nullptr) {
            const char * why = dlerror();
            const std::string message = "cannot load library '" + file + "': " + (why ? why : "dlopen failed");
            throw_eliza(env, "dlopen", 0, false, message.data(), message.size());
            return nullptr;
        }
        auto abi_version = reinterpret_cast<decltype(&eliza_inference_abi_version)>(dlsym(library, "eliza_inference_abi_version"));
        if (abi_version == nullptr) {
            const std::string message = "'" + file + "' has no eliza_inference_abi_version: not a libelizainference";
            throw_eliza(env, "dlsym", 0, false, message.data(), message.size());
            return nullptr;
        }
        g_library = library;
        g_api = Api{};
        g_api.abi_version = abi_version;
        g_bound = false;
        const char * version = abi_version();
        return version ? to_bytes(env, version, std::strlen(version)) : nullptr;
    });
}

// ELIZA_INFERENCE_ABI_VERSION of the header this glue was compiled against.
JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_headerAbiVersion(JNIEnv *, jclass) {
    return ELIZA_INFERENCE_ABI_VERSION;
}

// Resolves every other function of the ABI; ElizaException names the first one missing.
JNIEXPORT void JNICALL Java_eliza_inference_jni_ElizaNative_bind(JNIEnv * env, jclass) {
    guarded<int>(env, 0, [&] {
        if (g_library == nullptr) {
            throw_state(env, "eliza_jni: load() has not succeeded");
            return 0;
        }
        Api & a = g_api;
        void * l = g_library;
        std::string missing;
        resolve(l, "eliza_inference_free_string", a.free_string, missing);
        resolve(l, "eliza_inference_create", a.create, missing);
        resolve(l, "eliza_inference_destroy", a.destroy, missing);
        resolve(l, "eliza_inference_tokenize_supported", a.tokenize_supported, missing);
        resolve(l, "eliza_inference_tokenize", a.tokenize, missing);
        resolve(l, "eliza_inference_detokenize", a.detokenize, missing);
        resolve(l, "eliza_inference_free_tokens", a.free_tokens, missing);
        resolve(l, "eliza_inference_llm_stream_supported", a.stream_supported, missing);
        resolve(l, "eliza_inference_llm_stream_open", a.open, missing);
        resolve(l, "eliza_inference_llm_stream_prefill", a.prefill, missing);
        resolve(l, "eliza_inference_llm_stream_next", a.next, missing);
        resolve(l, "eliza_inference_llm_stream_cancel", a.cancel, missing);
        resolve(l, "eliza_inference_llm_stream_reset", a.reset, missing);
        resolve(l, "eliza_inference_llm_stream_reset_keep", a.reset_keep, missing);
        resolve(l, "eliza_inference_llm_stream_save_slot", a.save_slot, missing);
        resolve(l, "eliza_inference_llm_stream_restore_slot", a.restore_slot, missing);
        resolve(l, "eliza_inference_llm_stream_close", a.close, missing);
        if (!missing.empty()) {
            const std::string message = "the library lacks " + missing + " of the ABI";
            throw_eliza(env, "dlsym", 0, false, message.data(), message.size());
            return 0;
        }
        g_bound = true;
        return 0;
    });
}

// {sizeof(eliza_llm_stream_config_t), the offset of each field in header order, sizeof(void *)}
// as this compiler lays out the header's struct.
JNIEXPORT jintArray JNICALL Java_eliza_inference_jni_ElizaNative_configLayout(JNIEnv * env, jclass) {
    return guarded<jintArray>(env, nullptr, [&]() -> jintArray {
        using C = eliza_llm_stream_config_t;
        const jint values[] = {
            static_cast<jint>(sizeof(C)),
            static_cast<jint>(offsetof(C, max_tokens)), static_cast<jint>(offsetof(C, temperature)),
            static_cast<jint>(offsetof(C, top_p)), static_cast<jint>(offsetof(C, top_k)),
            static_cast<jint>(offsetof(C, repeat_penalty)), static_cast<jint>(offsetof(C, slot_id)),
            static_cast<jint>(offsetof(C, prompt_cache_key)), static_cast<jint>(offsetof(C, draft_min)),
            static_cast<jint>(offsetof(C, draft_max)), static_cast<jint>(offsetof(C, mtp_drafter_path)),
            static_cast<jint>(offsetof(C, gbnf_grammar)), static_cast<jint>(offsetof(C, disable_thinking)),
            static_cast<jint>(sizeof(void *)),
        };
        const jsize n = static_cast<jsize>(sizeof values / sizeof values[0]);
        jintArray out = env->NewIntArray(n);
        if (out != nullptr) env->SetIntArrayRegion(out, 0, n, values);
        return out;
    });
}

JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_tokenizeSupported(JNIEnv * env, jclass) {
    return ready(env) ? g_api.tokenize_supported() : 0;
}

JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_streamSupported(JNIEnv * env, jclass) {
    return ready(env) ? g_api.stream_supported() : 0;
}

JNIEXPORT jlong JNICALL Java_eliza_inference_jni_ElizaNative_create(JNIEnv * env, jclass, jbyteArray bundle) {
    return guarded<jlong>(env, 0, [&]() -> jlong {
        std::string dir;
        if (!ready(env) || !from_bytes(env, bundle, dir)) return 0;
        LibString error;
        EliInferenceContext * ctx = g_api.create(dir.c_str(), error.out());
        if (ctx == nullptr) {
            throw_library_error(env, "eliza_inference_create", 0, false, error);
            return 0;
        }
        return to_handle(ctx);
    });
}

JNIEXPORT void JNICALL Java_eliza_inference_jni_ElizaNative_destroy(JNIEnv * env, jclass, jlong ctx) {
    if (ready(env)) g_api.destroy(handle<EliInferenceContext>(ctx));
}

JNIEXPORT jintArray JNICALL Java_eliza_inference_jni_ElizaNative_tokenize(JNIEnv * env, jclass, jlong ctx,
                                                                          jbyteArray text, jboolean add_special,
                                                                          jboolean parse_special) {
    return guarded<jintArray>(env, nullptr, [&]() -> jintArray {
        std::string bytes;
        if (!ready(env) || !from_bytes(env, text, bytes)) return nullptr;
        LibTokens ids;
        size_t n = 0;
        LibString error;
        const int rc = g_api.tokenize(handle<EliInferenceContext>(ctx), bytes.data(), bytes.size(), add_special ? 1 : 0,
                                      parse_special ? 1 : 0, ids.out(), &n, error.out());
        if (rc < 0) {
            throw_library_error(env, "eliza_inference_tokenize", rc, true, error);
            return nullptr;
        }
        const std::vector<jint> copy(ids.get(), ids.get() + n);
        jintArray out = env->NewIntArray(static_cast<jsize>(copy.size()));
        if (out != nullptr && !copy.empty()) env->SetIntArrayRegion(out, 0, static_cast<jsize>(copy.size()), copy.data());
        return out;
    });
}

JNIEXPORT jbyteArray JNICALL Java_eliza_inference_jni_ElizaNative_detokenize(JNIEnv * env, jclass, jlong ctx,
                                                                             jintArray tokens, jboolean remove_special,
                                                                             jboolean unparse_special) {
    return guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
        if (!ready(env)) return nullptr;
        const jsize n = env->GetArrayLength(tokens);
        std::vector<int32_t> ids(static_cast<size_t>(n));
        if (n > 0) env->GetIntArrayRegion(tokens, 0, n, reinterpret_cast<jint *>(ids.data()));
        LibString text;
        size_t len = 0;
        LibString error;
        const int rc = g_api.detokenize(handle<EliInferenceContext>(ctx), ids.data(), ids.size(), remove_special ? 1 : 0,
                                        unparse_special ? 1 : 0, text.out(), &len, error.out());
        if (rc < 0) {
            throw_library_error(env, "eliza_inference_detokenize", rc, true, error);
            return nullptr;
        }
        return to_bytes(env, text.get() ? text.get() : "", text.get() ? len : 0);
    });
}

// The config's strings (prompt_cache_key, mtp_drafter_path, gbnf_grammar) stay NULL: the
// consumer drives plain greedy streams.
JNIEXPORT jlong JNICALL Java_eliza_inference_jni_ElizaNative_open(JNIEnv * env, jclass, jlong ctx, jint max_tokens,
                                                                  jfloat temperature, jfloat top_p, jint top_k,
                                                                  jfloat repeat_penalty, jint slot_id, jint draft_min,
                                                                  jint draft_max) {
    return guarded<jlong>(env, 0, [&]() -> jlong {
        if (!ready(env)) return 0;
        eliza_llm_stream_config_t cfg{};
        cfg.max_tokens = max_tokens;
        cfg.temperature = temperature;
        cfg.top_p = top_p;
        cfg.top_k = top_k;
        cfg.repeat_penalty = repeat_penalty;
        cfg.slot_id = slot_id;
        cfg.draft_min = draft_min;
        cfg.draft_max = draft_max;
        LibString error;
        EliLlmStream * stream = g_api.open(handle<EliInferenceContext>(ctx), &cfg, error.out());
        if (stream == nullptr) {
            throw_library_error(env, "eliza_inference_llm_stream_open", 0, false, error);
            return 0;
        }
        return to_handle(stream);
    });
}

JNIEXPORT void JNICALL Java_eliza_inference_jni_ElizaNative_prefill(JNIEnv * env, jclass, jlong stream, jintArray tokens) {
    guarded<int>(env, 0, [&] {
        if (!ready(env)) return 0;
        const jsize n = env->GetArrayLength(tokens);
        std::vector<int32_t> ids(static_cast<size_t>(n));
        if (n > 0) env->GetIntArrayRegion(tokens, 0, n, reinterpret_cast<jint *>(ids.data()));
        LibString error;
        const int rc = g_api.prefill(handle<EliLlmStream>(stream), ids.data(), ids.size(), error.out());
        if (rc < 0) throw_library_error(env, "eliza_inference_llm_stream_prefill", rc, true, error);
        return 0;
    });
}

// One step: the ids into tokens_out, the text (up to its NUL) into text_out, and
// meta = {tokens, text bytes, drafted, accepted}. Returns 0 (more) or 1 (final).
JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_next(JNIEnv * env, jclass, jlong stream,
                                                                 jintArray tokens_out, jbyteArray text_out,
                                                                 jintArray meta) {
    return guarded<jint>(env, -1, [&]() -> jint {
        if (!ready(env)) return -1;
        const jsize tokens_cap = env->GetArrayLength(tokens_out);
        const jsize text_cap = env->GetArrayLength(text_out);
        if (env->GetArrayLength(meta) < 4) {
            throw_state(env, "eliza_jni: next() needs meta of at least 4 ints");
            return -1;
        }
        std::vector<int32_t> ids(static_cast<size_t>(tokens_cap > 0 ? tokens_cap : 1));
        std::vector<char> text(static_cast<size_t>(text_cap > 0 ? text_cap : 1));
        size_t n = 0;
        int32_t drafted = 0;
        int32_t accepted = 0;
        LibString error;
        const int rc = g_api.next(handle<EliLlmStream>(stream), ids.data(), static_cast<size_t>(tokens_cap), &n, text.data(),
                                  static_cast<size_t>(text_cap), &drafted, &accepted, error.out());
        if (rc < 0) {
            throw_library_error(env, "eliza_inference_llm_stream_next", rc, true, error);
            return rc;
        }
        const size_t text_len = text_cap > 0 ? strnlen(text.data(), static_cast<size_t>(text_cap)) : 0;
        if (n > static_cast<size_t>(tokens_cap)) n = static_cast<size_t>(tokens_cap);
        if (n > 0) env->SetIntArrayRegion(tokens_out, 0, static_cast<jsize>(n), reinterpret_cast<const jint *>(ids.data()));
        if (text_len > 0) env->SetByteArrayRegion(text_out, 0, static_cast<jsize>(text_len), reinterpret_cast<const jbyte *>(text.data()));
        const jint values[4] = {static_cast<jint>(n), static_cast<jint>(text_len), drafted, accepted};
        env->SetIntArrayRegion(meta, 0, 4, values);
        return rc;
    });
}

// Safe from any thread (the header's contract): the second Java thread calls this while
// the first is inside next().
JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_cancel(JNIEnv * env, jclass, jlong stream) {
    return ready(env) ? g_api.cancel(handle<EliLlmStream>(stream)) : ELIZA_ERR_INVALID_ARG;
}

JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_reset(JNIEnv * env, jclass, jlong stream) {
    return ready(env) ? g_api.reset(handle<EliLlmStream>(stream)) : ELIZA_ERR_INVALID_ARG;
}

JNIEXPORT jint JNICALL Java_eliza_inference_jni_ElizaNative_resetKeep(JNIEnv * env, jclass, jlong stream, jint n_keep) {
    return ready(env) ? g_api.reset_keep(handle<EliLlmStream>(stream), n_keep) : ELIZA_ERR_INVALID_ARG;
}

JNIEXPORT void JNICALL Java_eliza_inference_jni_ElizaNative_saveSlot(JNIEnv * env, jclass, jlong stream, jbyteArray path) {
    slot_call(env, "eliza_inference_llm_stream_save_slot", g_api.save_slot, stream, path);
}

JNIEXPORT void JNICALL Java_eliza_inference_jni_ElizaNative_restoreSlot(JNIEnv * env, jclass, jlong stream,
                                                                        jbyteArray path) {
    slot_call(env, "eliza_inference_llm_stream_restore_slot", g_api.restore_slot, stream, path);
}

JNIEXPORT void JNICALL Java_eliza_inference_jni_ElizaNative_close(JNIEnv * env, jclass, jlong stream) {
    if (ready(env)) g_api.close(handle<EliLlmStream>(stream));
}

}  // extern "C"
