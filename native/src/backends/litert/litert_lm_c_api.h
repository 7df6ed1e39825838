// The part of LiteRT-LM's C API the litert backend uses, as function pointer types: the
// engine is dlopen()ed with RTLD_LOCAL and resolved by name, never linked (it exports
// about 15,000 absl/TFLite/XNNPACK symbols and operator new/delete).
//
// Declarations of the C API as the PyPI wheel litert-lm-api==0.18.1 exports it: upstream's
// c/engine.h of the C API "added in version 0.1.0/0.2.0" (the same signatures as the wheel's
// litert_lm/_ffi.py). Every function returning int returns 0 on success and non-zero on
// failure. Upstream's "C API 1.0.0" changes these signatures (status codes, structs): the
// runtime is pinned (conan/index/recipes/litert-lm) and this file with it.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct LiteRtLmEngineSettings;
struct LiteRtLmEngine;
struct LiteRtLmSamplerParams;
struct LiteRtLmSessionConfig;
struct LiteRtLmSession;
struct LiteRtLmInputData;
struct LiteRtLmStreamChunk;
struct LiteRtLmTokenizeResult;

typedef void (*LiteRtLmStreamCallback)(void * callback_data, const LiteRtLmStreamChunk * chunk);

enum LiteRtLmSamplerTypeValue : int {
    kLiteRtLmSamplerTypeUnspecified = 0,
    kLiteRtLmSamplerTypeTopK = 1,
    kLiteRtLmSamplerTypeTopP = 2,
    kLiteRtLmSamplerTypeGreedy = 3,
};
enum LiteRtLmInputDataTypeValue : int { kLiteRtLmInputDataTypeText = 0 };
enum LiteRtLmActivationDataTypeValue : int { kLiteRtLmActivationDataTypeFloat32 = 0 };
constexpr int kLiteRtLmLogSilent = 1000;  // litert_lm_set_min_log_level: nothing on stderr

}  // extern "C"

namespace eliza::backends::litert_c {

// One pointer per function, resolved by its C name (the names are the member names with the
// "litert_lm_" prefix; litert.cpp's resolve table spells each one once).
struct Api {
    void (*set_min_log_level)(int level);
    LiteRtLmEngineSettings * (*engine_settings_create)(const char * model_path, const char * backend,
                                                        const char * vision_backend, const char * audio_backend);
    void (*engine_settings_delete)(LiteRtLmEngineSettings *);
    void (*engine_settings_set_max_num_tokens)(LiteRtLmEngineSettings *, int max_num_tokens);
    void (*engine_settings_set_num_threads)(LiteRtLmEngineSettings *, int num_threads);
    void (*engine_settings_set_activation_data_type)(LiteRtLmEngineSettings *, int activation_data_type);
    LiteRtLmEngine * (*engine_create)(const LiteRtLmEngineSettings *);
    void (*engine_delete)(LiteRtLmEngine *);

    LiteRtLmTokenizeResult * (*engine_tokenize)(LiteRtLmEngine *, const char * text);
    void (*tokenize_result_delete)(LiteRtLmTokenizeResult *);
    const int * (*tokenize_result_get_tokens)(const LiteRtLmTokenizeResult *);
    size_t (*tokenize_result_get_num_tokens)(const LiteRtLmTokenizeResult *);

    LiteRtLmSamplerParams * (*sampler_params_create)(int type);
    void (*sampler_params_delete)(LiteRtLmSamplerParams *);
    void (*sampler_params_set_top_k)(LiteRtLmSamplerParams *, int32_t top_k);
    void (*sampler_params_set_top_p)(LiteRtLmSamplerParams *, float top_p);
    void (*sampler_params_set_temperature)(LiteRtLmSamplerParams *, float temperature);
    void (*sampler_params_set_seed)(LiteRtLmSamplerParams *, int32_t seed);
    LiteRtLmSessionConfig * (*session_config_create)();
    void (*session_config_set_max_output_tokens)(LiteRtLmSessionConfig *, int max_output_tokens);
    void (*session_config_set_apply_prompt_template)(LiteRtLmSessionConfig *, bool apply);
    void (*session_config_set_sampler_params)(LiteRtLmSessionConfig *, const LiteRtLmSamplerParams *);
    void (*session_config_delete)(LiteRtLmSessionConfig *);
    LiteRtLmSession * (*engine_create_session)(LiteRtLmEngine *, LiteRtLmSessionConfig *);
    void (*session_delete)(LiteRtLmSession *);

    LiteRtLmInputData * (*input_data_create)(int type, const void * data, size_t size);  // copies data
    void (*input_data_delete)(LiteRtLmInputData *);
    int (*session_run_prefill)(LiteRtLmSession *, const LiteRtLmInputData * const * inputs, size_t n_inputs);
    int (*session_run_decode_async)(LiteRtLmSession *, LiteRtLmStreamCallback, void * callback_data);
    const char * (*stream_chunk_get_text)(const LiteRtLmStreamChunk *);
    bool (*stream_chunk_is_final)(const LiteRtLmStreamChunk *);
    const char * (*stream_chunk_get_error)(const LiteRtLmStreamChunk *);
    void (*session_cancel_process)(LiteRtLmSession *);
    int (*session_rewind_to_step)(LiteRtLmSession *, int step);
};

}  // namespace eliza::backends::litert_c
