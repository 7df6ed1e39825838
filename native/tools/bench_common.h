// Shared by e2e_loop_bench and reference_runner: the prompt file, the record format, and
// the measurements, so both tools emit records the diff engine compares field by field.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace bench {

// Prompt file: UTF-8, one prompt per line; blank lines and lines starting with '#' are
// skipped; "\n", "\t" and "\\" inside a line are escapes.
bool read_prompts(const std::string & path, std::vector<std::string> & out, std::string & error);

std::string json_string(const std::string & s);  // quoted, escaped; invalid UTF-8 bytes as \u00XX
std::string hex(const std::string & bytes);
std::string sha256_file(const std::string & path);  // "" when unreadable
std::string read_file(const std::string & path);    // "" when unreadable
std::string one_line(std::string json);             // newlines -> spaces: records are JSON lines
// The peak resident memory of this process's own program image, and where it was read
// ("proc-status-vmhwm" on Linux and Android): never a figure inherited from the parent.
struct PeakRss {
    long kb;
    const char * source;
};
PeakRss peak_rss();
// Drops the kernel's cached pages of a file (Linux and Android; elsewhere nothing), so a
// library mapped next has as many resident pages as its bytes and the loader's access ask
// for, however the file was written: a linker's output and a copy of the same bytes are
// cached in differently sized folios, which the kernel maps whole (measured: 34.5 against
// 32.9 MB peak RSS for identical bytes).
void drop_file_cache(const std::string & path);
long peak_rss_kb();
double now_ms();

// The q-quantile of v (0: the smallest, 0.5: the median, 1: the largest), by linear
// interpolation between closest ranks; 0 for no values.
double percentile(std::vector<double> v, double q);

struct Options {
    std::string bundle;
    std::string prompts;
    std::string out;           // "-" = stdout
    std::string library;       // e2e_loop_bench: the libelizainference to dlopen
    // e2e_loop_bench: the library's sha256 as the caller computed it; empty: the tool hashes
    // the file itself (under a CPU simulator that costs more than the run it precedes)
    std::string library_sha256;
    std::string cell = "unknown";
    int max_tokens = 64;
    int repeats = 1;
    float temperature = 0.0f;
    float top_p = 1.0f;
    int top_k = 0;
    float repeat_penalty = 1.0f;
    int seed = 0;
    // e2e_loop_bench only: "1,2,4" runs the concurrent-streams measurement instead (see
    // e2e_loop_bench.cpp); repeats is then the number of interleaved rounds.
    std::vector<int> streams;
    // e2e_loop_bench only: speculative decoding with this draft GGUF (mtp_drafter_path).
    std::string drafter;
    // reference_runner only: every step's logits of the first repeat, in this file (see
    // reference_runner.cpp for the layout); empty: none written.
    std::string logits_out;
    int draft_min = 0;
    int draft_max = 0;
};

enum class Parsed { ok, help, error };

// Parses --flag value pairs. --help/-h prints the usage with the defaults to stdout
// (Parsed::help: exit 0); a bad argument prints the reason and the usage to stderr
// (Parsed::error: exit 2).
Parsed parse_options(int argc, char ** argv, const char * tool, bool needs_library, Options & opt);

// One prompt's result over all repeats; tokens/text from the first repeat.
struct PromptRun {
    std::vector<int32_t> prompt_tokens;
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<std::pair<int32_t, int32_t>> drafter;  // per step (drafted, accepted)
    int final_status = 0;
    bool repeats_identical = true;
    std::vector<double> prefill_ms, first_token_ms, decode_tok_s;
    // Per repeat, the median time of one token's step after the first (ms): the steady rate
    // of the decode, which a burst of another process's work does not move, where a cost
    // paid at every token does.
    std::vector<double> decode_step_ms;
    // reference_runner: per generated position of the first repeat, the gap between the two
    // highest logits the token was chosen from (how close a tie it was), and where that
    // token's text ends in `text` (so a text-only runtime's first differing byte finds the
    // position it belongs to).
    std::vector<double> logit_margins;
    std::vector<int32_t> token_text_ends;
};

// One repeat of one prompt, as a tool measured it.
struct Repeat {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<std::pair<int32_t, int32_t>> drafter;
    int status = 0;
    std::vector<double> logit_margins;  // reference_runner only (see PromptRun)
    std::vector<int32_t> token_text_ends;  // reference_runner only (see PromptRun)
    size_t first_step_tokens = 1;  // a step may return several tokens (speculative decoding)
    // After the first step: when each step returned (ms) and how many tokens it carried.
    std::vector<std::pair<double, size_t>> steps;
    double t0 = 0, t_prefill = 0, t_first = 0, t_end = 0;  // ms: start, prefill done, first step, last step
};

// The first repeat sets the outputs; later ones must reproduce them. Timings of all repeats.
void add_repeat(PromptRun & run, bool first, Repeat r);

void write_header(FILE * f, const char * tool, const Options & opt, const std::string & identity_json);
void write_prompt(FILE * f, size_t index, const std::string & prompt, const PromptRun & run);

}  // namespace bench
