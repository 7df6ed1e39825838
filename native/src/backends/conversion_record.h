// What a gate's converter records beside the artifact it wrote from the bundle's GGUF (MLX:
// text/mlx/eliza-conversion.json; LiteRT-LM: text/<name>.litertlm.json): a backend refuses
// an artifact that was not converted from this GGUF, or whose bytes are no longer the ones
// the converter wrote, because it would load and compute something else without a word.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace eliza::backends {

inline std::string read_text_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "";
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

// The string value of `"key": "..."` in a converter's record (its keys are unique: the
// records are flat where they are read); "" when absent.
inline std::string recorded(const std::string & record, const std::string & key) {
    const std::string quoted = "\"" + key + "\"";
    const size_t at = record.find(quoted);
    if (at == std::string::npos) return "";
    const size_t colon = record.find(':', at + quoted.size());
    const size_t open = colon == std::string::npos ? colon : record.find('"', colon);
    const size_t close = open == std::string::npos ? open : record.find('"', open + 1);
    return close == std::string::npos ? "" : record.substr(open + 1, close - open - 1);
}

// The non-negative integer value of `"key": 123` in a converter's record; 0 when absent or
// not such a number.
inline size_t recorded_count(const std::string & record, const std::string & key) {
    const std::string quoted = "\"" + key + "\"";
    const size_t at = record.find(quoted);
    if (at == std::string::npos) return 0;
    size_t i = record.find(':', at + quoted.size());
    if (i == std::string::npos) return 0;
    for (++i; i < record.size() && (record[i] == ' ' || record[i] == '\n'); ++i) {
    }
    size_t value = 0;
    bool digits = false;
    for (; i < record.size() && record[i] >= '0' && record[i] <= '9' && value < (size_t{1} << 40); ++i) {
        value = value * 10 + static_cast<size_t>(record[i] - '0');
        digits = true;
    }
    return digits ? value : 0;
}

}  // namespace eliza::backends
