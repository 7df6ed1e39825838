// The llama architecture (config.json model_type "llama"), as MLX-LM's llama model computes
// it: RMSNorm, rope on the half-rotation layout (rope_traditional false: the converter
// un-permutes llama.cpp's Q/K rows), causal grouped-query attention and a SwiGLU MLP, all
// in float32.
#include <cmath>
#include <stdexcept>

#include "common.h"

namespace eliza_mlx {

namespace {

struct LlamaConfig {
    int hidden = 0, layers = 0, ff = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, ctx_train = 0;
    float eps = 1e-5f, rope_theta = 10000.0f;
    bool rope_traditional = false, tied = true;
};

struct LlamaLayer {
    mx::array attn_norm;
    Linear wq, wk, wv, wo;
    mx::array ffn_norm;
    Linear w_gate, w_up, w_down;
};

class Llama final : public Model {
public:
    Llama(const ConfigFile & file, Tensors & w) {
        LlamaConfig & c = c_;
        c.hidden = file.positive_int("hidden_size");
        c.layers = file.positive_int("num_hidden_layers");
        c.ff = file.positive_int("intermediate_size");
        c.heads = file.positive_int("num_attention_heads");
        c.vocab = file.positive_int("vocab_size");
        c.kv_heads = file.positive_int_or("num_key_value_heads", c.heads);
        c.head_dim = file.positive_int_or("head_dim", c.hidden / c.heads);
        c.ctx_train = file.positive_int_or("max_position_embeddings", 4096);
        c.eps = static_cast<float>(file.number_or("rms_norm_eps", 1e-5));
        c.rope_theta = static_cast<float>(file.number_or("rope_theta", 10000.0));
        c.rope_traditional = file.flag_or("rope_traditional", false);
        c.tied = file.flag_or("tie_word_embeddings", true);  // MLX-LM's default
        if (c.heads % c.kv_heads != 0) {
            throw std::runtime_error(file.path() + ": num_attention_heads " + std::to_string(c.heads) +
                                     " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
        }
        const int q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
        io_ = std::make_unique<EmbeddingAndHead>(w, c.vocab, c.hidden, c.tied);
        norm_ = w.take("model.norm.weight", {c.hidden});
        materialize({&norm_});
        layers_.reserve(c.layers);
        for (int i = 0; i < c.layers; ++i) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            LlamaLayer l{
                w.take(p + "input_layernorm.weight", {c.hidden}),
                w.linear(p + "self_attn.q_proj", q_rows, c.hidden),
                w.linear(p + "self_attn.k_proj", kv_rows, c.hidden),
                w.linear(p + "self_attn.v_proj", kv_rows, c.hidden),
                w.linear(p + "self_attn.o_proj", c.hidden, q_rows),
                w.take(p + "post_attention_layernorm.weight", {c.hidden}),
                w.linear(p + "mlp.gate_proj", c.ff, c.hidden),
                w.linear(p + "mlp.up_proj", c.ff, c.hidden),
                w.linear(p + "mlp.down_proj", c.hidden, c.ff),
            };
            materialize(weights_of({&l.attn_norm, &l.ffn_norm}, {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}));
            layers_.push_back(std::move(l));
        }
    }

    int32_t n_vocab() const override { return c_.vocab; }
    int32_t n_ctx_train() const override { return c_.ctx_train; }

    Step forward(const KvCache & cache, const int32_t * tokens, int len) const override {
        const LlamaConfig & c = c_;
        const auto s = compute_stream();
        mx::array x = io_->embed(tokens, len, s);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
        Step step;
        for (size_t i = 0; i < layers_.size(); ++i) {
            const LlamaLayer & l = layers_[i];
            const mx::array h = mx::fast::rms_norm(x, l.attn_norm, c.eps, s);
            auto heads = [&](const Linear & w, int n_heads) {
                const mx::array t = mx::reshape(w.apply(h, s), {1, len, n_heads, c.head_dim}, s);
                return mx::transpose(t, {0, 2, 1, 3}, s);
            };
            const mx::array q = mx::fast::rope(heads(l.wq, c.heads), c.head_dim, c.rope_traditional, c.rope_theta,
                                               1.0f, cache.n_past, std::nullopt, s);
            mx::array k = mx::fast::rope(heads(l.wk, c.kv_heads), c.head_dim, c.rope_traditional, c.rope_theta, 1.0f,
                                         cache.n_past, std::nullopt, s);
            mx::array v = heads(l.wv, c.kv_heads);
            if (cache.n_past > 0) {
                k = mx::concatenate({cache.keys[i], k}, 2, s);
                v = mx::concatenate({cache.values[i], v}, 2, s);
            }
            const mx::array o = attention(q, k, v, scale, cache.n_past, 0, s);
            x = mx::add(x, l.wo.apply(mx::reshape(mx::transpose(o, {0, 2, 1, 3}, s), {1, len, c.heads * c.head_dim}, s), s),
                        s);
            const mx::array g = mx::fast::rms_norm(x, l.ffn_norm, c.eps, s);
            const mx::array gate = l.w_gate.apply(g, s);
            const mx::array silu = mx::multiply(gate, mx::sigmoid(gate, s), s);
            const mx::array act = mx::multiply(silu, l.w_up.apply(g, s), s);
            x = mx::add(x, l.w_down.apply(act, s), s);
            step.keys.push_back(k);
            step.values.push_back(v);
        }
        const mx::array last =
            mx::slice(mx::fast::rms_norm(x, norm_, c.eps, s), {0, len - 1, 0}, {1, len, c.hidden}, s);
        step.logits = mx::reshape(io_->logits(last, s), {c.vocab}, s);
        return step;
    }

private:
    LlamaConfig c_;
    std::unique_ptr<EmbeddingAndHead> io_;
    mx::array norm_ = mx::array(0.0f);
    std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> load_llama(const ConfigFile & config, Tensors & tensors) {
    return std::make_unique<Llama>(config, tensors);
}

}  // namespace eliza_mlx
