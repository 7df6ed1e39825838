// The interface between libelizainference (C++17) and its MLX module
// (libelizainference-mlx.so, C++20, linked against libmlx). Plain C, so neither MLX's C++20
// headers nor its exceptions cross it: the library dlopen()s the module on first use, from
// the folder it was loaded from, and a host without MLX simply has no loadable module.
//
// The module is a numeric kernel only: the forward pass, with a KV cache, of the
// architecture an MLX-LM weights directory's config.json names (model_type "llama" or
// "gemma3_text"). Everything the seam's contract says about a stream
// (sampling, text, cancel, resets, slots) stays in the library (backends/mlx.cpp), on the
// same code paths for every runtime.
//
// Every function is safe to call from any thread: the module serialises its MLX work (MLX
// evaluates a graph only on the thread that built it, and its streams are threads that are
// never freed, so it uses one stream for the process).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ELIZA_MLX_MODULE_ABI 1
#define ELIZA_MLX_MODULE_ENTRY "eliza_mlx_module_v1"

typedef struct EliMlxModel EliMlxModel;  // weights, shared by every sequence of one directory
typedef struct EliMlxSeq EliMlxSeq;      // one sequence's KV cache

typedef struct EliMlxModuleApi {
    int abi;  // ELIZA_MLX_MODULE_ABI
    // "mlx 0.32.4 (cpu)": the runtime's own version and the device it computes on.
    const char * (*runtime_version)(void);
    // Loads <dir>/config.json and <dir>/model.safetensors. NULL + message (err, err_cap) on failure.
    EliMlxModel * (*load)(const char * weights_dir, char * err, size_t err_cap);
    void (*free_model)(EliMlxModel * model);
    int32_t (*n_vocab)(const EliMlxModel * model);
    int32_t (*n_ctx_train)(const EliMlxModel * model);
    EliMlxSeq * (*new_seq)(EliMlxModel * model, char * err, size_t err_cap);
    void (*free_seq)(EliMlxSeq * seq);
    int32_t (*n_past)(const EliMlxSeq * seq);
    // Appends n tokens at position n_past and writes the last one's logits (n_vocab floats)
    // to logits_out. 0, or -1 + message with the sequence unchanged.
    int (*forward)(EliMlxSeq * seq, const int32_t * tokens, size_t n, float * logits_out, char * err,
                   size_t err_cap);
    // Keeps the first n_keep positions of the cache (0: empty). 0, or -1 when n_keep > n_past.
    int (*truncate)(EliMlxSeq * seq, int32_t n_keep);
} EliMlxModuleApi;

// The module's one exported symbol.
typedef const EliMlxModuleApi * (*EliMlxModuleEntry)(void);

#ifdef __cplusplus
}
#endif
