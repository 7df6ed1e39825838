// case_runner: the selector and gate fall-through cases, run as a target binary.
//
// A library built for another architecture cannot be loaded by the host's Python, and an
// Android or iOS device has no pytest; this small executable runs where the library runs
// (natively, under an emulator such as qemu-aarch64, or pushed to a device) and reads the
// same case tables the host's Python suites read:
//
//   case_runner selector --kit <libelizainference_testkit> --cases <native/cases/selector.cases>
//       the selector's resolution table against the compiled selector of the cell's test
//       kit, with fake factories (no model, no device)
//   case_runner fallthrough --library <libelizainference> --plan <file> --prompts <file> --max-tokens N
//       the gate fall-through cases of native/cases/gate-fallthrough.cases, expanded for one
//       cell by eliza (eliza.formats.case_tables) into a plan of concrete bundles and
//       expectations, through the shipped library
//
// Output, one line each: "ok <case>", "FAIL <case>: <why>", "output <case> <prompt#> <ids> |
// <hex text>" (greedy output, compared across cells by eliza), then "summary <ran> <passed>".
// Exit status: 0 when every case passed, 1 when one failed, 2 on bad usage or input, 3 when
// the library (or test kit) reports another ABI version than the header it was built with:
// refused with one line on stderr before anything else of it is looked up or called.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "abi_loader.h"
#include "eliza-inference-ffi.h"

namespace {

std::string trim(const std::string & s) {
    const char * ws = " \t\r\n";
    const size_t a = s.find_first_not_of(ws);
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

std::vector<std::string> split(const std::string & s, const std::string & sep) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t at = s.find(sep); at != std::string::npos; at = s.find(sep, start)) {
        out.push_back(s.substr(start, at - start));
        start = at + sep.size();
    }
    out.push_back(s.substr(start));
    return out;
}

// The lines of a file that are neither blank nor comments.
bool read_lines(const std::string & path, std::vector<std::string> & lines) {
    std::ifstream in(path);
    if (!in) {
        std::fprintf(stderr, "case_runner: cannot read %s\n", path.c_str());
        return false;
    }
    for (std::string line; std::getline(in, line);) {
        const std::string t = trim(line);
        if (!t.empty() && t[0] != '#') lines.push_back(line);
    }
    return true;
}

// An env field: "-" (unset, *set = false) or a double-quoted string with \t \n \\ \" escapes.
bool parse_env(const std::string & field, bool * set, std::string * value) {
    const std::string f = trim(field);
    *set = false;
    value->clear();
    if (f == "-") return true;
    if (f.size() < 2 || f.front() != '"' || f.back() != '"') return false;
    for (size_t i = 1; i + 1 < f.size(); ++i) {
        char c = f[i];
        if (c == '\\' && i + 2 < f.size()) {
            const char e = f[++i];
            c = e == 't' ? '\t' : e == 'n' ? '\n' : e;
        }
        value->push_back(c);
    }
    *set = true;
    return true;
}

constexpr const char * TOOL = "case_runner";
using abi_loader::Api;
using abi_loader::owned;

template <typename F> bool resolve(void * handle, const char * name, F & fn) {
    return abi_loader::resolve(TOOL, handle, name, fn);
}

// Every "&&"-separated text of `expected` occurs in `got`.
bool contains_all(const std::string & got, const std::string & expected, std::string * missing) {
    for (const std::string & part : split(expected, "&&")) {
        const std::string want = trim(part);
        if (!want.empty() && got.find(want) == std::string::npos) {
            *missing = want;
            return false;
        }
    }
    return true;
}

struct Tally {
    int ran = 0;
    int passed = 0;
    void ok(const std::string & name) {
        ++ran;
        ++passed;
        std::printf("ok %s\n", name.c_str());
    }
    void fail(const std::string & name, const std::string & why) {
        ++ran;
        std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    }
    int finish() const {
        std::printf("summary %d %d\n", ran, passed);
        return ran > 0 && ran == passed ? 0 : 1;
    }
};

// --- selector ------------------------------------------------------------------------------

struct Kit {
    decltype(&eliza_inference_free_string) free_string;
    void (*clear)(void);
    int (*register_fake)(const char *, int, int, int);
    int (*select)(const char *, const char *, int, char **, char **);
};

// One fake: name/available/can_serve/rank.
bool register_fakes(const Kit & kit, const std::string & field, std::string * why) {
    const std::string f = trim(field);
    if (f == "-") return true;
    for (const std::string & item : split(f, ",")) {
        const std::vector<std::string> parts = split(trim(item), "/");
        if (parts.size() != 4) {
            *why = "fake '" + trim(item) + "' is not name/available/can_serve/rank";
            return false;
        }
        kit.register_fake(parts[0].c_str(), std::atoi(parts[1].c_str()), std::atoi(parts[2].c_str()),
                          std::atoi(parts[3].c_str()));
    }
    return true;
}

constexpr int kAbiMismatch = 3;

int run_selector(const std::string & kit_path, const std::string & cases_path) {
    void * handle = abi_loader::open_library(TOOL, kit_path);
    if (!handle) return 2;
    // The test kit carries the C ABI of the library it is built from: the same version check.
    const abi_loader::Loaded abi = abi_loader::check_abi(TOOL, handle, kit_path);
    if (abi != abi_loader::Loaded::ok) return abi == abi_loader::Loaded::abi_mismatch ? kAbiMismatch : 2;
    Kit kit{};
    if (!resolve(handle, "eliza_inference_free_string", kit.free_string) ||
        !resolve(handle, "eliza_testkit_clear_registry", kit.clear) ||
        !resolve(handle, "eliza_testkit_register_fake", kit.register_fake) ||
        !resolve(handle, "eliza_testkit_select", kit.select)) {
        return 2;
    }
    std::vector<std::string> lines;
    if (!read_lines(cases_path, lines)) return 2;
    Tally tally;
    for (const std::string & line : lines) {
        const std::vector<std::string> f = split(line, " | ");
        if (f.size() != 5) {
            std::fprintf(stderr, "case_runner: %s: not 5 fields: %s\n", cases_path.c_str(), line.c_str());
            return 2;
        }
        const std::string name = trim(f[0]);
        const std::string expect = trim(f[4]);
        bool env_set = false;
        std::string env;
        std::string why;
        if (!parse_env(f[2], &env_set, &env)) {
            std::fprintf(stderr, "case_runner: %s: case %s: env must be - or \"...\"\n", cases_path.c_str(),
                         name.c_str());
            return 2;
        }
        kit.clear();
        if (!register_fakes(kit, f[1], &why)) {
            std::fprintf(stderr, "case_runner: %s: case %s: %s\n", cases_path.c_str(), name.c_str(), why.c_str());
            return 2;
        }
        char * chosen_raw = nullptr;
        char * error_raw = nullptr;
        const int rc = kit.select(trim(f[3]).c_str(), env_set ? env.c_str() : nullptr, 0, &chosen_raw, &error_raw);
        const std::string chosen = owned(kit.free_string, chosen_raw);
        const std::string error = owned(kit.free_string, error_raw);
        std::ostringstream got;
        got << "rc " << rc << ", chosen '" << chosen << "', error '" << error << "'";
        bool pass = false;
        if (expect == "in-tree") {
            pass = rc == 0 && chosen.empty() && error.empty();
        } else if (expect.rfind("chosen ", 0) == 0) {
            pass = rc == 1 && chosen == trim(expect.substr(7)) && error.empty();
        } else if (expect.rfind("error ", 0) == 0) {
            std::string missing;
            pass = rc == ELIZA_ERR_INVALID_ARG && chosen.empty() && contains_all(error, expect.substr(6), &missing);
        } else {
            std::fprintf(stderr, "case_runner: %s: case %s: unknown expectation '%s'\n", cases_path.c_str(),
                         name.c_str(), expect.c_str());
            return 2;
        }
        if (pass) {
            tally.ok(name);
        } else {
            tally.fail(name, "want " + expect + "; got " + got.str());
        }
    }
    kit.clear();
    return tally.finish();
}

// --- gate fall-through through the shipped library -------------------------------------------

std::string hex(const std::string & bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

// Greedy output of one prompt: "<ids> | <hex text>", or "" with *error set.
std::string generate(const Api & api, EliInferenceContext * ctx, const std::string & prompt, int max_tokens,
                     std::string * error) {
    int * ids = nullptr;
    size_t n = 0;
    char * err = nullptr;
    if (api.tokenize(ctx, prompt.data(), prompt.size(), 1, 0, &ids, &n, &err) < 0) {
        *error = "tokenize: " + owned(api.free_string, err);
        return "";
    }
    std::vector<int32_t> tokens(ids, ids + n);
    api.free_tokens(ids);
    eliza_llm_stream_config_t cfg{};
    cfg.max_tokens = max_tokens;
    cfg.top_p = 1.0f;
    cfg.repeat_penalty = 1.0f;
    EliLlmStream * stream = api.open(ctx, &cfg, &err);
    if (!stream) {
        *error = "open: " + owned(api.free_string, err);
        return "";
    }
    std::string ids_out;
    std::string text;
    int rc = api.prefill(stream, tokens.data(), tokens.size(), &err);
    std::vector<int32_t> step(16);
    std::vector<char> buf(4096);
    while (rc >= 0) {
        size_t got = 0;
        rc = api.next(stream, step.data(), step.size(), &got, buf.data(), buf.size(), nullptr, nullptr, &err);
        if (rc < 0) break;
        for (size_t i = 0; i < got; ++i) ids_out += (ids_out.empty() ? "" : " ") + std::to_string(step[i]);
        text += buf.data();
        if (rc == 1) break;
    }
    api.close(stream);
    if (rc < 0) {
        *error = "generate: " + owned(api.free_string, err);
        return "";
    }
    return ids_out + " | " + hex(text);
}

int run_fallthrough(const std::string & library, const std::string & plan_path, const std::string & prompts_path,
                    int max_tokens) {
    Api api{};
    const abi_loader::Loaded loaded = abi_loader::load_api(TOOL, library, api);
    if (loaded != abi_loader::Loaded::ok) return loaded == abi_loader::Loaded::abi_mismatch ? kAbiMismatch : 2;
    std::vector<std::string> plan;
    std::vector<std::string> prompts;
    if (!read_lines(plan_path, plan) || !read_lines(prompts_path, prompts)) return 2;
    Tally tally;
    for (const std::string & line : plan) {
        // name \t bundle \t env (- or the value) \t kind \t texts
        const std::vector<std::string> f = split(line, "\t");
        if (f.size() != 5) {
            std::fprintf(stderr, "case_runner: %s: not 5 tab-separated fields: %s\n", plan_path.c_str(), line.c_str());
            return 2;
        }
        const std::string & name = f[0];
        const std::string & kind = f[3];
        const std::string & texts = f[4];
        if (f[2] == "-") {
            unsetenv("ELIZA_LLM_BACKEND");
        } else {
            setenv("ELIZA_LLM_BACKEND", f[2].c_str(), 1);
        }
        char * err = nullptr;
        EliInferenceContext * ctx = api.create(f[1].c_str(), &err);
        std::string missing;
        if (!ctx) {
            const std::string message = owned(api.free_string, err);
            if (kind == "create-error" && contains_all(message, texts, &missing)) {
                tally.ok(name);
            } else {
                tally.fail(name, "want " + kind + " " + texts + "; _create failed: " + message);
            }
            continue;
        }
        std::string failure;
        if (kind == "create-error") {
            failure = "_create succeeded";
        } else if (kind == "tokenize-error") {
            int * ids = nullptr;
            size_t n = 0;
            if (api.tokenize(ctx, "hello", 5, 1, 0, &ids, &n, &err) >= 0) {
                api.free_tokens(ids);
                failure = "_tokenize succeeded";
            } else if (!contains_all(owned(api.free_string, err), texts, &missing)) {
                failure = "the error lacks '" + missing + "'";
            }
        } else if (kind == "open-error") {
            eliza_llm_stream_config_t cfg{};
            EliLlmStream * stream = api.open(ctx, &cfg, &err);
            if (stream) {
                api.close(stream);
                failure = "_open succeeded";
            } else {
                const std::string message = owned(api.free_string, err);
                if (!contains_all(message, texts, &missing)) failure = "the error lacks '" + missing + "': " + message;
            }
        } else if (kind == "generates") {
            for (size_t i = 0; i < prompts.size() && failure.empty(); ++i) {
                const std::string out = generate(api, ctx, prompts[i], max_tokens, &failure);
                if (failure.empty()) std::printf("output %s %zu %s\n", name.c_str(), i, out.c_str());
            }
        } else {
            failure = "unknown expectation '" + kind + "'";
        }
        api.destroy(ctx);
        if (failure.empty()) {
            tally.ok(name);
        } else {
            tally.fail(name, failure);
        }
    }
    unsetenv("ELIZA_LLM_BACKEND");
    return tally.finish();
}

int usage() {
    std::fprintf(stderr,
                 "usage: case_runner selector --kit LIB --cases FILE\n"
                 "       case_runner fallthrough --library LIB --plan FILE --prompts FILE [--max-tokens N]\n");
    return 2;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) return usage();
    const std::string mode = argv[1];
    std::string kit, cases, library, plan, prompts;
    int max_tokens = 16;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const std::string value = argv[i + 1];
        if (flag == "--kit") kit = value;
        else if (flag == "--cases") cases = value;
        else if (flag == "--library") library = value;
        else if (flag == "--plan") plan = value;
        else if (flag == "--prompts") prompts = value;
        else if (flag == "--max-tokens") max_tokens = std::atoi(value.c_str());
        else return usage();
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (mode == "selector" && !kit.empty() && !cases.empty()) return run_selector(kit, cases);
    if (mode == "fallthrough" && !library.empty() && !plan.empty() && !prompts.empty()) {
        return run_fallthrough(library, plan, prompts, max_tokens);
    }
    return usage();
}
