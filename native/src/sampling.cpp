#include "sampling.h"

#include <algorithm>

namespace eliza {

Sampler make_sampler_chain(const eliza_llm_stream_config_t & cfg, int32_t n_vocab, std::string & message) {
    llama_sampler_chain_params sparams = llama_sampler_chain_default_params();
    sparams.no_perf = true;
    Sampler chain(llama_sampler_chain_init(sparams));
    if (!chain) {
        message = "cannot create the sampler chain";
        return nullptr;
    }
    llama_sampler * c = chain.get();
    if (cfg.repeat_penalty > 0.0f && cfg.repeat_penalty != 1.0f) {
        llama_sampler_chain_add(c, llama_sampler_init_penalties(n_vocab, kPenaltyLastN, cfg.repeat_penalty, 0.0f, 0.0f));
    }
    if (cfg.temperature <= 0.0f) {
        llama_sampler_chain_add(c, llama_sampler_init_greedy());
        return chain;
    }
    if (cfg.top_k > 0) {
        llama_sampler_chain_add(c, llama_sampler_init_top_k(cfg.top_k));
    }
    if (cfg.top_p > 0.0f && cfg.top_p < 1.0f) {
        llama_sampler_chain_add(c, llama_sampler_init_top_p(cfg.top_p, 1));
    }
    llama_sampler_chain_add(c, llama_sampler_init_temp(cfg.temperature));
    // Seeded from slot_id so sampled streams are reproducible too.
    const uint32_t seed = cfg.slot_id >= 0 ? static_cast<uint32_t>(cfg.slot_id) : 0u;
    llama_sampler_chain_add(c, llama_sampler_init_dist(seed));
    return chain;
}

size_t utf8_sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 0;
}

std::string take_complete_utf8(std::string & pending, const std::string & piece, bool flush) {
    std::string text = pending + piece;
    pending.clear();
    if (flush) {
        return text;
    }
    // Hold back a tail that starts a multi-byte character and is still incomplete.
    const size_t look = std::min<size_t>(3, text.size());
    for (size_t back = 1; back <= look; ++back) {
        const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte: keep looking for the lead
        }
        const size_t want = utf8_sequence_length(c);
        if (want > back) {
            pending = text.substr(text.size() - back);
            text.resize(text.size() - back);
        }
        break;
    }
    return text;
}

bool valid_pending(const std::string & pending) {
    if (pending.empty()) return true;
    const size_t want = utf8_sequence_length(static_cast<unsigned char>(pending[0]));
    if (want <= pending.size()) return false;
    for (size_t i = 1; i < pending.size(); ++i) {
        if ((static_cast<unsigned char>(pending[i]) & 0xC0) != 0x80) return false;
    }
    return true;
}

}  // namespace eliza
