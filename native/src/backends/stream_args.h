// The argument checks of a stream on an alternate runtime, in the llama.cpp path's words: a
// backend answers a bad prefill or next() call exactly as llama.cpp does, whatever serves it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "eliza-inference-ffi.h"
#include "status.h"

namespace eliza::backends {

// A prefill of n ids after `held` tokens: ids given, in the vocabulary, within the context.
inline int check_prefill(const int32_t * ids, size_t n, int32_t n_vocab, size_t held, uint32_t n_ctx,
                         char ** out_error) {
    if (n == 0) return fail(out_error, ELIZA_ERR_INVALID_ARG, "empty prefill: pass at least one token");
    if (ids == nullptr) return fail(out_error, ELIZA_ERR_INVALID_ARG, "token_ids is NULL");
    for (size_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            return fail(out_error, ELIZA_ERR_INVALID_ARG,
                        "token_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                            " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
    }
    if (n > n_ctx || held > n_ctx - n) {
        return fail(out_error, ELIZA_ERR_INVALID_ARG,
                    "prefill of " + std::to_string(n) + " tokens after " + std::to_string(held) +
                        " exceeds the context size " + std::to_string(n_ctx) + " (override with ELIZA_N_CTX)");
    }
    return ELIZA_OK;
}

// next()'s outputs: given, room for one token and for one step's text (a piece of at most
// max_piece_bytes, up to 3 bytes of a held-back character, the NUL).
inline int check_next(const int32_t * tokens_out, size_t tokens_cap, const size_t * n_out, const char * text_out,
                      size_t text_cap, size_t max_piece_bytes, char ** out_error) {
    if (tokens_out == nullptr || n_out == nullptr || text_out == nullptr) {
        return fail(out_error, ELIZA_ERR_INVALID_ARG, "tokens_out, num_tokens_out and text_out must be non-NULL");
    }
    if (tokens_cap == 0) return fail(out_error, ELIZA_ERR_INVALID_ARG, "tokens_cap is 0: pass room for at least one token");
    const size_t needed = max_piece_bytes + 3 + 1;
    if (text_cap < needed) {
        return fail(out_error, ELIZA_ERR_INVALID_ARG,
                    "text_cap " + std::to_string(text_cap) + " is too small: one step needs up to " +
                        std::to_string(needed) + " bytes");
    }
    return ELIZA_OK;
}

}  // namespace eliza::backends
