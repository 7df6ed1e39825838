// What every alternate runtime's body does the same way around its runtime: finding the
// folder its runtime is loaded from, the stream's default context, the slot file's bytes
// (fields, the atomic write, the checks before a read), and the refusal of an artifact that
// is not what its converter wrote from this bundle's GGUF. Written once here, so a fix to
// one of them holds for every runtime (backends/mlx.cpp, backends/litert.cpp).
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/conversion_record.h"
#include "sha256.h"
#include "status.h"

namespace eliza::backends {

// The folder this library was loaded from: a runtime's module or engine is looked for
// beside it, the way ggml loads its backends. "" when the loader cannot say.
inline std::string library_directory() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void *>(&library_directory), &info) == 0 || info.dli_fname == nullptr) {
        return "";
    }
    return std::filesystem::path(info.dli_fname).parent_path().string();
}

// The llama.cpp path's rule for a stream's context: ELIZA_N_CTX when set, else the model's
// training context, at most 4096.
constexpr uint32_t kMaxDefaultCtx = 4096;
inline uint32_t stream_context_size(long n_ctx_setting, int32_t n_ctx_train) {
    if (n_ctx_setting > 0) return static_cast<uint32_t>(n_ctx_setting);
    return n_ctx_train > 0 ? std::min<uint32_t>(static_cast<uint32_t>(n_ctx_train), kMaxDefaultCtx) : kMaxDefaultCtx;
}

// --- slot files: little-endian fields, a magic first and an XXH64 seal last -------------

template <typename T> void put(std::string & out, T v) { out.append(reinterpret_cast<const char *>(&v), sizeof v); }
template <typename T> T get(const std::string & in, size_t & at) {
    T v;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
}

// Whether a stream may save a slot now, in the llama.cpp path's words.
inline int check_slot_save(const char * filename, bool cancelled, char ** out_error) {
    if (filename == nullptr || filename[0] == '\0') {
        return fail(out_error, ELIZA_ERR_INVALID_ARG, "slot filename is NULL or empty");
    }
    if (cancelled) {
        return fail(out_error, ELIZA_ERR_CANCELLED, "stream was cancelled; its state is not worth saving (reset it first)");
    }
    return ELIZA_OK;
}

// Written beside the target and renamed: a crash never leaves half a slot file.
inline int write_slot_file(const char * filename, const std::string & bytes, char ** out_error) {
    if (filename == nullptr || filename[0] == '\0') {
        return fail(out_error, ELIZA_ERR_INVALID_ARG, "slot filename is NULL or empty");
    }
    const std::string tmp = std::string(filename) + ".tmp-" + std::to_string(::getpid());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        f.flush();
        if (!f) {
            std::remove(tmp.c_str());
            return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string("cannot write slot file '") + filename + "'");
        }
    }
    if (std::rename(tmp.c_str(), filename) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(tmp.c_str());
        return fail(out_error, ELIZA_ERR_INVALID_ARG, std::string("cannot write slot file '") + filename + "': " + why);
    }
    return ELIZA_OK;
}

// The bytes of a slot file of this runtime (`magic`, at least `min_bytes` long, the seal
// included), or the llama.cpp path's refusal. `what`: "an MLX slot file". `name` gets
// "slot file '<filename>'" for the caller's later messages.
inline int read_slot_file(const char * filename, const char (&magic)[8], size_t min_bytes, const char * what,
                          std::string & data, std::string & name, char ** out_error) {
    if (filename == nullptr || filename[0] == '\0') {
        return fail(out_error, ELIZA_ERR_INVALID_ARG, "slot filename is NULL or empty");
    }
    name = std::string("slot file '") + filename + "'";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(filename, ec)) {  // never block on a FIFO, never read a directory
        return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " is missing or not a regular file");
    }
    data = read_text_file(filename);
    if (data.size() < min_bytes || std::memcmp(data.data(), magic, sizeof magic) != 0) {
        return fail(out_error, ELIZA_ERR_INVALID_ARG, name + " is missing, truncated or not " + what);
    }
    return ELIZA_OK;
}

// --- the converted artifact -------------------------------------------------------------

// How a converter's record and its repair are worded for one runtime's artifact.
struct ArtifactRecord {
    std::string artifact;     // "'<bundle>/text/mlx'": what the messages name
    std::string record_path;  // the converter's record beside it
    std::string record_what;  // "conversion record", "writer's record"
    std::string made;         // "converted", "written": how the converter made it
    std::string maker;        // "its conversion", "its writer": who wrote its files
    std::string repair;       // "; convert it again: eliza mlx-weights <gguf>"
    // (recorded key, file): the files whose sha256 the record holds
    std::vector<std::pair<std::string, std::string>> files;
};

// True when the record says the artifact was made from exactly this GGUF and every
// recorded file is still what the converter wrote; else one line naming what differs and
// the repair. last_sha256: the sha256 of the last file checked, as verified.
inline bool artifact_matches_gguf(const ArtifactRecord & a, const std::string & gguf, std::string & last_sha256,
                                  std::string & message) {
    const std::string record = read_text_file(a.record_path);
    const std::string source = recorded(record, "source_sha256");
    if (source.empty()) {
        message = a.artifact + " has no " + a.record_what + " (" +
                  std::filesystem::path(a.record_path).filename().string() + " with source_sha256)" + a.repair;
        return false;
    }
    const std::string actual = eliza::sha256_file(gguf);
    if (actual != source) {
        message = a.artifact + " was " + a.made + " from a GGUF with sha256 " + source.substr(0, 12) + ", not from " +
                  std::filesystem::path(gguf).filename().string() + " (" + actual.substr(0, 12) + ")" + a.repair;
        return false;
    }
    for (const auto & [key, file] : a.files) {
        const std::string want = recorded(record, key);
        const std::string have = eliza::sha256_file(file);
        if (want.empty() || have != want) {
            message = "'" + file + "' is not the file " + a.maker + " wrote (sha256 " +
                      (have.empty() ? std::string("unreadable") : have.substr(0, 12)) + ", recorded " +
                      (want.empty() ? std::string("none") : want.substr(0, 12)) + ")" + a.repair;
            return false;
        }
        last_sha256 = have;
    }
    return true;
}

}  // namespace eliza::backends
