/*
 * libelizainference — the public C ABI.
 *
 * One prefix (eliza_inference_), opaque handles, sized integer types. Consumers (Node/Bun
 * FFI, JNI, Swift) bind these symbols and marshal eliza_llm_stream_config_t by offset, so
 * names, values and layout here are a published contract: change them only together with
 * ELIZA_INFERENCE_ABI_VERSION.
 *
 * Conventions for every function below:
 *   - A status return is >= 0 on success and one of the negative ELIZA_ERR_* codes on
 *     failure. On failure, when out_error is not NULL, *out_error receives a heap string
 *     that names the function and the reason; free it with eliza_inference_free_string.
 *     On success *out_error is left NULL.
 *   - The library never prints to stdout/stderr and never returns a defaulted result on
 *     failure. Messages of failures inside llama.cpp/ggml carry the error lines it logged
 *     during the call (bounded), worker threads' lines included.
 *   - No C++ exception crosses this boundary, and a llama.cpp/ggml assertion that fails on
 *     the calling thread becomes ELIZA_ERR_FFI_FAULT instead of ending the process (the
 *     stream it happened in is unusable afterwards: close it). docs/known-issues.md lists
 *     what cannot be caught.
 */
#ifndef ELIZA_INFERENCE_FFI_H
#define ELIZA_INFERENCE_FFI_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  define ELIZA_API __declspec(dllexport)
#else
#  define ELIZA_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define ELIZA_INFERENCE_ABI_VERSION 9

#define ELIZA_OK                    0
#define ELIZA_ERR_NOT_IMPLEMENTED (-1)
#define ELIZA_ERR_INVALID_ARG     (-2)
#define ELIZA_ERR_BUNDLE_INVALID  (-3)
#define ELIZA_ERR_FFI_FAULT       (-4)
#define ELIZA_ERR_OOM             (-5)
#define ELIZA_ERR_ABI_MISMATCH    (-6)
#define ELIZA_ERR_CANCELLED       (-7)

typedef struct EliInferenceContext EliInferenceContext;
typedef struct EliLlmStream EliLlmStream;

/* The decimal ELIZA_INFERENCE_ABI_VERSION as a static string ("9"). Never freed. */
ELIZA_API const char * eliza_inference_abi_version(void);

/* Frees a string returned through an out_error or out_text argument. NULL-safe. */
ELIZA_API void eliza_inference_free_string(char * s);

/*
 * Opens a bundle: its text model, <bundle_dir>/text/<name>.gguf (at most one .gguf file
 * there), or an artifact under text/ that a compiled-in backend serves (a .litertlm, MLX or
 * CoreML weights). A GGUF-only bundle's model is loaded here; a bundle that a compiled-in
 * backend can also serve loads its GGUF on the llama.cpp path's first use (tokenize,
 * detokenize, or a stream the selector leaves to llama.cpp), whose call then reports a
 * load failure. Returns NULL and sets *out_error when the directory is missing, holds
 * several text GGUFs, neither a GGUF nor an artifact of a compiled-in backend, or the model
 * loaded here fails to load (truncated, corrupt).
 */
ELIZA_API EliInferenceContext * eliza_inference_create(const char * bundle_dir, char ** out_error);

/*
 * Releases the context. NULL-safe. With no stream open it is freed now. Streams still open
 * on it keep it alive and keep working (generation, slot files, reset): it is freed when
 * the last of them is closed, so closing streams after their context is never a
 * use-after-free. Tokenize/detokenize and _open on a destroyed context are the caller's
 * error, like a second _destroy of one context.
 */
ELIZA_API void eliza_inference_destroy(EliInferenceContext * ctx);

/* ---- Tokenizer (ABI v9) ------------------------------------------------------------ */

/* 1 when eliza_inference_tokenize/detokenize are implemented by this build. */
ELIZA_API int eliza_inference_tokenize_supported(void);

/*
 * Tokenizes len bytes of text (not NUL-terminated necessarily). On success returns the
 * number of tokens (>= 0), *out_tokens is a heap array freed with
 * eliza_inference_free_tokens (NULL when there are no tokens) and *out_n its length.
 */
ELIZA_API int eliza_inference_tokenize(EliInferenceContext * ctx, const char * text, size_t len,
                                       int add_special, int parse_special,
                                       int ** out_tokens, size_t * out_n, char ** out_error);

/*
 * Turns n token ids back into UTF-8 bytes. On success returns ELIZA_OK, *out_text is a
 * NUL-terminated heap string freed with eliza_inference_free_string and *out_len its length
 * in bytes (the text may hold bytes that are not valid UTF-8 when the tokens end inside a
 * multi-byte character). remove_special drops a leading BOS; unparse_special renders
 * special tokens as their text. Ids outside the vocabulary: ELIZA_ERR_INVALID_ARG.
 */
ELIZA_API int eliza_inference_detokenize(EliInferenceContext * ctx, const int32_t * tokens, size_t n,
                                         int remove_special, int unparse_special,
                                         char ** out_text, size_t * out_len, char ** out_error);

/* Frees an array returned by eliza_inference_tokenize. NULL-safe. */
ELIZA_API void eliza_inference_free_tokens(int * tokens);

/* ---- Streaming LLM ----------------------------------------------------------------- */

/* 1 when the streaming surface below is implemented by this build. */
ELIZA_API int eliza_inference_llm_stream_supported(void);

/*
 * Generation settings, marshalled by offset: 64 bytes on LP64 (and every other data model
 * with 64-bit pointers), 8-byte aligned.
 *   offset  0 max_tokens         tokens per generation (counted from the last prefill); <= 0: until EOS or context full
 *   offset  4 temperature        <= 0: greedy (deterministic)
 *   offset  8 top_p              (0, 1]; <= 0 or >= 1: off
 *   offset 12 top_k              <= 0: off
 *   offset 16 repeat_penalty     1.0 or <= 0: off
 *   offset 20 slot_id            seed of the sampler when sampling (temperature > 0)
 *   offset 24 prompt_cache_key   reserved; may be NULL
 *   offset 32 draft_min          speculative decoding: shortest draft worth verifying (>= 0)
 *   offset 36 draft_max          speculative decoding: maximum draft length (>= 0; 0: 16; >= draft_min)
 *   offset 40 mtp_drafter_path   draft GGUF with the text model's vocabulary; NULL or empty: none.
 *                                Greedy only (temperature > 0 with it: ELIZA_ERR_NOT_IMPLEMENTED);
 *                                the output is byte-identical to greedy without it
 *   offset 48 gbnf_grammar       NULL or empty: none (non-empty: ELIZA_ERR_NOT_IMPLEMENTED)
 *   offset 56 disable_thinking   reserved for chat templates; ignored on raw token streams
 * With 32-bit pointers (ILP32: armeabi-v7a, x86) the same fields take 48 bytes, 4-byte
 * aligned: ILP32 offsets max_tokens 0, temperature 4, top_p 8, top_k 12, repeat_penalty 16,
 * slot_id 20, prompt_cache_key 24, draft_min 28, draft_max 32, mtp_drafter_path 36,
 * gbnf_grammar 40, disable_thinking 44.
 * _open refuses (ELIZA_ERR_INVALID_ARG, naming the field) a NaN or infinite temperature,
 * top_p or repeat_penalty and a draft length out of the range above.
 * Adaptive drafting (with mtp_drafter_path): draft_min and draft_max bound a step's draft
 * as above; within them the stream drafts only what the drafter is sure of, and backs off
 * while its drafts are rejected, so that a poor drafter costs little. Two settings of the
 * environment, read at eliza_inference_create (malformed or out of range: the create
 * fails naming the variable), steer it and never change the output:
 *   ELIZA_DRAFT_P_MIN        0 to 1, default 0.75: a draft stops before the first token
 *                            whose probability under the draft model (softmax over the
 *                            whole vocabulary) is below it; 0: no confidence rule
 *   ELIZA_DRAFT_BACKOFF_MAX  0 to 1024, default 128: after 2 consecutive steps that drafted
 *                            and had no draft token accepted (a step too unsure to draft
 *                            anything counts as one), the next 8 steps do not draft; each
 *                            further such step makes that skip 8 times longer, up to this
 *                            many steps;
 *                            an accepted draft token, a _prefill, _reset, _reset_keep or
 *                            _restore_slot ends the backoff; 0: every step drafts
 * A step that does not draft reports drafted = accepted = 0; the drafter stats count every
 * token drafted and accepted.
 */
typedef struct eliza_llm_stream_config_t {
    int32_t      max_tokens;
    float        temperature;
    float        top_p;
    int32_t      top_k;
    float        repeat_penalty;
    int32_t      slot_id;
    const char * prompt_cache_key;
    int32_t      draft_min;
    int32_t      draft_max;
    const char * mtp_drafter_path;
    const char * gbnf_grammar;
    int32_t      disable_thinking;
} eliza_llm_stream_config_t;

/* The layout above, asserted for the data model being compiled. */
#if defined(__cplusplus)
#  define ELIZA_LAYOUT_ASSERT(cond, msg) static_assert(cond, msg)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#  define ELIZA_LAYOUT_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#if defined(ELIZA_LAYOUT_ASSERT) && UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
ELIZA_LAYOUT_ASSERT(sizeof(eliza_llm_stream_config_t) == 64, "eliza_llm_stream_config_t is 64 bytes with 64-bit pointers");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, max_tokens) == 0, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, temperature) == 4, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, top_p) == 8, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, top_k) == 12, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, repeat_penalty) == 16, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, slot_id) == 20, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, prompt_cache_key) == 24, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, draft_min) == 32, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, draft_max) == 36, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, mtp_drafter_path) == 40, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, gbnf_grammar) == 48, "LP64 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, disable_thinking) == 56, "LP64 offset");
#elif defined(ELIZA_LAYOUT_ASSERT) && UINTPTR_MAX == 0xFFFFFFFFu
ELIZA_LAYOUT_ASSERT(sizeof(eliza_llm_stream_config_t) == 48, "eliza_llm_stream_config_t is 48 bytes with 32-bit pointers");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, max_tokens) == 0, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, temperature) == 4, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, top_p) == 8, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, top_k) == 12, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, repeat_penalty) == 16, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, slot_id) == 20, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, prompt_cache_key) == 24, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, draft_min) == 28, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, draft_max) == 32, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, mtp_drafter_path) == 36, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, gbnf_grammar) == 40, "ILP32 offset");
ELIZA_LAYOUT_ASSERT(offsetof(eliza_llm_stream_config_t, disable_thinking) == 44, "ILP32 offset");
#endif
#undef ELIZA_LAYOUT_ASSERT

/* Opens a generation stream on the context. NULL + *out_error on failure. */
ELIZA_API EliLlmStream * eliza_inference_llm_stream_open(EliInferenceContext * ctx,
                                                         const eliza_llm_stream_config_t * cfg,
                                                         char ** out_error);

/*
 * Appends n (>= 1) tokens to the stream's context and evaluates them. Ids must be in the
 * vocabulary and the stream's context must have room; otherwise ELIZA_ERR_INVALID_ARG and
 * the stream is unchanged. If the evaluation itself fails (or is cancelled) the context
 * is rolled back to the tokens it held before (the sampler and the held tokens are
 * unchanged) and a _prefill must come before the next _next. Resets the max_tokens
 * count.
 */
ELIZA_API int eliza_inference_llm_stream_prefill(EliLlmStream * stream, const int32_t * token_ids,
                                                 size_t n, char ** out_error);

/*
 * Generates the next step. Writes the step's token ids to tokens_out (tokens_cap >= 1) and
 * their count to *num_tokens_out, and the step's text, NUL-terminated, to text_out. Text
 * never ends inside a multi-byte UTF-8 character: incomplete bytes are held back and
 * written with the step that completes them (or the final step). text_cap must hold the
 * longest text one step can produce: the model's longest vocabulary piece + 3 held-back
 * bytes + NUL. A smaller text_cap is ELIZA_ERR_INVALID_ARG before anything is generated,
 * with the required size in the message.
 * drafter_*_out (may be NULL) receive the step's speculative stats, 0 without a drafter: with
 * one, a step may return 1 + accepted tokens (the text model's token, then the accepted
 * draft tokens), accepted <= drafted; a step drafts no more than tokens_cap - 1 tokens and
 * no more text than fits text_cap.
 * Returns 0 when more may follow, 1 on the final step (EOS — not written to tokens_out —,
 * max_tokens reached, or context full), < 0 on error; ELIZA_ERR_CANCELLED after _cancel.
 * A step that fails leaves the sampler (its repeat-penalty history) and the context as
 * they were before it.
 * Limitation (ABI 9): text_out is NUL-terminated and has no length, so a token that
 * renders to a NUL byte (the byte token <0x00>) yields text that reads as ending at that
 * byte: the step's text_out[0] is '\0' while the token is reported in tokens_out. A
 * consumer that must see such bytes detokenizes the step's tokens.
 */
ELIZA_API int eliza_inference_llm_stream_next(EliLlmStream * stream,
                                              int32_t * tokens_out, size_t tokens_cap, size_t * num_tokens_out,
                                              char * text_out, size_t text_cap,
                                              int32_t * drafter_drafted_out, int32_t * drafter_accepted_out,
                                              char ** out_error);

/*
 * Thread-safe. Aborts the step in flight (or the next one): it returns ELIZA_ERR_CANCELLED,
 * and so does every _prefill/_next until _reset, _reset_keep or _restore_slot. Returns
 * ELIZA_OK whether or not a step is running; ELIZA_ERR_INVALID_ARG for NULL.
 */
ELIZA_API int eliza_inference_llm_stream_cancel(EliLlmStream * stream);

/* Clears the context, the sampler and the cancel flag. ELIZA_OK, or ELIZA_ERR_INVALID_ARG for NULL
 * (ELIZA_ERR_FFI_FAULT on a stream an earlier llama.cpp/ggml fatal error left unusable). */
ELIZA_API int eliza_inference_llm_stream_reset(EliLlmStream * stream);

/*
 * Keeps the first n_keep tokens of the context and drops the rest, clears the sampler and
 * the cancel flag. Returns the number of tokens kept (n_keep clamped to [0, tokens held]);
 * falls back to a full reset and returns 0 where the prefix cannot be kept. Never an error
 * except ELIZA_ERR_INVALID_ARG for a NULL stream (and ELIZA_ERR_FFI_FAULT on a stream an
 * earlier llama.cpp/ggml fatal error left unusable).
 */
ELIZA_API int eliza_inference_llm_stream_reset_keep(EliLlmStream * stream, int32_t n_keep);

/* Writes the stream's state (context, last logits, sampler history, pending text) to
 * filename, atomically (a private temporary file, flushed, renamed into place). With a
 * drafter, only the text model's state: the drafter's cache is rebuilt after a restore.
 * ELIZA_ERR_CANCELLED on a cancelled stream. */
ELIZA_API int eliza_inference_llm_stream_save_slot(EliLlmStream * stream, const char * filename,
                                                   char ** out_error);

/*
 * Replaces the stream's state with one written by _save_slot on the same model (same file
 * content) and the same context size; greedy generation then continues exactly where the
 * saved stream stood, and the cancel flag is cleared. A missing or non-regular file (a
 * FIFO, a device), a file of another model or context size, or a corrupt or inconsistent
 * one is ELIZA_ERR_INVALID_ARG with a message naming what is wrong, and leaves the stream
 * exactly as it was before the call (its cancel flag included). Only if llama.cpp cannot
 * take back the stream's own cache after refusing the file's is the stream reset instead;
 * the message then says so.
 */
ELIZA_API int eliza_inference_llm_stream_restore_slot(EliLlmStream * stream, const char * filename,
                                                      char ** out_error);

/* Frees the stream. NULL-safe. */
ELIZA_API void eliza_inference_llm_stream_close(EliLlmStream * stream);

#ifdef __cplusplus
}
#endif

#endif /* ELIZA_INFERENCE_FFI_H */
