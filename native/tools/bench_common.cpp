#include "bench_common.h"

#include "sha256.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__APPLE__)
#include <mach/mach.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace bench {

bool read_prompts(const std::string & path, std::vector<std::string> & out, std::string & error) {
    std::ifstream f(path);
    if (!f) {
        error = "cannot open prompt file '" + path + "'";
        return false;
    }
    std::string line;
    while (std::getline(f, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line[0] == '#') continue;
        std::string prompt;
        for (size_t i = 0; i < line.size(); ++i) {
            if (line[i] == '\\' && i + 1 < line.size()) {
                const char c = line[++i];
                prompt += c == 'n' ? '\n' : c == 't' ? '\t' : c;
            } else {
                prompt += line[i];
            }
        }
        out.push_back(prompt);
    }
    if (out.empty()) {
        error = "prompt file '" + path + "' holds no prompts";
        return false;
    }
    return true;
}

std::string json_string(const std::string & s) {
    std::string out = "\"";
    char buf[8];
    for (size_t i = 0; i < s.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else if (c < 0x80) {
            out += static_cast<char>(c);
        } else {
            // Copy a valid UTF-8 sequence; escape a stray byte so the JSON stays valid.
            size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
            bool ok = len > 0 && i + len <= s.size();
            for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
            if (ok) {
                out.append(s, i, len);
                i += len - 1;
            } else {
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            }
        }
    }
    return out + "\"";
}

std::string hex(const std::string & bytes) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return "";
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string one_line(std::string json) {
    for (char & c : json) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    return json;
}


std::string sha256_file(const std::string & path) { return eliza::sha256_file(path); }

// Not getrusage(RUSAGE_SELF).ru_maxrss on Linux: the kernel carries that figure over
// through fork and exec, so a tool started by a 190 MB orchestrator reports at least
// 190 MB. VmHWM is the high-water mark of this program image's own address space, which
// exec starts afresh.
PeakRss peak_rss() {
#if defined(__linux__)  // Android included
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmHWM:", 0) == 0) {
            try {
                return {std::stol(line.substr(6)), "proc-status-vmhwm"};  // "VmHWM:   36748 kB"
            } catch (const std::exception &) {
                break;
            }
        }
    }
    return {0, "unavailable"};
#elif defined(__APPLE__)
    mach_task_basic_info_data_t info{};
    mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
    if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO, reinterpret_cast<task_info_t>(&info), &count) !=
        KERN_SUCCESS) {
        return {0, "unavailable"};
    }
    return {static_cast<long>(info.resident_size_max / 1024), "mach-task-resident-size-max"};
#else
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    return {usage.ru_maxrss, "getrusage-maxrss"};
#endif
}

long peak_rss_kb() { return peak_rss().kb; }

void drop_file_cache(const std::string & path) {
#if defined(__linux__)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // the loader reports a missing file in its own words
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
#else
    (void) path;
#endif
}

double now_ms() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0;
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Parsed parse_options(int argc, char ** argv, const char * tool, bool needs_library, Options & opt) {
    auto print_usage = [&](FILE * to) {
        std::fprintf(to,
                     "usage: %s --bundle DIR --prompts FILE [--out FILE|-]%s [--cell ID]\n"
                     "       [--max-tokens N] [--repeats N] [--temperature T] [--top-k K] [--top-p P]\n"
                     "       [--repeat-penalty R] [--seed S]%s\n",
                     tool, needs_library ? " --library PATH [--library-sha256 HEX]" : "",
                     needs_library ? " [--streams N,N,...]\n       [--drafter GGUF] [--draft-min N] [--draft-max N]"
                                   : " [--logits-out FILE]");
    };
    auto usage = [&](const std::string & why) {
        std::fprintf(stderr, "%s: %s\n", tool, why.c_str());
        print_usage(stderr);
        return Parsed::error;
    };
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            print_usage(stdout);
            std::printf("defaults: --out - (stdout), --cell \"\", --max-tokens %d, --repeats %d, --temperature %g "
                        "(greedy), --top-k %d, --top-p %g, --repeat-penalty %g, --seed %d%s\n",
                        opt.max_tokens, opt.repeats, opt.temperature, opt.top_k, opt.top_p, opt.repeat_penalty,
                        opt.seed,
                        needs_library ? ", --drafter none, --draft-min 0, --draft-max 0 (the library's default)" : "");
            return Parsed::help;
        }
        if (i + 1 >= argc) return usage("missing value for " + flag);
        const std::string value = argv[++i];
        try {
            if (flag == "--bundle") opt.bundle = value;
            else if (flag == "--prompts") opt.prompts = value;
            else if (flag == "--out") opt.out = value;
            else if (flag == "--library") opt.library = value;
            else if (flag == "--library-sha256" && needs_library) {
                if (value.size() != 64 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
                    return usage("--library-sha256 takes 64 lowercase hex digits, not '" + value + "'");
                opt.library_sha256 = value;
            }
            else if (flag == "--cell") opt.cell = value;
            else if (flag == "--max-tokens") opt.max_tokens = std::stoi(value);
            else if (flag == "--repeats") opt.repeats = std::stoi(value);
            else if (flag == "--temperature") opt.temperature = std::stof(value);
            else if (flag == "--top-k") opt.top_k = std::stoi(value);
            else if (flag == "--top-p") opt.top_p = std::stof(value);
            else if (flag == "--repeat-penalty") opt.repeat_penalty = std::stof(value);
            else if (flag == "--seed") opt.seed = std::stoi(value);
            else if (flag == "--drafter" && needs_library) opt.drafter = value;
            else if (flag == "--logits-out" && !needs_library) opt.logits_out = value;
            else if (flag == "--draft-min" && needs_library) opt.draft_min = std::stoi(value);
            else if (flag == "--draft-max" && needs_library) opt.draft_max = std::stoi(value);
            else if (flag == "--streams" && needs_library) {
                opt.streams.clear();
                for (size_t at = 0; at <= value.size();) {
                    const size_t comma = std::min(value.find(',', at), value.size());
                    const int n = std::stoi(value.substr(at, comma - at));
                    if (n < 1 || n > 64) throw std::out_of_range("streams");
                    opt.streams.push_back(n);
                    at = comma + 1;
                }
            }
            else return usage("unknown option " + flag);
        } catch (const std::exception &) {
            return usage("bad value '" + value + "' for " + flag);
        }
    }
    if (opt.bundle.empty() || opt.prompts.empty()) return usage("--bundle and --prompts are required");
    if (needs_library && opt.library.empty()) return usage("--library is required");
    if (opt.repeats < 1 || opt.max_tokens < 1) return usage("--repeats and --max-tokens must be >= 1");
    if (opt.out.empty()) opt.out = "-";
    return Parsed::ok;
}

void add_repeat(PromptRun & run, bool first, Repeat r) {
    run.prefill_ms.push_back(r.t_prefill - r.t0);
    run.first_token_ms.push_back(r.t_first - r.t0);
    // Tokens after the first step over the time after it.
    const size_t later = r.tokens.size() > r.first_step_tokens ? r.tokens.size() - r.first_step_tokens : 0;
    run.decode_tok_s.push_back(later > 0 && r.t_end > r.t_first ? later * 1000.0 / (r.t_end - r.t_first) : 0.0);
    std::vector<double> per_token;  // each step's time since the previous one, over its tokens
    double since = r.t_first;
    for (const auto & [at, n] : r.steps) {
        if (n == 0) continue;  // a step that gave no token: its time goes to the next one's
        per_token.push_back((at - since) / static_cast<double>(n));
        since = at;
    }
    if (!per_token.empty()) run.decode_step_ms.push_back(percentile(std::move(per_token), 0.5));
    if (first) {
        run.logit_margins = std::move(r.logit_margins);
        run.token_text_ends = std::move(r.token_text_ends);
        run.tokens = std::move(r.tokens);
        run.text = std::move(r.text);
        run.drafter = std::move(r.drafter);
        run.final_status = r.status;
    } else if (r.tokens != run.tokens || r.text != run.text) {
        run.repeats_identical = false;
    }
}

void write_header(FILE * f, const char * tool, const Options & opt, const std::string & identity_json) {
    std::fprintf(f,
                 "{\"type\": \"header\", \"format\": \"eliza-bench/1\", \"tool\": %s, \"cell\": %s, "
                 "\"bundle\": %s, \"prompts_file\": %s, \"max_tokens\": %d, \"repeats\": %d, "
                 "\"sampling\": {\"temperature\": %g, \"top_k\": %d, \"top_p\": %g, \"repeat_penalty\": %g, "
                 "\"seed\": %d}, \"drafter\": %s, \"draft_min\": %d, \"draft_max\": %d, \"peak_rss_source\": %s, "
                 "\"build\": %s}\n",
                 json_string(tool).c_str(), json_string(opt.cell).c_str(), json_string(opt.bundle).c_str(),
                 json_string(opt.prompts).c_str(), opt.max_tokens, opt.repeats, opt.temperature, opt.top_k,
                 opt.top_p, opt.repeat_penalty, opt.seed,
                 opt.drafter.empty() ? "null" : json_string(opt.drafter).c_str(), opt.draft_min, opt.draft_max,
                 json_string(peak_rss().source).c_str(), identity_json.c_str());
}

namespace {

std::string numbers(const std::vector<double> & v) {
    std::string out = "[";
    char buf[32];
    for (size_t i = 0; i < v.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", v[i]);
        out += buf;
    }
    return out + "]";
}

std::string ints(const std::vector<int32_t> & v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
}

}  // namespace

void write_prompt(FILE * f, size_t index, const std::string & prompt, const PromptRun & run) {
    std::string drafter = "[";
    for (size_t i = 0; i < run.drafter.size(); ++i) {
        drafter += (i ? ", [" : "[") + std::to_string(run.drafter[i].first) + ", " +
                   std::to_string(run.drafter[i].second) + "]";
    }
    drafter += "]";
    std::fprintf(f,
                 "{\"type\": \"prompt\", \"index\": %zu, \"prompt\": %s, \"prompt_tokens\": %s, \"tokens\": %s, "
                 "\"text_hex\": \"%s\", \"final_status\": %d, \"repeats_identical\": %s, \"drafter\": %s, "
                 "\"prefill_ms\": %s, \"first_token_ms\": %s, \"decode_tok_s\": %s, \"decode_step_ms\": %s, "
                 "\"peak_rss_kb\": %ld%s%s}\n",
                 index, json_string(prompt).c_str(), ints(run.prompt_tokens).c_str(), ints(run.tokens).c_str(),
                 hex(run.text).c_str(), run.final_status, run.repeats_identical ? "true" : "false", drafter.c_str(),
                 numbers(run.prefill_ms).c_str(), numbers(run.first_token_ms).c_str(),
                 numbers(run.decode_tok_s).c_str(), numbers(run.decode_step_ms).c_str(), peak_rss_kb(),
                 run.logit_margins.empty() ? "" : (", \"logit_margins\": " + numbers(run.logit_margins)).c_str(),
                 run.token_text_ends.empty() ? "" : (", \"token_text_ends\": " + ints(run.token_text_ends)).c_str());
}

}  // namespace bench
