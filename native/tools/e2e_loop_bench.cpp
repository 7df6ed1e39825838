// e2e_loop_bench: drives the public C ABI only — create, open, prefill, next until done,
// close — over a prompt file, and writes one JSON record per prompt (see bench_common.h).
// The library is loaded with dlopen from --library, so one bench binary measures any
// build of libelizainference, including a baseline built from an older commit.
// With --streams it measures concurrent streams instead (see run_concurrent).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "abi_loader.h"
#include "bench_common.h"
#include "eliza-inference-ffi.h"
#include "simulator_hooks.h"

namespace {

constexpr const char * TOOL = "e2e_loop_bench";
using abi_loader::Api;

int report(const Api & api, const char * what, char * error) {
    std::fprintf(stderr, "e2e_loop_bench: %s failed: %s\n", what, error ? error : "(no message)");
    api.free_string(error);
    return 1;
}

// --- concurrent streams ------------------------------------------------------------------
// --streams 1,2,4: one context per stream (its own eliza_inference_create), prompts
// assigned round-robin. Every stream first runs alone: its serial output. Then --repeats
// rounds; each round runs every N of the list once, in an order rotated from round to round
// so no N always runs first, with N streams started together on N threads. A run's
// aggregate tok/s is the tokens all its streams generated over the wall time from the
// common start to the last stream's end (prefill included; streams are opened before and
// closed after). Each stream's tokens must equal its serial run.

struct StreamRun {
    std::vector<int32_t> tokens;
    double t_end = 0;
    std::string error;
};

void generate(const Api & api, EliLlmStream * stream, const std::vector<int32_t> & prompt, StreamRun & out) {
    char * err = nullptr;
    if (api.prefill(stream, prompt.data(), prompt.size(), &err) < 0) {
        out.error = std::string("prefill: ") + (err ? err : "?");
        api.free_string(err);
        return;
    }
    std::vector<int32_t> step(16);
    std::vector<char> text(1 << 16);
    for (int status = 0; status == 0;) {
        size_t n = 0;
        status = api.next(stream, step.data(), step.size(), &n, text.data(), text.size(), nullptr, nullptr, &err);
        if (status < 0) {
            out.error = std::string("next: ") + (err ? err : "?");
            api.free_string(err);
            return;
        }
        out.tokens.insert(out.tokens.end(), step.begin(), step.begin() + static_cast<long>(n));
    }
}

int run_concurrent(const Api & api, const bench::Options & opt, const std::vector<std::string> & prompts,
                   const std::string & identity, FILE * out) {
    const int n_max = *std::max_element(opt.streams.begin(), opt.streams.end());
    std::vector<EliInferenceContext *> contexts;
    std::vector<std::vector<int32_t>> inputs;
    char * err = nullptr;
    int rc = 0;
    for (int i = 0; i < n_max && rc == 0; ++i) {
        EliInferenceContext * ctx = api.create(opt.bundle.c_str(), &err);
        if (!ctx) {
            rc = report(api, "eliza_inference_create", err);
            break;
        }
        contexts.push_back(ctx);
        const std::string & prompt = prompts[static_cast<size_t>(i) % prompts.size()];
        int * raw = nullptr;
        size_t n_raw = 0;
        if (api.tokenize(ctx, prompt.data(), prompt.size(), 1, 0, &raw, &n_raw, &err) < 0) {
            rc = report(api, "eliza_inference_tokenize", err);
            break;
        }
        inputs.emplace_back(raw, raw + n_raw);
        api.free_tokens(raw);
    }
    eliza_llm_stream_config_t cfg{};
    cfg.max_tokens = opt.max_tokens;
    cfg.temperature = 0.0f;  // greedy: outputs comparable with the serial runs
    cfg.top_p = 1.0f;
    cfg.repeat_penalty = opt.repeat_penalty;

    // Runs n streams at once; false on an error (reported).
    auto run = [&](int n, std::vector<StreamRun> & results, double & seconds) {
        std::vector<EliLlmStream *> streams;
        for (int i = 0; i < n; ++i) {
            EliLlmStream * s = api.open(contexts[static_cast<size_t>(i)], &cfg, &err);
            if (!s) {
                report(api, "eliza_inference_llm_stream_open", err);
                for (EliLlmStream * o : streams) api.close(o);
                return false;
            }
            streams.push_back(s);
        }
        results.assign(static_cast<size_t>(n), StreamRun{});
        std::promise<void> go;
        std::shared_future<void> start = go.get_future().share();
        std::vector<std::thread> threads;
        for (int i = 0; i < n; ++i) {
            threads.emplace_back([&, i] {
                start.wait();
                generate(api, streams[static_cast<size_t>(i)], inputs[static_cast<size_t>(i)],
                         results[static_cast<size_t>(i)]);
                results[static_cast<size_t>(i)].t_end = bench::now_ms();
            });
        }
        const double t0 = bench::now_ms();
        go.set_value();
        for (std::thread & t : threads) t.join();
        double t_end = t0;
        bool ok = true;
        for (const StreamRun & r : results) {
            t_end = std::max(t_end, r.t_end);
            if (!r.error.empty()) {
                std::fprintf(stderr, "e2e_loop_bench: a concurrent stream failed: %s\n", r.error.c_str());
                ok = false;
            }
        }
        for (EliLlmStream * s : streams) api.close(s);
        seconds = (t_end - t0) / 1000.0;
        return ok;
    };

    std::vector<std::vector<int32_t>> serial(static_cast<size_t>(n_max));
    if (rc == 0) {
        std::fprintf(out,
                     "{\"type\": \"concurrent-header\", \"format\": \"eliza-concurrent/1\", \"cell\": %s, "
                     "\"bundle\": %s, \"max_tokens\": %d, \"rounds\": %d, \"streams\": [",
                     bench::json_string(opt.cell).c_str(), bench::json_string(opt.bundle).c_str(), opt.max_tokens,
                     opt.repeats);
        for (size_t i = 0; i < opt.streams.size(); ++i) std::fprintf(out, "%s%d", i ? ", " : "", opt.streams[i]);
        const char * budget = std::getenv("ELIZA_N_THREADS");
        std::fprintf(out, "], \"eliza_n_threads\": %s, \"build\": %s}\n",
                     budget ? bench::json_string(budget).c_str() : "null", identity.c_str());
    }
    for (int i = 0; i < n_max && rc == 0; ++i) {
        // Serial reference: stream i alone, on its own context.
        std::vector<StreamRun> one;
        double seconds = 0;
        std::swap(contexts[0], contexts[static_cast<size_t>(i)]);
        std::swap(inputs[0], inputs[static_cast<size_t>(i)]);
        const bool ok = run(1, one, seconds);
        std::swap(contexts[0], contexts[static_cast<size_t>(i)]);
        std::swap(inputs[0], inputs[static_cast<size_t>(i)]);
        if (!ok) {
            rc = 1;
            break;
        }
        serial[static_cast<size_t>(i)] = one[0].tokens;
        std::string toks;
        for (size_t k = 0; k < one[0].tokens.size(); ++k) toks += (k ? ", " : "") + std::to_string(one[0].tokens[k]);
        std::fprintf(out, "{\"type\": \"serial\", \"stream\": %d, \"tokens\": [%s], \"seconds\": %.6f}\n", i,
                     toks.c_str(), seconds);
    }
    std::vector<std::vector<double>> tok_s(opt.streams.size());
    std::vector<bool> identical(opt.streams.size(), true);
    for (int round = 0; round < opt.repeats && rc == 0; ++round) {
        for (size_t k = 0; k < opt.streams.size() && rc == 0; ++k) {
            const size_t which = (k + static_cast<size_t>(round)) % opt.streams.size();
            const int n = opt.streams[which];
            std::vector<StreamRun> results;
            double seconds = 0;
            if (!run(n, results, seconds)) {
                rc = 1;
                break;
            }
            size_t total = 0;
            bool same = true;
            for (int i = 0; i < n; ++i) {
                total += results[static_cast<size_t>(i)].tokens.size();
                same = same && results[static_cast<size_t>(i)].tokens == serial[static_cast<size_t>(i)];
            }
            identical[which] = identical[which] && same;
            const double rate = seconds > 0 ? static_cast<double>(total) / seconds : 0.0;
            tok_s[which].push_back(rate);
            std::fprintf(out,
                         "{\"type\": \"run\", \"round\": %d, \"streams\": %d, \"tokens\": %zu, "
                         "\"seconds\": %.6f, \"tok_s\": %.3f, \"identical\": %s}\n",
                         round, n, total, seconds, rate, same ? "true" : "false");
        }
    }
    if (rc == 0) {
        double single = 0;
        for (size_t k = 0; k < opt.streams.size(); ++k) {
            if (opt.streams[k] == 1) single = bench::percentile(tok_s[k], 0.5);
        }
        for (size_t k = 0; k < opt.streams.size(); ++k) {
            const double median = bench::percentile(tok_s[k], 0.5);
            std::fprintf(out,
                         "{\"type\": \"summary\", \"streams\": %d, \"median_tok_s\": %.3f, \"min_tok_s\": %.3f, "
                         "\"q1_tok_s\": %.3f, \"q3_tok_s\": %.3f, \"max_tok_s\": %.3f, \"ratio_to_one\": %s, "
                         "\"identical_to_serial\": %s}\n",
                         opt.streams[k], median, bench::percentile(tok_s[k], 0.0), bench::percentile(tok_s[k], 0.25),
                         bench::percentile(tok_s[k], 0.75), bench::percentile(tok_s[k], 1.0),
                         single > 0 ? std::to_string(median / single).c_str() : "null",
                         identical[k] ? "true" : "false");
        }
    }
    for (EliInferenceContext * ctx : contexts) api.destroy(ctx);
    return rc;
}

}  // namespace

int main(int argc, char ** argv) {
    bench::Options opt;
    const bench::Parsed parsed = bench::parse_options(argc, argv, "e2e_loop_bench", true, opt);
    if (parsed != bench::Parsed::ok) return parsed == bench::Parsed::help ? 0 : 2;
    std::vector<std::string> prompts;
    std::string error;
    if (!bench::read_prompts(opt.prompts, prompts, error)) {
        std::fprintf(stderr, "e2e_loop_bench: %s\n", error.c_str());
        return 2;
    }
    Api api{};
    // Refuses a library of another ABI version (abi_loader::check_abi) before any other call.
    bench::drop_file_cache(opt.library);  // peak RSS counts the library's own pages, not its page cache's shape
    if (abi_loader::load_api(TOOL, opt.library, api) != abi_loader::Loaded::ok) return 1;

    const std::string dir = opt.library.substr(0, opt.library.find_last_of('/') + 1);
    const std::string info = bench::read_file(dir + "build-info.json");
    // The backend every stream was asked for: a hard selection either serves every stream
    // with that backend or fails the open, so a record that names one was served by it.
    const char * backend = std::getenv("ELIZA_LLM_BACKEND");
    const std::string sha256 = opt.library_sha256.empty() ? bench::sha256_file(opt.library) : opt.library_sha256;
    const std::string identity = "{\"library\": " + bench::json_string(opt.library) + ", \"library_sha256\": " +
                                 bench::json_string(sha256) +
                                 ", \"llm_backend\": " + (backend ? bench::json_string(backend) : std::string("null")) +
                                 ", \"info\": " + (info.empty() ? std::string("null") : bench::one_line(info)) + "}";

    FILE * out = opt.out == "-" ? stdout : std::fopen(opt.out.c_str(), "w");
    if (!out) {
        std::fprintf(stderr, "e2e_loop_bench: cannot write '%s'\n", opt.out.c_str());
        return 2;
    }
    if (!opt.streams.empty()) {
        const int rc = run_concurrent(api, opt, prompts, identity, out);
        if (out != stdout) std::fclose(out);
        return rc;
    }

    char * err = nullptr;
    EliInferenceContext * ctx = api.create(opt.bundle.c_str(), &err);
    if (!ctx) {
        if (out != stdout) std::fclose(out);
        return report(api, "eliza_inference_create", err);
    }
    bench::write_header(out, "e2e_loop_bench", opt, identity);

    eliza_llm_stream_config_t cfg{};
    cfg.max_tokens = opt.max_tokens;
    cfg.temperature = opt.temperature;
    cfg.top_p = opt.top_p;
    cfg.top_k = opt.top_k;
    cfg.repeat_penalty = opt.repeat_penalty;
    cfg.slot_id = opt.seed;
    cfg.mtp_drafter_path = opt.drafter.empty() ? nullptr : opt.drafter.c_str();
    cfg.draft_min = opt.draft_min;
    cfg.draft_max = opt.draft_max;

    int rc = 0;
    std::vector<int32_t> step_tokens(64);
    std::vector<char> text(1 << 16);
    simulator::start_counting();  // the load is behind us: the streams' work is what is judged
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
                if (rep.t_first == 0.0) {
                    rep.t_first = bench::now_ms();
                    rep.first_step_tokens = n;
                } else {
                    rep.steps.emplace_back(bench::now_ms(), n);
                }
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
    simulator::stop_counting();
    if (out != stdout) std::fclose(out);
    api.destroy(ctx);
    return rc;
}
