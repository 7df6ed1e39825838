// What every runtime behind the FFI shares about turning logits into a stream's output:
// the sampler chain built from a stream config, and UTF-8-safe text. The llama.cpp path
// and the alternate backends use these same functions, so a backend that produces the same
// logits produces the same tokens and the same text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "eliza-inference-ffi.h"
#include "llama.h"

namespace eliza {

struct SamplerDeleter {
    void operator()(llama_sampler * s) const { llama_sampler_free(s); }
};
using Sampler = std::unique_ptr<llama_sampler, SamplerDeleter>;

constexpr int32_t kPenaltyLastN = 64;  // the repeat-penalty window, and the accepted tokens a slot keeps

// The chain for a config: repeat penalty, then greedy (temperature <= 0) or top-k, top-p,
// temperature and a distribution seeded from slot_id. nullptr + message on failure.
Sampler make_sampler_chain(const eliza_llm_stream_config_t & cfg, int32_t n_vocab, std::string & message);

// The number of bytes a UTF-8 sequence starting with `lead` has (0: not a lead byte).
size_t utf8_sequence_length(unsigned char lead);

// pending + piece, minus an incomplete multi-byte character at its end, which is kept in
// `pending` for the next step (flush: everything is returned).
std::string take_complete_utf8(std::string & pending, const std::string & piece, bool flush);

// Whether `pending` is what take_complete_utf8 can leave behind: the start of one UTF-8
// character that is still incomplete (slot files are checked with it).
bool valid_pending(const std::string & pending);

}  // namespace eliza
