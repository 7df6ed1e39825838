// libelizainference-mlx: a llama-architecture forward pass with a KV cache on MLX, behind
// the plain C table of mlx_module.h. C++20 (MLX's headers need it); nothing of it leaks
// into the C++17 library, which only dlopen()s this module and calls the table.
//
// Numerics follow MLX-LM's llama model: RMSNorm, rope on the half-rotation layout
// (rope_traditional false: the converter un-permutes llama.cpp's Q/K rows), grouped-query
// attention through fast::scaled_dot_product_attention with the "causal" mask (aligned
// to the end of the cache, so a chunk after a prefix attends to the whole prefix), and a
// SwiGLU MLP, all in float32.
#include "mlx_module.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;

namespace {

// MLX evaluates a graph only on the thread that built it, and each stream is an OS thread
// that is never freed: one stream for the whole process, usable from any thread because
// every use of it holds this mutex (build and evaluate happen inside one locked call).
std::mutex & mlx_mutex() {
    static std::mutex m;
    return m;
}

mx::Stream & compute_stream() {
    // Metal where the host has it (a Mac), else the CPU. Never set_default_device: the
    // application owns MLX's defaults.
    static mx::Stream stream = mx::new_thread_unsafe_stream(
        mx::is_available(mx::Device(mx::Device::gpu)) ? mx::Device(mx::Device::gpu) : mx::Device(mx::Device::cpu));
    return stream;
}

void set_error(char * err, size_t cap, const std::string & message) {
    if (err == nullptr || cap == 0) return;
    const size_t n = std::min(cap - 1, message.size());
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
}

// --- config.json: a flat object of numbers, booleans, strings and nulls (nested values
// are skipped), which is all an MLX-LM llama config holds that the forward pass reads.
class FlatJson {
public:
    static std::optional<FlatJson> parse(const std::string & text, std::string & why) {
        FlatJson out;
        size_t i = 0;
        auto ws = [&] {
            while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        };
        auto string_at = [&](std::string & s) {
            if (text[i] != '"') return false;
            for (++i; i < text.size() && text[i] != '"'; ++i) {
                if (text[i] == '\\' && i + 1 < text.size()) ++i;
                s += text[i];
            }
            if (i >= text.size()) return false;
            ++i;
            return true;
        };
        ws();
        if (i >= text.size() || text[i] != '{') {
            why = "not a JSON object";
            return std::nullopt;
        }
        ++i;
        for (;;) {
            ws();
            if (i < text.size() && text[i] == '}') return out;
            std::string key;
            if (i >= text.size() || !string_at(key)) {
                why = "expected a quoted key";
                return std::nullopt;
            }
            ws();
            if (i >= text.size() || text[i] != ':') {
                why = "expected ':' after \"" + key + "\"";
                return std::nullopt;
            }
            ++i;
            ws();
            if (i >= text.size()) break;
            const char c = text[i];
            if (c == '"') {
                std::string value;
                if (!string_at(value)) break;
                out.strings_[key] = value;
            } else if (c == '{' || c == '[') {
                int depth = 0;
                bool in_string = false;
                for (; i < text.size(); ++i) {
                    const char d = text[i];
                    if (in_string) {
                        if (d == '\\') ++i;
                        else if (d == '"') in_string = false;
                    } else if (d == '"') {
                        in_string = true;
                    } else if (d == '{' || d == '[') {
                        ++depth;
                    } else if ((d == '}' || d == ']') && --depth == 0) {
                        ++i;
                        break;
                    }
                }
            } else {
                const size_t start = i;
                while (i < text.size() && text[i] != ',' && text[i] != '}' &&
                       !std::isspace(static_cast<unsigned char>(text[i]))) {
                    ++i;
                }
                const std::string token = text.substr(start, i - start);
                if (token == "true" || token == "false") {
                    out.numbers_[key] = token == "true" ? 1.0 : 0.0;
                } else if (token != "null") {
                    char * end = nullptr;
                    const double v = std::strtod(token.c_str(), &end);
                    if (end == token.c_str() || *end != '\0') {
                        why = "\"" + key + "\": '" + token + "' is not a number";
                        return std::nullopt;
                    }
                    out.numbers_[key] = v;
                }
            }
            ws();
            if (i < text.size() && text[i] == ',') {
                ++i;
                continue;
            }
            if (i < text.size() && text[i] == '}') return out;
            break;
        }
        why = "truncated or malformed JSON";
        return std::nullopt;
    }

    std::optional<double> number(const std::string & key) const {
        const auto it = numbers_.find(key);
        return it == numbers_.end() ? std::nullopt : std::optional<double>(it->second);
    }
    std::optional<std::string> string(const std::string & key) const {
        const auto it = strings_.find(key);
        return it == strings_.end() ? std::nullopt : std::optional<std::string>(it->second);
    }

private:
    std::map<std::string, double> numbers_;
    std::map<std::string, std::string> strings_;
};

struct Config {
    int hidden = 0, layers = 0, ff = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, ctx_train = 0;
    float eps = 1e-5f, rope_theta = 10000.0f;
    bool rope_traditional = false, tied = true;
};

bool read_config(const std::string & path, Config & c, std::string & why) {
    std::ifstream in(path);
    if (!in) {
        why = path + ": cannot be read";
        return false;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    std::string parse_error;
    const auto json = FlatJson::parse(buf.str(), parse_error);
    if (!json) {
        why = path + ": " + parse_error;
        return false;
    }
    const auto type = json->string("model_type");
    if (!type || *type != "llama") {
        why = path + ": model_type is '" + type.value_or("") + "'; this backend serves llama-architecture weights only";
        return false;
    }
    auto need = [&](const char * key, int & out) {
        const auto v = json->number(key);
        if (!v || *v <= 0 || *v != std::floor(*v)) {
            why = path + ": \"" + key + "\" must be a positive integer";
            return false;
        }
        out = static_cast<int>(*v);
        return true;
    };
    if (!need("hidden_size", c.hidden) || !need("num_hidden_layers", c.layers) ||
        !need("intermediate_size", c.ff) || !need("num_attention_heads", c.heads) ||
        !need("vocab_size", c.vocab)) {
        return false;
    }
    c.kv_heads = static_cast<int>(json->number("num_key_value_heads").value_or(c.heads));
    c.head_dim = static_cast<int>(json->number("head_dim").value_or(c.hidden / c.heads));
    c.ctx_train = static_cast<int>(json->number("max_position_embeddings").value_or(4096));
    c.eps = static_cast<float>(json->number("rms_norm_eps").value_or(1e-5));
    c.rope_theta = static_cast<float>(json->number("rope_theta").value_or(10000.0));
    c.rope_traditional = json->number("rope_traditional").value_or(0.0) != 0.0;
    c.tied = json->number("tie_word_embeddings").value_or(1.0) != 0.0;  // MLX-LM's default
    if (c.kv_heads <= 0 || c.heads % c.kv_heads != 0 || c.head_dim <= 0) {
        why = path + ": num_attention_heads " + std::to_string(c.heads) + " is not a multiple of num_key_value_heads " +
              std::to_string(c.kv_heads);
        return false;
    }
    return true;
}

struct Layer {
    mx::array attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

}  // namespace

struct EliMlxModel {
    Config config;
    mx::array embed = mx::array(0.0f);
    mx::array norm = mx::array(0.0f);
    mx::array lm_head_t = mx::array(0.0f);  // (hidden, vocab)
    std::vector<Layer> layers;
};

struct EliMlxSeq {
    EliMlxModel * model;
    std::vector<mx::array> keys, values;  // per layer (1, kv_heads, n_past, head_dim); empty before the first token
    int32_t n_past = 0;
};

namespace {

mx::array weight(const std::unordered_map<std::string, mx::array> & w, const std::string & name,
                 const std::vector<int> & shape, const std::string & file) {
    const auto it = w.find(name);
    if (it == w.end()) throw std::runtime_error(file + ": no tensor '" + name + "'");
    const mx::Shape want(shape.begin(), shape.end());
    if (it->second.shape() != want) {
        std::string got;
        for (auto d : it->second.shape()) got += (got.empty() ? "" : "x") + std::to_string(d);
        std::string expected;
        for (auto d : shape) expected += (expected.empty() ? "" : "x") + std::to_string(d);
        throw std::runtime_error(file + ": tensor '" + name + "' is " + got + ", config.json implies " + expected);
    }
    return mx::astype(it->second, mx::float32, compute_stream());
}

EliMlxModel * load_model(const std::string & dir) {
    auto model = std::make_unique<EliMlxModel>();
    std::string why;
    if (!read_config(dir + "/config.json", model->config, why)) throw std::runtime_error(why);
    const Config & c = model->config;
    const std::string file = dir + "/model.safetensors";
    auto loaded = mx::load_safetensors(file, compute_stream());
    auto & w = loaded.first;
    const int q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
    model->embed = weight(w, "model.embed_tokens.weight", {c.vocab, c.hidden}, file);
    model->norm = weight(w, "model.norm.weight", {c.hidden}, file);
    model->lm_head_t = mx::transpose(c.tied ? model->embed : weight(w, "lm_head.weight", {c.vocab, c.hidden}, file),
                                     compute_stream());
    std::vector<mx::array> all{model->embed, model->norm, model->lm_head_t};
    for (int i = 0; i < c.layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        auto t = [&](const std::string & name, std::vector<int> shape) {
            return mx::transpose(weight(w, p + name, std::move(shape), file), compute_stream());
        };
        Layer layer{
            weight(w, p + "input_layernorm.weight", {c.hidden}, file),
            t("self_attn.q_proj.weight", {q_rows, c.hidden}),
            t("self_attn.k_proj.weight", {kv_rows, c.hidden}),
            t("self_attn.v_proj.weight", {kv_rows, c.hidden}),
            t("self_attn.o_proj.weight", {c.hidden, q_rows}),
            weight(w, p + "post_attention_layernorm.weight", {c.hidden}, file),
            t("mlp.gate_proj.weight", {c.ff, c.hidden}),
            t("mlp.up_proj.weight", {c.ff, c.hidden}),
            t("mlp.down_proj.weight", {c.hidden, c.ff}),
        };
        for (const auto * a : {&layer.attn_norm, &layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.ffn_norm,
                               &layer.w_gate, &layer.w_up, &layer.w_down}) {
            all.push_back(*a);
        }
        model->layers.push_back(std::move(layer));
    }
    // Evaluated now, contiguous: a lazy weight would otherwise be read from the file again
    // inside every step's graph.
    for (auto & a : all) a = mx::contiguous(a, false, compute_stream());
    mx::eval(all);
    size_t k = 3;
    model->embed = all[0];
    model->norm = all[1];
    model->lm_head_t = all[2];
    for (auto & layer : model->layers) {
        for (auto * a : {&layer.attn_norm, &layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.ffn_norm,
                         &layer.w_gate, &layer.w_up, &layer.w_down}) {
            *a = all[k++];
        }
    }
    return model.release();
}

// Logits of the last of `n` tokens appended at seq->n_past; the cache grows by n.
void forward(EliMlxSeq & seq, const int32_t * tokens, size_t n, float * logits_out) {
    const EliMlxModel & m = *seq.model;
    const Config & c = m.config;
    const auto s = compute_stream();
    const int len = static_cast<int>(n);
    const mx::array ids(tokens, mx::Shape{len}, mx::int32);
    mx::array x = mx::reshape(mx::take(m.embed, ids, 0, s), {1, len, c.hidden}, s);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<mx::array> keys, values;
    for (size_t i = 0; i < m.layers.size(); ++i) {
        const Layer & l = m.layers[i];
        const mx::array h = mx::fast::rms_norm(x, l.attn_norm, c.eps, s);
        auto heads = [&](const mx::array & w, int n_heads) {
            return mx::transpose(mx::reshape(mx::matmul(h, w, s), {1, len, n_heads, c.head_dim}, s), {0, 2, 1, 3}, s);
        };
        mx::array q = mx::fast::rope(heads(l.wq, c.heads), c.head_dim, c.rope_traditional, c.rope_theta, 1.0f,
                                     seq.n_past, std::nullopt, s);
        mx::array k = mx::fast::rope(heads(l.wk, c.kv_heads), c.head_dim, c.rope_traditional, c.rope_theta, 1.0f,
                                     seq.n_past, std::nullopt, s);
        mx::array v = heads(l.wv, c.kv_heads);
        if (seq.n_past > 0) {
            k = mx::concatenate({seq.keys[i], k}, 2, s);
            v = mx::concatenate({seq.values[i], v}, 2, s);
        }
        const mx::array o = mx::fast::scaled_dot_product_attention(q, k, v, scale, len > 1 ? "causal" : "", {}, {},
                                                                   false, s);
        x = mx::add(x, mx::matmul(mx::reshape(mx::transpose(o, {0, 2, 1, 3}, s), {1, len, c.heads * c.head_dim}, s),
                                  l.wo, s),
                    s);
        const mx::array g = mx::fast::rms_norm(x, l.ffn_norm, c.eps, s);
        const mx::array gate = mx::matmul(g, l.w_gate, s);
        const mx::array act = mx::multiply(mx::multiply(gate, mx::sigmoid(gate, s), s), mx::matmul(g, l.w_up, s), s);
        x = mx::add(x, mx::matmul(act, l.w_down, s), s);
        keys.push_back(k);
        values.push_back(v);
    }
    const mx::array last = mx::slice(mx::fast::rms_norm(x, m.norm, c.eps, s), {0, len - 1, 0}, {1, len, c.hidden}, s);
    mx::array logits = mx::reshape(mx::matmul(last, m.lm_head_t, s), {c.vocab}, s);
    std::vector<mx::array> outputs{logits};
    outputs.insert(outputs.end(), keys.begin(), keys.end());
    outputs.insert(outputs.end(), values.begin(), values.end());
    mx::eval(outputs);  // everything of the step, so no lazy graph outlives this call
    std::memcpy(logits_out, logits.data<float>(), sizeof(float) * static_cast<size_t>(c.vocab));
    seq.keys = std::move(keys);
    seq.values = std::move(values);
    seq.n_past += len;
}

std::string g_version;

const char * runtime_version() {
    std::lock_guard<std::mutex> lock(mlx_mutex());
    if (g_version.empty()) {
        try {
            g_version = std::string("mlx ") + mx::version() + " (" +
                        (compute_stream().device == mx::Device(mx::Device::gpu) ? "metal" : "cpu") + ")";
        } catch (const std::exception & e) {
            g_version = std::string("mlx (unusable: ") + e.what() + ")";
        }
    }
    return g_version.c_str();
}

EliMlxModel * api_load(const char * weights_dir, char * err, size_t cap) {
    if (weights_dir == nullptr) {
        set_error(err, cap, "weights_dir is NULL");
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(mlx_mutex());
    try {
        return load_model(weights_dir);
    } catch (const std::exception & e) {
        set_error(err, cap, std::string("MLX could not load '") + weights_dir + "': " + e.what());
    } catch (...) {
        set_error(err, cap, std::string("MLX could not load '") + weights_dir + "': unknown error");
    }
    return nullptr;
}

void api_free_model(EliMlxModel * model) {
    std::lock_guard<std::mutex> lock(mlx_mutex());
    delete model;
}

int32_t api_n_vocab(const EliMlxModel * model) { return model ? model->config.vocab : 0; }
int32_t api_n_ctx_train(const EliMlxModel * model) { return model ? model->config.ctx_train : 0; }

EliMlxSeq * api_new_seq(EliMlxModel * model, char * err, size_t cap) {
    if (model == nullptr) {
        set_error(err, cap, "model is NULL");
        return nullptr;
    }
    return new (std::nothrow) EliMlxSeq{model, {}, {}, 0};
}

void api_free_seq(EliMlxSeq * seq) {
    std::lock_guard<std::mutex> lock(mlx_mutex());
    delete seq;
}

int32_t api_n_past(const EliMlxSeq * seq) { return seq ? seq->n_past : 0; }

int api_forward(EliMlxSeq * seq, const int32_t * tokens, size_t n, float * logits_out, char * err, size_t cap) {
    if (seq == nullptr || tokens == nullptr || n == 0 || logits_out == nullptr) {
        set_error(err, cap, "forward: NULL sequence, tokens or logits buffer, or no tokens");
        return -1;
    }
    for (size_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= seq->model->config.vocab) {
            set_error(err, cap, "forward: token " + std::to_string(tokens[i]) + " is outside the vocabulary");
            return -1;
        }
    }
    std::lock_guard<std::mutex> lock(mlx_mutex());
    try {
        forward(*seq, tokens, n, logits_out);  // assigns the cache only once everything evaluated
        return 0;
    } catch (const std::exception & e) {
        set_error(err, cap, std::string("MLX forward pass failed: ") + e.what());
    } catch (...) {
        set_error(err, cap, "MLX forward pass failed: unknown error");
    }
    return -1;
}

int api_truncate(EliMlxSeq * seq, int32_t n_keep) {
    if (seq == nullptr || n_keep < 0 || n_keep > seq->n_past) return -1;
    std::lock_guard<std::mutex> lock(mlx_mutex());
    try {
        if (n_keep == 0) {
            seq->keys.clear();
            seq->values.clear();
        } else if (n_keep < seq->n_past) {
            const auto s = compute_stream();
            for (auto * cache : {&seq->keys, &seq->values}) {
                for (auto & a : *cache) {
                    auto stop = a.shape();
                    stop[2] = n_keep;
                    a = mx::slice(a, {0, 0, 0, 0}, stop, s);
                    a = mx::contiguous(a, false, s);
                }
                mx::eval(*cache);
            }
        }
        seq->n_past = n_keep;
        return 0;
    } catch (...) {
        return -1;
    }
}

const EliMlxModuleApi kApi = {
    ELIZA_MLX_MODULE_ABI, runtime_version, api_load,    api_free_model, api_n_vocab, api_n_ctx_train,
    api_new_seq,          api_free_seq,    api_n_past, api_forward,    api_truncate,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const EliMlxModuleApi * eliza_mlx_module_v1(void) { return &kApi; }
