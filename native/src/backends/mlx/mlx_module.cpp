// libelizainference-mlx: a forward pass with a KV cache on MLX, behind the plain C table of
// mlx_module.h. C++20 (MLX's headers need it); nothing of it leaks into the C++17 library,
// which only dlopen()s this module and calls the table.
//
// This file is the table and the dispatch by config.json's model_type; common.h holds what
// the architectures share, and each architecture is one file (llama.cpp, gemma3.cpp).
#include "mlx_module.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "common.h"

namespace mx = mlx::core;
using eliza_mlx::compute_stream;
using eliza_mlx::mlx_mutex;

struct EliMlxModel {
    std::unique_ptr<eliza_mlx::Model> model;
};

struct EliMlxSeq {
    EliMlxModel * model;
    eliza_mlx::KvCache cache;
};

namespace {

// config.json's model_type -> its architecture.
struct Architecture {
    const char * model_type;
    eliza_mlx::ModelLoader load;
};
constexpr Architecture kArchitectures[] = {
    {"llama", eliza_mlx::load_llama},
    {"gemma3_text", eliza_mlx::load_gemma3},
};

void set_error(char * err, size_t cap, const std::string & message) {
    if (err == nullptr || cap == 0) return;
    const size_t n = std::min(cap - 1, message.size());
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
}

EliMlxModel * load_model(const std::string & dir) {
    const eliza_mlx::ConfigFile config(dir);
    const std::string type = config.model_type();
    std::string served;
    for (const auto & arch : kArchitectures) {
        if (type == arch.model_type) {
            eliza_mlx::Tensors tensors(dir);
            return new EliMlxModel{arch.load(config, tensors)};
        }
        served += std::string(served.empty() ? "'" : ", '") + arch.model_type + "'";
    }
    throw std::runtime_error(config.path() + ": model_type is '" + type + "'; this backend serves " + served +
                             " weights only");
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

int32_t api_n_vocab(const EliMlxModel * model) { return model ? model->model->n_vocab() : 0; }
int32_t api_n_ctx_train(const EliMlxModel * model) { return model ? model->model->n_ctx_train() : 0; }

EliMlxSeq * api_new_seq(EliMlxModel * model, char * err, size_t cap) {
    if (model == nullptr) {
        set_error(err, cap, "model is NULL");
        return nullptr;
    }
    return new (std::nothrow) EliMlxSeq{model, {}};
}

void api_free_seq(EliMlxSeq * seq) {
    std::lock_guard<std::mutex> lock(mlx_mutex());
    delete seq;
}

int32_t api_n_past(const EliMlxSeq * seq) { return seq ? seq->cache.n_past : 0; }

int api_forward(EliMlxSeq * seq, const int32_t * tokens, size_t n, float * logits_out, char * err, size_t cap) {
    if (seq == nullptr || tokens == nullptr || n == 0 || logits_out == nullptr) {
        set_error(err, cap, "forward: NULL sequence, tokens or logits buffer, or no tokens");
        return -1;
    }
    for (size_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= seq->model->model->n_vocab()) {
            set_error(err, cap, "forward: token " + std::to_string(tokens[i]) + " is outside the vocabulary");
            return -1;
        }
    }
    std::lock_guard<std::mutex> lock(mlx_mutex());
    try {
        eliza_mlx::run_step(*seq->model->model, seq->cache, tokens, static_cast<int>(n), logits_out);
        return 0;
    } catch (const std::exception & e) {
        set_error(err, cap, std::string("MLX forward pass failed: ") + e.what());
    } catch (...) {
        set_error(err, cap, "MLX forward pass failed: unknown error");
    }
    return -1;
}

int api_truncate(EliMlxSeq * seq, int32_t n_keep) {
    if (seq == nullptr || n_keep < 0 || n_keep > seq->cache.n_past) return -1;
    std::lock_guard<std::mutex> lock(mlx_mutex());
    try {
        eliza_mlx::truncate(seq->cache, n_keep);
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
