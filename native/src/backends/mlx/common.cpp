#include "common.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace eliza_mlx {

std::mutex & mlx_mutex() {
    static std::mutex m;
    return m;
}

mx::Stream compute_stream() {
    // Metal where the host has it (a Mac), else the CPU. Never set_default_device: the
    // application owns MLX's defaults.
    static mx::Stream stream = mx::new_thread_unsafe_stream(
        mx::is_available(mx::Device(mx::Device::gpu)) ? mx::Device(mx::Device::gpu) : mx::Device(mx::Device::cpu));
    return stream;
}

std::optional<FlatJson> FlatJson::parse(const std::string & text, std::string & why) {
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

std::optional<double> FlatJson::number(const std::string & key) const {
    const auto it = numbers_.find(key);
    return it == numbers_.end() ? std::nullopt : std::optional<double>(it->second);
}

std::optional<std::string> FlatJson::string(const std::string & key) const {
    const auto it = strings_.find(key);
    return it == strings_.end() ? std::nullopt : std::optional<std::string>(it->second);
}

ConfigFile::ConfigFile(const std::string & dir) : path_(dir + "/config.json") {
    std::ifstream in(path_);
    if (!in) throw std::runtime_error(path_ + ": cannot be read");
    std::stringstream buf;
    buf << in.rdbuf();
    std::string why;
    auto json = FlatJson::parse(buf.str(), why);
    if (!json) throw std::runtime_error(path_ + ": " + why);
    json_ = std::move(*json);
}

int ConfigFile::positive_int(const char * key) const {
    const auto v = json_.number(key);
    if (!v || *v <= 0 || *v != std::floor(*v) || *v > 1e9) {
        throw std::runtime_error(path_ + ": \"" + key + "\" must be a positive integer");
    }
    return static_cast<int>(*v);
}

int ConfigFile::positive_int_or(const char * key, int fallback) const {
    return json_.number(key) ? positive_int(key) : fallback;
}

double ConfigFile::number_or(const char * key, double fallback) const { return json_.number(key).value_or(fallback); }

bool ConfigFile::flag_or(const char * key, bool fallback) const {
    const auto v = json_.number(key);
    return v ? *v != 0.0 : fallback;
}

Tensors::Tensors(const std::string & dir) : file_(dir + "/model.safetensors") {
    tensors_ = mx::load_safetensors(file_, compute_stream()).first;
}

namespace {

std::string dims(const mx::Shape & of) {
    std::string out;
    for (auto d : of) {
        if (!out.empty()) out += 'x';
        out += std::to_string(d);
    }
    return out;
}

}  // namespace

mx::array Tensors::take_as_stored(const std::string & name, const std::vector<int> & shape) {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(file_ + ": no tensor '" + name + "'");
    const mx::Shape want(shape.begin(), shape.end());
    if (it->second.shape() != want) {
        throw std::runtime_error(file_ + ": tensor '" + name + "' is " + dims(it->second.shape()) +
                                 ", config.json implies " + dims(want));
    }
    mx::array out = it->second;
    tensors_.erase(it);
    return out;
}

mx::array Tensors::take(const std::string & name, const std::vector<int> & shape) {
    return mx::astype(take_as_stored(name, shape), mx::float32, compute_stream());
}

Linear Tensors::linear(const std::string & module, int out_features, int in_features) {
    const auto s = compute_stream();
    const std::string weight = module + ".weight";
    if (!has(module + ".scales")) {
        return Linear::dense(mx::transpose(take(weight, {out_features, in_features}), s));
    }
    const auto w = tensors_.find(weight);
    const auto scales = tensors_.find(module + ".scales");
    if (w == tensors_.end() || !has(module + ".biases")) {
        throw std::runtime_error(file_ + ": '" + module + ".scales' without its '.weight' and '.biases'");
    }
    // The widths follow from the shapes: (out, in * bits / 32) words, (out, in / group) scales.
    const int words = w->second.ndim() == 2 ? w->second.shape(1) : 0;
    const int groups = scales->second.ndim() == 2 ? scales->second.shape(1) : 0;
    const int bits = in_features > 0 && (words * 32) % in_features == 0 ? words * 32 / in_features : 0;
    const int group_size = groups > 0 && in_features % groups == 0 ? in_features / groups : 0;
    const bool bits_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
    const bool group_ok = group_size == 32 || group_size == 64 || group_size == 128;
    if (w->second.dtype() != mx::uint32 || !bits_ok || !group_ok) {
        throw std::runtime_error(file_ + ": '" + weight + "' (" + dims(w->second.shape()) + ") and its scales (" +
                                 dims(scales->second.shape()) + ") are not MLX affine groups of a " +
                                 std::to_string(out_features) + "x" + std::to_string(in_features) +
                                 " weight (uint32 words of 2-8 bits, groups of 32, 64 or 128)");
    }
    mx::array packed = take_as_stored(weight, {out_features, words});
    mx::array sc = take(module + ".scales", {out_features, groups});
    mx::array bi = take(module + ".biases", {out_features, groups});
    return Linear::quantized(std::move(packed), std::move(sc), std::move(bi), group_size, bits);
}

mx::array Linear::apply(const mx::array & x, mx::Stream s) const {
    if (!is_quantized()) return mx::matmul(x, w_, s);
    const int in = x.ndim() > 0 ? x.shape(-1) : 0;
    const int rows = in > 0 ? static_cast<int>(x.size()) / in : 0;
    if (s.device == mx::Device(mx::Device::cpu) && rows >= kDequantizedRows) {
        // MLX's CPU build multiplies quantized groups with scalar code, about 3 GFLOP/s
        // whatever the rows, while a float32 product goes to its BLAS at about 7: a prefill
        // chunk of many rows dequantizes the weight once, transposed to (in, out) and
        // contiguous as a dense weight is kept, and multiplies at twice the rate (Gemma 3
        // 270M's 64-row chunks). A decode step or a short prompt keeps the quantized kernel.
        const mx::array w = mx::dequantize(w_, scales_, biases_, group_size_, bits_, "affine", std::nullopt,
                                           mx::float32, s);
        return mx::matmul(x, mx::contiguous(mx::transpose(w, s), false, s), s);
    }
    return mx::quantized_matmul(x, w_, scales_, biases_, true, group_size_, bits_, "affine", s);
}

mx::array Linear::rows(const mx::array & ids, mx::Stream s) const {
    if (!is_quantized()) return mx::transpose(mx::take(w_, ids, 1, s), s);  // columns of (in, out)
    return mx::dequantize(mx::take(w_, ids, 0, s), mx::take(scales_, ids, 0, s), mx::take(biases_, ids, 0, s),
                          group_size_, bits_, "affine", std::nullopt, mx::float32, s);
}

void materialize(const std::vector<mx::array *> & weights) {
    std::vector<mx::array> all;
    all.reserve(weights.size());
    for (auto * w : weights) all.push_back(mx::contiguous(*w, false, compute_stream()));
    mx::eval(all);
    for (size_t i = 0; i < weights.size(); ++i) *weights[i] = all[i];
}

std::vector<mx::array *> weights_of(std::initializer_list<mx::array *> vectors,
                                    std::initializer_list<Linear *> linears) {
    std::vector<mx::array *> all(vectors);
    for (auto * linear : linears) {
        for (auto * a : linear->arrays()) all.push_back(a);
    }
    return all;
}

EmbeddingAndHead::EmbeddingAndHead(Tensors & w, int vocab, int hidden, bool tied) : hidden_(hidden), tied_(tied) {
    head_ = w.linear(tied ? "model.embed_tokens" : "lm_head", vocab, hidden);
    materialize(head_.arrays());
    if (!tied) {
        embed_ = w.linear("model.embed_tokens", vocab, hidden);
        materialize(embed_.arrays());
    }
}

mx::array EmbeddingAndHead::embed(const int32_t * tokens, int len, mx::Stream s) const {
    const mx::array ids(tokens, mx::Shape{len}, mx::int32);
    return mx::reshape((tied_ ? head_ : embed_).rows(ids, s), {1, len, hidden_}, s);
}

mx::array EmbeddingAndHead::logits(const mx::array & x, mx::Stream s) const { return head_.apply(x, s); }

mx::array attention(const mx::array & q, const mx::array & k, const mx::array & v, float scale, int n_past,
                    int window, mx::Stream s) {
    const int len = q.shape(2);
    const int total = k.shape(2);
    // Only when the last query would see more than `window` keys does the window drop any.
    if (window <= 0 || total <= window) {
        // "causal" aligns to the end of the cache: a chunk after a prefix sees all of it.
        return mx::fast::scaled_dot_product_attention(q, k, v, scale, len > 1 ? "causal" : "", {}, {}, false, s);
    }
    // Keys before the first query's window are seen by no query of the chunk.
    const int start = std::max(0, n_past - window + 1);
    auto from_start = [&](const mx::array & a) {
        auto stop = a.shape();
        return mx::slice(a, {0, 0, start, 0}, stop, s);
    };
    const mx::array ks = from_start(k), vs = from_start(v);
    if (len == 1) {  // the one query sees exactly the last `window` keys
        return mx::fast::scaled_dot_product_attention(q, ks, vs, scale, "", {}, {}, false, s);
    }
    const mx::array q_pos = mx::reshape(mx::arange(n_past, n_past + len, s), {len, 1}, s);
    const mx::array k_pos = mx::reshape(mx::arange(start, total, s), {1, total - start}, s);
    const mx::array seen = mx::logical_and(mx::less_equal(k_pos, q_pos, s),
                                           mx::less(mx::subtract(q_pos, k_pos, s), mx::array(window), s), s);
    return mx::fast::scaled_dot_product_attention(q, ks, vs, scale, "array", seen, {}, false, s);
}

void run_step(const Model & model, KvCache & cache, const int32_t * tokens, int len, float * logits_out) {
    Step step = model.forward(cache, tokens, len);
    std::vector<mx::array> outputs{step.logits};
    outputs.insert(outputs.end(), step.keys.begin(), step.keys.end());
    outputs.insert(outputs.end(), step.values.begin(), step.values.end());
    mx::eval(outputs);  // everything of the step, so no lazy graph outlives this call
    std::memcpy(logits_out, step.logits.data<float>(), sizeof(float) * static_cast<size_t>(model.n_vocab()));
    cache.keys = std::move(step.keys);
    cache.values = std::move(step.values);
    cache.n_past += len;
}

void truncate(KvCache & cache, int32_t n_keep) {
    if (n_keep == 0) {
        cache.keys.clear();
        cache.values.clear();
    } else if (n_keep < cache.n_past) {
        const auto s = compute_stream();
        for (auto * layers : {&cache.keys, &cache.values}) {
            for (auto & a : *layers) {
                auto stop = a.shape();
                stop[2] = n_keep;
                a = mx::contiguous(mx::slice(a, {0, 0, 0, 0}, stop, s), false, s);
            }
            mx::eval(*layers);
        }
    }
    cache.n_past = n_keep;
}

}  // namespace eliza_mlx
