// e2e_loop_bench: drives the public C ABI only — create, open, prefill, next until done,
// close — over a prompt file, and writes one JSON record per prompt (see bench_common.h).
// The library is loaded with dlopen from --library, so one bench binary measures any
// build of libelizainference, including a baseline built from an older commit.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "eliza-inference-ffi.h"

namespace {

struct Api {
    decltype(&eliza_inference_abi_version) abi_version;
    decltype(&eliza_inference_free_string) free_string;
    decltype(&eliza_inference_create) create;
    decltype(&eliza_inference_destroy) destroy;
    decltype(&eliza_inference_tokenize) tokenize;
    decltype(&eliza_inference_free_tokens) free_tokens;
    decltype(&eliza_inference_llm_stream_open) open;
    decltype(&eliza_inference_llm_stream_prefill) prefill;
    decltype(&eliza_inference_llm_stream_next) next;
    decltype(&eliza_inference_llm_stream_close) close;
};

template <typename F> bool resolve(void * handle, const char * name, F & fn) {
    fn = reinterpret_cast<F>(dlsym(handle, name));
    if (!fn) std::fprintf(stderr, "e2e_loop_bench: symbol %s missing from the library\n", name);
    return fn != nullptr;
}

bool load_api(const std::string & path, Api & api) {
    void * handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        std::fprintf(stderr, "e2e_loop_bench: cannot load library '%s': %s\n", path.c_str(), dlerror());
        return false;
    }
    return resolve(handle, "eliza_inference_abi_version", api.abi_version) &&
           resolve(handle, "eliza_inference_free_string", api.free_string) &&
           resolve(handle, "eliza_inference_create", api.create) &&
           resolve(handle, "eliza_inference_destroy", api.destroy) &&
           resolve(handle, "eliza_inference_tokenize", api.tokenize) &&
           resolve(handle, "eliza_inference_free_tokens", api.free_tokens) &&
           resolve(handle, "eliza_inference_llm_stream_open", api.open) &&
           resolve(handle, "eliza_inference_llm_stream_prefill", api.prefill) &&
           resolve(handle, "eliza_inference_llm_stream_next", api.next) &&
           resolve(handle, "eliza_inference_llm_stream_close", api.close);
}

int report(const Api & api, const char * what, char * error) {
    std::fprintf(stderr, "e2e_loop_bench: %s failed: %s\n", what, error ? error : "(no message)");
    api.free_string(error);
    return 1;
}

}  // namespace

int main(int argc, char ** argv) {
    bench::Options opt;
    if (!bench::parse_options(argc, argv, "e2e_loop_bench", true, opt)) return 2;
    std::vector<std::string> prompts;
    std::string error;
    if (!bench::read_prompts(opt.prompts, prompts, error)) {
        std::fprintf(stderr, "e2e_loop_bench: %s\n", error.c_str());
        return 2;
    }
    Api api{};
    if (!load_api(opt.library, api)) return 1;
    if (std::string(api.abi_version()) != std::to_string(ELIZA_INFERENCE_ABI_VERSION)) {
        std::fprintf(stderr, "e2e_loop_bench: library ABI %s, expected %d\n", api.abi_version(),
                     ELIZA_INFERENCE_ABI_VERSION);
        return 1;
    }

    char * err = nullptr;
    EliInferenceContext * ctx = api.create(opt.bundle.c_str(), &err);
    if (!ctx) return report(api, "eliza_inference_create", err);

    const std::string dir = opt.library.substr(0, opt.library.find_last_of('/') + 1);
    const std::string info = bench::read_file(dir + "build-info.json");
    const std::string identity = "{\"library\": " + bench::json_string(opt.library) + ", \"library_sha256\": " +
                                 bench::json_string(bench::sha256_file(opt.library)) +
                                 ", \"info\": " + (info.empty() ? std::string("null") : bench::one_line(info)) + "}";

    FILE * out = opt.out == "-" ? stdout : std::fopen(opt.out.c_str(), "w");
    if (!out) {
        std::fprintf(stderr, "e2e_loop_bench: cannot write '%s'\n", opt.out.c_str());
        api.destroy(ctx);
        return 2;
    }
    bench::write_header(out, "e2e_loop_bench", opt, identity);

    eliza_llm_stream_config_t cfg{};
    cfg.max_tokens = opt.max_tokens;
    cfg.temperature = opt.temperature;
    cfg.top_p = opt.top_p;
    cfg.top_k = opt.top_k;
    cfg.repeat_penalty = opt.repeat_penalty;
    cfg.slot_id = opt.seed;

    int rc = 0;
    std::vector<int32_t> step_tokens(64);
    std::vector<char> text(1 << 16);
    for (size_t p = 0; p < prompts.size() && rc == 0; ++p) {
        int * raw = nullptr;
        size_t n_raw = 0;
        if (api.tokenize(ctx, prompts[p].data(), prompts[p].size(), 1, 0, &raw, &n_raw, &err) < 0) {
            rc = report(api, "eliza_inference_tokenize", err);
            break;
        }
        bench::PromptRun run;
        run.prompt_tokens.assign(raw, raw + n_raw);
        api.free_tokens(raw);
        for (int r = 0; r < opt.repeats && rc == 0; ++r) {
            EliLlmStream * stream = api.open(ctx, &cfg, &err);
            if (!stream) {
                rc = report(api, "eliza_inference_llm_stream_open", err);
                break;
            }
            bench::Repeat rep;
            rep.t0 = bench::now_ms();
            if (api.prefill(stream, run.prompt_tokens.data(), run.prompt_tokens.size(), &err) < 0) {
                rc = report(api, "eliza_inference_llm_stream_prefill", err);
                api.close(stream);
                break;
            }
            rep.t_prefill = bench::now_ms();
            while (rep.status == 0) {
                size_t n = 0;
                int32_t drafted = 0, accepted = 0;
                rep.status = api.next(stream, step_tokens.data(), step_tokens.size(), &n, text.data(), text.size(),
                                      &drafted, &accepted, &err);
                if (rep.status < 0) {
                    rc = report(api, "eliza_inference_llm_stream_next", err);
                    break;
                }
                if (rep.t_first == 0.0) rep.t_first = bench::now_ms();
                rep.tokens.insert(rep.tokens.end(), step_tokens.begin(), step_tokens.begin() + static_cast<long>(n));
                rep.text += text.data();
                rep.drafter.emplace_back(drafted, accepted);
            }
            rep.t_end = bench::now_ms();
            api.close(stream);
            if (rc != 0) break;
            bench::add_repeat(run, r == 0, std::move(rep));
        }
        if (rc == 0) bench::write_prompt(out, p, prompts[p], run);
    }
    if (out != stdout) std::fclose(out);
    api.destroy(ctx);
    return rc;
}
