// What every architecture of the MLX module shares: the one stream and its mutex,
// config.json and model.safetensors as an architecture reads them, the KV cache, attention
// (causal, optionally within a sliding window) and the step that evaluates and commits.
// An architecture is one file (llama.cpp, gemma3.cpp) defining a Model and its loader,
// listed in kArchitectures (mlx_module.cpp) under its config.json model_type.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlx/mlx.h"

namespace eliza_mlx {

namespace mx = mlx::core;

// MLX evaluates a graph only on the thread that built it, and each stream is an OS thread
// that is never freed: one stream for the whole process, usable from any thread because
// every use of it holds this mutex (build and evaluate happen inside one locked call).
std::mutex & mlx_mutex();
mx::Stream compute_stream();

// config.json: a flat object of numbers, booleans, strings and nulls (nested values are
// skipped), which is all an MLX-LM config holds that a forward pass here reads.
class FlatJson {
public:
    static std::optional<FlatJson> parse(const std::string & text, std::string & why);
    std::optional<double> number(const std::string & key) const;
    std::optional<std::string> string(const std::string & key) const;

private:
    std::map<std::string, double> numbers_;
    std::map<std::string, std::string> strings_;
};

// <dir>/config.json, its errors naming the file and the key (std::runtime_error).
class ConfigFile {
public:
    explicit ConfigFile(const std::string & dir);
    const std::string & path() const { return path_; }
    std::string model_type() const { return json_.string("model_type").value_or(""); }
    int positive_int(const char * key) const;
    int positive_int_or(const char * key, int fallback) const;
    double number_or(const char * key, double fallback) const;
    bool flag_or(const char * key, bool fallback) const;

private:
    std::string path_;
    FlatJson json_;
};

// Rows of an input from which a quantized weight on the CPU is dequantized and multiplied
// in float32 (Linear::apply): below it, dequantizing costs more than the faster product saves.
constexpr int kDequantizedRows = 32;

// A linear layer's weight as the converter wrote it: MLX affine groups (the GGUF's own
// blocks: `<module>.weight` packed in uint32, `.scales`, `.biases`), multiplied with
// quantized_matmul as stored, or dense float32, kept as (in_features, out_features).
class Linear {
public:
    Linear() = default;
    static Linear dense(mx::array w_t) { return Linear(std::move(w_t)); }
    static Linear quantized(mx::array w, mx::array scales, mx::array biases, int group_size, int bits) {
        return Linear(std::move(w), std::move(scales), std::move(biases), group_size, bits);
    }
    mx::array apply(const mx::array & x, mx::Stream s) const;  // x (..., in) -> (..., out)
    bool is_quantized() const { return bits_ > 0; }
    // Rows `ids` of the (out, in) weight as float32 (out = vocabulary for an embedding).
    mx::array rows(const mx::array & ids, mx::Stream s) const;
    std::vector<mx::array *> arrays() { return {&w_, &scales_, &biases_}; }

private:
    explicit Linear(mx::array w_t) : w_(std::move(w_t)) {}
    Linear(mx::array w, mx::array scales, mx::array biases, int group_size, int bits)
        : w_(std::move(w)), scales_(std::move(scales)), biases_(std::move(biases)), group_size_(group_size),
          bits_(bits) {}
    mx::array w_ = mx::array(0.0f);  // dense: (in, out); quantized: (out, in * bits / 32) uint32
    mx::array scales_ = mx::array(0.0f), biases_ = mx::array(0.0f);  // (out, in / group_size)
    int group_size_ = 0, bits_ = 0;
};

// <dir>/model.safetensors, each tensor checked against the shape config.json implies and
// handed over once: the loaded copy is dropped as soon as the model holds its own.
class Tensors {
public:
    explicit Tensors(const std::string & dir);
    // float32, as stored: a linear weight is (out_features, in_features).
    mx::array take(const std::string & name, const std::vector<int> & shape);
    // `module`'s weight (`<module>.weight`, with `.scales` and `.biases` when quantized; its
    // bits and group size follow from the shapes). A dense weight is copied once, at load,
    // to (in_features, out_features), contiguous: MLX's CPU matmul reads a transposed view
    // half as fast (Gemma 3 270M's output projection: 140 ms against 275 ms per token).
    Linear linear(const std::string & module, int out_features, int in_features);
    bool has(const std::string & name) const { return tensors_.count(name) != 0; }
    const std::string & file() const { return file_; }

private:
    mx::array take_as_stored(const std::string & name, const std::vector<int> & shape);
    std::string file_;
    std::unordered_map<std::string, mx::array> tensors_;
};

// Evaluates the weights as contiguous arrays: a lazy one would otherwise be read from the
// file again inside every step's graph. Called per layer, so the loaded copies are freed
// as the model's are made and the peak stays near one copy of the weights.
void materialize(const std::vector<mx::array *> & weights);
// A layer's vectors and the arrays of its linear weights, for materialize.
std::vector<mx::array *> weights_of(std::initializer_list<mx::array *> vectors, std::initializer_list<Linear *> linears);

// The token embedding and the output projection. Tied, they are one (vocab, hidden) weight
// (quantized: one table for the rows' gather and the projection; dense: kept as the
// (hidden, vocab) projection, whose columns are the embeddings), held once.
class EmbeddingAndHead {
public:
    EmbeddingAndHead(Tensors & w, int vocab, int hidden, bool tied);
    mx::array embed(const int32_t * tokens, int len, mx::Stream s) const;  // (1, len, hidden)
    mx::array logits(const mx::array & x, mx::Stream s) const;            // x (..., hidden) -> (..., vocab)

private:
    int hidden_;
    bool tied_;
    Linear embed_;  // untied: (vocab, hidden)
    Linear head_;   // the output projection; tied: also the embedding
};

// Grouped-query attention of q (1, heads, len, head_dim) at positions n_past.. over k, v
// (1, kv_heads, n_past + len, head_dim), causal; window > 0: a query at p sees only keys
// at p - window < k <= p (llama.cpp's rule: masked when p - k >= window).
mx::array attention(const mx::array & q, const mx::array & k, const mx::array & v, float scale, int n_past,
                    int window, mx::Stream s);

struct KvCache {
    std::vector<mx::array> keys, values;  // per layer (1, kv_heads, n_past, head_dim); empty before the first token
    int32_t n_past = 0;
};

// One forward step as a lazy graph: the last position's logits (n_vocab) and each layer's
// whole keys and values (the cache and the step's).
struct Step {
    mx::array logits = mx::array(0.0f);
    std::vector<mx::array> keys, values;
};

class Model {
public:
    virtual ~Model() = default;
    virtual int32_t n_vocab() const = 0;
    virtual int32_t n_ctx_train() const = 0;
    // The graph of `len` tokens appended at cache.n_past; cache is read, never changed.
    virtual Step forward(const KvCache & cache, const int32_t * tokens, int len) const = 0;
};

using ModelLoader = std::unique_ptr<Model> (*)(const ConfigFile & config, Tensors & tensors);
std::unique_ptr<Model> load_llama(const ConfigFile & config, Tensors & tensors);
std::unique_ptr<Model> load_gemma3(const ConfigFile & config, Tensors & tensors);

// Evaluates the step, copies its logits out and only then replaces the cache, so a failed
// evaluation leaves the sequence as it was.
void run_step(const Model & model, KvCache & cache, const int32_t * tokens, int len, float * logits_out);

// Keeps the first n_keep positions of every layer's cache.
void truncate(KvCache & cache, int32_t n_keep);

}  // namespace eliza_mlx
