// The Gemma 3 architecture (config.json model_type "gemma3_text", the converter's
// eliza/formats/mlx_weights/gemma3.py), as llama.cpp's gemma3 graph computes it:
//
// - the embedding scaled by sqrt(hidden_size) in float (MLX-LM rounds the factor to
//   bfloat16 first; llama.cpp does not, and the MLX path must agree with llama.cpp);
// - RMSNorms with weight 1 + w (config.json's weights are stored without Gemma's 1),
//   per head on Q and K before rope, and after attention and after the MLP too;
// - rope on halves (non-traditional), base rope_local_base_freq on the sliding layers and
//   rope_theta on the global ones (every sliding_window_pattern-th);
// - the sliding layers attend within sliding_window (masked when q_pos - k_pos >= window),
//   the global ones causally over the whole cache; scale query_pre_attn_scalar^-0.5;
// - a GELU(tanh)-gated MLP; logits from the tied embedding unless lm_head.weight exists.
//
// The cache keeps every position of every layer, so truncating to any n_keep stays exact.
#include <cmath>
#include <stdexcept>

#include "common.h"

namespace eliza_mlx {

namespace {

struct Gemma3Config {
    int hidden = 0, layers = 0, ff = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, ctx_train = 0;
    int window = 0, pattern = 1;
    float eps = 1e-6f, rope_global = 1000000.0f, rope_local = 10000.0f, attn_scale = 1.0f;
    bool tied = true;

    bool sliding(int layer) const { return window > 0 && (layer + 1) % pattern != 0; }
};

struct Gemma3Layer {
    mx::array attn_norm;
    Linear wq, wk, wv;
    mx::array q_norm, k_norm;
    Linear wo;
    mx::array post_attn_norm, ffn_norm;
    Linear w_gate, w_up, w_down;
    mx::array post_ffn_norm;
};

mx::array gelu_tanh(const mx::array & x, mx::Stream s) {
    const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
    const mx::array cube = mx::multiply(mx::multiply(x, x, s), x, s);
    const mx::array inner = mx::multiply(mx::array(c), mx::add(x, mx::multiply(mx::array(0.044715f), cube, s), s), s);
    return mx::multiply(mx::multiply(mx::array(0.5f), x, s), mx::add(mx::array(1.0f), mx::tanh(inner, s), s), s);
}

class Gemma3 final : public Model {
public:
    Gemma3(const ConfigFile & file, Tensors & w) {
        Gemma3Config & c = c_;
        c.hidden = file.positive_int("hidden_size");
        c.layers = file.positive_int("num_hidden_layers");
        c.ff = file.positive_int("intermediate_size");
        c.heads = file.positive_int("num_attention_heads");
        c.vocab = file.positive_int("vocab_size");
        c.kv_heads = file.positive_int_or("num_key_value_heads", 1);  // MLX-LM's defaults
        c.head_dim = file.positive_int_or("head_dim", 256);
        c.ctx_train = file.positive_int_or("max_position_embeddings", 32768);
        c.pattern = file.positive_int_or("sliding_window_pattern", 6);
        const double window = file.number_or("sliding_window", 512);
        if (window < 0 || window != std::floor(window)) {
            throw std::runtime_error(file.path() + ": \"sliding_window\" must be a non-negative integer");
        }
        c.window = static_cast<int>(window);
        c.eps = static_cast<float>(file.number_or("rms_norm_eps", 1e-6));
        c.rope_global = static_cast<float>(file.number_or("rope_theta", 1000000.0));
        c.rope_local = static_cast<float>(file.number_or("rope_local_base_freq", 10000.0));
        const double scalar = file.number_or("query_pre_attn_scalar", c.head_dim);
        if (!(scalar > 0)) throw std::runtime_error(file.path() + ": \"query_pre_attn_scalar\" must be positive");
        c.attn_scale = static_cast<float>(1.0 / std::sqrt(scalar));
        // gemma3_text ties exactly when the weights hold no lm_head; an explicit key must agree.
        c.tied = file.flag_or("tie_word_embeddings", !w.has("lm_head.weight"));
        if (c.heads % c.kv_heads != 0) {
            throw std::runtime_error(file.path() + ": num_attention_heads " + std::to_string(c.heads) +
                                     " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
        }
        if (file.number_or("final_logit_softcapping", 0.0) != 0.0 ||
            file.number_or("attn_logit_softcapping", 0.0) != 0.0) {
            throw std::runtime_error(file.path() +
                                     ": logit softcapping is set; Gemma 3 has none and this backend computes none");
        }
        const int q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
        const auto s = compute_stream();
        auto norm = [&](const std::string & name, int n) { return mx::add(w.take(name, {n}), mx::array(1.0f), s); };
        io_ = std::make_unique<EmbeddingAndHead>(w, c.vocab, c.hidden, c.tied);
        norm_ = norm("model.norm.weight", c.hidden);
        materialize({&norm_});
        layers_.reserve(c.layers);
        for (int i = 0; i < c.layers; ++i) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            Gemma3Layer l{
                norm(p + "input_layernorm.weight", c.hidden),
                w.linear(p + "self_attn.q_proj", q_rows, c.hidden),
                w.linear(p + "self_attn.k_proj", kv_rows, c.hidden),
                w.linear(p + "self_attn.v_proj", kv_rows, c.hidden),
                norm(p + "self_attn.q_norm.weight", c.head_dim),
                norm(p + "self_attn.k_norm.weight", c.head_dim),
                w.linear(p + "self_attn.o_proj", c.hidden, q_rows),
                norm(p + "post_attention_layernorm.weight", c.hidden),
                norm(p + "pre_feedforward_layernorm.weight", c.hidden),
                w.linear(p + "mlp.gate_proj", c.ff, c.hidden),
                w.linear(p + "mlp.up_proj", c.ff, c.hidden),
                w.linear(p + "mlp.down_proj", c.hidden, c.ff),
                norm(p + "post_feedforward_layernorm.weight", c.hidden),
            };
            materialize(weights_of({&l.attn_norm, &l.q_norm, &l.k_norm, &l.post_attn_norm, &l.ffn_norm, &l.post_ffn_norm},
                                   {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}));
            layers_.push_back(std::move(l));
        }
    }

    int32_t n_vocab() const override { return c_.vocab; }
    int32_t n_ctx_train() const override { return c_.ctx_train; }

    Step forward(const KvCache & cache, const int32_t * tokens, int len) const override {
        const Gemma3Config & c = c_;
        const auto s = compute_stream();
        mx::array x = io_->embed(tokens, len, s);
        x = mx::multiply(x, mx::array(std::sqrt(static_cast<float>(c.hidden))), s);
        Step step;
        for (int i = 0; i < c.layers; ++i) {
            const Gemma3Layer & l = layers_[static_cast<size_t>(i)];
            const bool sliding = c.sliding(i);
            const float base = sliding ? c.rope_local : c.rope_global;
            const mx::array h = mx::fast::rms_norm(x, l.attn_norm, c.eps, s);
            // (1, heads, len, head_dim), per-head normed (when a norm is given) and roped.
            auto heads = [&](const Linear & w, int n_heads, const mx::array * head_norm) {
                mx::array t = mx::reshape(w.apply(h, s), {1, len, n_heads, c.head_dim}, s);
                if (head_norm != nullptr) t = mx::fast::rms_norm(t, *head_norm, c.eps, s);
                t = mx::transpose(t, {0, 2, 1, 3}, s);
                if (head_norm == nullptr) return t;
                return mx::fast::rope(t, c.head_dim, false, base, 1.0f, cache.n_past, std::nullopt, s);
            };
            const mx::array q = heads(l.wq, c.heads, &l.q_norm);
            mx::array k = heads(l.wk, c.kv_heads, &l.k_norm);
            mx::array v = heads(l.wv, c.kv_heads, nullptr);
            if (cache.n_past > 0) {
                k = mx::concatenate({cache.keys[static_cast<size_t>(i)], k}, 2, s);
                v = mx::concatenate({cache.values[static_cast<size_t>(i)], v}, 2, s);
            }
            const mx::array o = attention(q, k, v, c.attn_scale, cache.n_past, sliding ? c.window : 0, s);
            const mx::array attn =
                l.wo.apply(mx::reshape(mx::transpose(o, {0, 2, 1, 3}, s), {1, len, c.heads * c.head_dim}, s), s);
            x = mx::add(x, mx::fast::rms_norm(attn, l.post_attn_norm, c.eps, s), s);
            const mx::array g = mx::fast::rms_norm(x, l.ffn_norm, c.eps, s);
            const mx::array act = mx::multiply(gelu_tanh(l.w_gate.apply(g, s), s), l.w_up.apply(g, s), s);
            x = mx::add(x, mx::fast::rms_norm(l.w_down.apply(act, s), l.post_ffn_norm, c.eps, s), s);
            step.keys.push_back(k);
            step.values.push_back(v);
        }
        const mx::array last =
            mx::slice(mx::fast::rms_norm(x, norm_, c.eps, s), {0, len - 1, 0}, {1, len, c.hidden}, s);
        step.logits = mx::reshape(io_->logits(last, s), {c.vocab}, s);
        return step;
    }

private:
    Gemma3Config c_;
    std::unique_ptr<EmbeddingAndHead> io_;
    mx::array norm_ = mx::array(0.0f);
    std::vector<Gemma3Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> load_gemma3(const ConfigFile & config, Tensors & tensors) {
    return std::make_unique<Gemma3>(config, tensors);
}

}  // namespace eliza_mlx
