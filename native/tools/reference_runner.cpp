// reference_runner: the pre-seam baseline. The same prompts through a plain llama.h loop —
// no C ABI, no seam — with the same context rule and sampler chain as the library, writing
// the same records as e2e_loop_bench so the diff engine can compare them byte for byte.
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "llama.h"

namespace {

void silent(ggml_log_level, const char *, void *) {}

int fail(const std::string & message) {
    std::fprintf(stderr, "reference_runner: %s\n", message.c_str());
    return 1;
}

// The library's rule (native/src/context.cpp): min(training context, 4096) and
// min(available CPUs, 8) threads for one stream, with ELIZA_N_CTX / ELIZA_N_THREADS overrides.
uint32_t context_size(const llama_model * model) {
    if (const char * v = std::getenv("ELIZA_N_CTX"); v && *v) return static_cast<uint32_t>(std::atol(v));
    const int32_t trained = llama_model_n_ctx_train(model);
    return std::min<uint32_t>(trained > 0 ? static_cast<uint32_t>(trained) : 4096u, 4096u);
}

int32_t thread_count() {
    if (const char * v = std::getenv("ELIZA_N_THREADS"); v && *v) return std::atoi(v);
    int32_t cpus = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) cpus = CPU_COUNT(&set);
#endif
    return std::min<int32_t>(cpus, 8);
}

llama_sampler * make_sampler(const bench::Options & opt, int32_t n_vocab) {
    llama_sampler_chain_params sparams = llama_sampler_chain_default_params();
    sparams.no_perf = true;
    llama_sampler * chain = llama_sampler_chain_init(sparams);
    if (opt.repeat_penalty > 0.0f && opt.repeat_penalty != 1.0f) {
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(n_vocab, 64, opt.repeat_penalty, 0.0f, 0.0f));
    }
    if (opt.temperature <= 0.0f) {
        llama_sampler_chain_add(chain, llama_sampler_init_greedy());
        return chain;
    }
    if (opt.top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(opt.top_k));
    if (opt.top_p > 0.0f && opt.top_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(opt.top_p, 1));
    llama_sampler_chain_add(chain, llama_sampler_init_temp(opt.temperature));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(opt.seed >= 0 ? static_cast<uint32_t>(opt.seed) : 0u));
    return chain;
}

bool decode_all(llama_context * lctx, const std::vector<llama_token> & tokens) {
    const size_t n_batch = llama_n_batch(lctx);
    for (size_t done = 0; done < tokens.size();) {
        const size_t chunk = std::min(n_batch, tokens.size() - done);
        llama_batch batch = llama_batch_get_one(const_cast<llama_token *>(tokens.data() + done), static_cast<int32_t>(chunk));
        if (llama_decode(lctx, batch) != 0) return false;
        done += chunk;
    }
    return true;
}

// logits[top] - logits[second]: 0 is a tie, which another runtime's rounding may break the
// other way (backend-agreement allows a first divergence only at such a position).
double top_two_gap(const float * logits, const llama_vocab * vocab) {
    if (logits == nullptr) return 0.0;
    float first = -INFINITY, second = -INFINITY;
    for (int32_t t = 0, n = llama_vocab_n_tokens(vocab); t < n; ++t) {
        if (logits[t] > first) {
            second = first;
            first = logits[t];
        } else if (logits[t] > second) {
            second = logits[t];
        }
    }
    return static_cast<double>(first) - static_cast<double>(second);
}

// --logits-out: the raw logits of every step of each prompt's first repeat, for comparing two
// builds' arithmetic (cross-arch-agreement's logit error). Little-endian: the magic
// "ELZLGT01", int32 n_vocab, then per step int32 prompt index, int32 step, float32[n_vocab].
class LogitsFile {
  public:
    bool open(const std::string & path, int32_t n_vocab) {
        if (path.empty()) return true;
        file_ = std::fopen(path.c_str(), "wb");
        if (!file_) return false;
        n_vocab_ = n_vocab;
        return std::fwrite("ELZLGT01", 1, 8, file_) == 8 && std::fwrite(&n_vocab, sizeof n_vocab, 1, file_) == 1;
    }
    bool write(int32_t prompt, int32_t step, const float * logits) {
        if (!file_) return true;
        if (logits == nullptr) return false;
        return std::fwrite(&prompt, sizeof prompt, 1, file_) == 1 && std::fwrite(&step, sizeof step, 1, file_) == 1 &&
               std::fwrite(logits, sizeof(float), static_cast<size_t>(n_vocab_), file_) == static_cast<size_t>(n_vocab_);
    }
    bool close() {
        if (!file_) return true;
        const bool ok = std::fclose(file_) == 0;
        file_ = nullptr;
        return ok;
    }
    ~LogitsFile() { close(); }

  private:
    FILE * file_ = nullptr;
    int32_t n_vocab_ = 0;
};

std::string model_path(const std::string & bundle) {
    // The bundle layout of the library: exactly one text/*.gguf; the runner takes the first
    // by name. Listed directly: no shell ever sees the bundle path.
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto & entry : std::filesystem::directory_iterator(std::filesystem::path(bundle) / "text", ec)) {
        if (entry.path().extension() == ".gguf" && entry.is_regular_file(ec)) found.push_back(entry.path().string());
    }
    std::sort(found.begin(), found.end());
    return found.empty() ? std::string() : found.front();
}

}  // namespace

int main(int argc, char ** argv) {
    bench::Options opt;
    const bench::Parsed parsed = bench::parse_options(argc, argv, "reference_runner", false, opt);
    if (parsed != bench::Parsed::ok) return parsed == bench::Parsed::help ? 0 : 2;
    std::vector<std::string> prompts;
    std::string error;
    if (!bench::read_prompts(opt.prompts, prompts, error)) return fail(error) + 1;

    llama_log_set(silent, nullptr);
    llama_backend_init();
    const std::string path = model_path(opt.bundle);
    if (path.empty()) return fail("bundle '" + opt.bundle + "' has no text/*.gguf");
    llama_model * model = llama_model_load_from_file(path.c_str(), llama_model_default_params());
    if (!model) return fail("cannot load text model '" + path + "'");
    const llama_vocab * vocab = llama_model_get_vocab(model);

    char self[4096] = {0};
    const ssize_t n_self = readlink("/proc/self/exe", self, sizeof self - 1);
    const std::string exe = n_self > 0 ? std::string(self, static_cast<size_t>(n_self)) : std::string(argv[0]);
    const std::string info = bench::read_file(exe.substr(0, exe.find_last_of('/') + 1) + "build-info.json");
    const std::string identity = "{\"library\": " + bench::json_string(exe) + ", \"library_sha256\": " +
                                 bench::json_string(bench::sha256_file(exe)) +
                                 ", \"info\": " + (info.empty() ? std::string("null") : bench::one_line(info)) + "}";
    FILE * out = opt.out == "-" ? stdout : std::fopen(opt.out.c_str(), "w");
    if (!out) return fail("cannot write '" + opt.out + "'");
    bench::write_header(out, "reference_runner", opt, identity);
    LogitsFile logits;
    if (!logits.open(opt.logits_out, llama_vocab_n_tokens(vocab))) return fail("cannot write '" + opt.logits_out + "'");

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = context_size(model);
    cparams.n_batch = std::min<uint32_t>(cparams.n_ctx, 512);
    cparams.n_ubatch = cparams.n_batch;
    cparams.n_seq_max = 1;
    cparams.n_threads = thread_count();
    cparams.n_threads_batch = cparams.n_threads;
    cparams.no_perf = true;

    int rc = 0;
    for (size_t p = 0; p < prompts.size() && rc == 0; ++p) {
        bench::PromptRun run;
        std::vector<llama_token> prompt(prompts[p].size() + 2);
        const int32_t n_prompt = llama_tokenize(vocab, prompts[p].data(), static_cast<int32_t>(prompts[p].size()),
                                                prompt.data(), static_cast<int32_t>(prompt.size()), true, false);
        if (n_prompt < 0) return fail("cannot tokenize prompt " + std::to_string(p));
        prompt.resize(static_cast<size_t>(n_prompt));
        run.prompt_tokens.assign(prompt.begin(), prompt.end());
        for (int r = 0; r < opt.repeats; ++r) {
            llama_context * lctx = llama_init_from_model(model, cparams);
            llama_sampler * smpl = make_sampler(opt, llama_vocab_n_tokens(vocab));
            if (!lctx || !smpl) return fail("cannot create a context");
            bench::Repeat rep;
            rep.t0 = bench::now_ms();
            if (!decode_all(lctx, prompt)) return fail("prefill failed for prompt " + std::to_string(p));
            rep.t_prefill = bench::now_ms();
            size_t held = prompt.size();
            while (rep.status == 0) {
                const size_t had = rep.tokens.size();
                if (r == 0) {
                    const float * row = llama_get_logits_ith(lctx, -1);
                    rep.logit_margins.push_back(top_two_gap(row, vocab));
                    const auto step = static_cast<int32_t>(rep.logit_margins.size() - 1);
                    if (!logits.write(static_cast<int32_t>(p), step, row)) return fail("cannot write the logits");
                }
                const llama_token tok = llama_sampler_sample(smpl, lctx, -1);
                rep.drafter.emplace_back(0, 0);  // one entry per step, as the library reports
                if (llama_vocab_is_eog(vocab, tok)) {
                    rep.status = 1;
                } else {
                    std::string piece(64, '\0');
                    int32_t n = llama_token_to_piece(vocab, tok, piece.data(), static_cast<int32_t>(piece.size()), 0, false);
                    if (n < 0) {
                        piece.resize(static_cast<size_t>(-n));
                        n = llama_token_to_piece(vocab, tok, piece.data(), static_cast<int32_t>(piece.size()), 0, false);
                    }
                    rep.text.append(piece.data(), static_cast<size_t>(std::max(n, 0)));
                    rep.tokens.push_back(tok);
                    if (r == 0) rep.token_text_ends.push_back(static_cast<int32_t>(rep.text.size()));
                    const bool full = held + 1 > llama_n_ctx(lctx);
                    if (!full) {
                        if (!decode_all(lctx, {tok})) return fail("decode failed");
                        ++held;
                    }
                    if (full || static_cast<int>(rep.tokens.size()) >= opt.max_tokens) rep.status = 1;
                }
                if (rep.t_first == 0.0) {
                    rep.t_first = bench::now_ms();
                } else {
                    rep.steps.emplace_back(bench::now_ms(), rep.tokens.size() - had);
                }
            }
            rep.t_end = bench::now_ms();
            llama_sampler_free(smpl);
            llama_free(lctx);
            bench::add_repeat(run, r == 0, std::move(rep));
        }
        bench::write_prompt(out, p, prompts[p], run);
    }
    if (out != stdout) std::fclose(out);
    if (!logits.close()) return fail("cannot write '" + opt.logits_out + "'");
    llama_model_free(model);
    return rc;
}
