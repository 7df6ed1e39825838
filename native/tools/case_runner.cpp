// case_runner: the selector and gate fall-through cases, run as a target binary.
//
// A library built for another architecture cannot be loaded by the host's Python, and an
// Android or iOS device has no pytest; this small executable runs where the library runs
// (natively, under an emulator such as qemu-aarch64, or pushed to a device) and reads the
// same case tables the host's Python suites read:
//
//   case_runner selector --kit <libelizainference_testkit> --cases <native/cases/selector.cases>
//                        [--seam-cases <native/cases/seam.cases>]
//       the selector's resolution table against the compiled selector of the cell's test
//       kit, with fake factories (no model, no device); then the seam table (by default the
//       seam.cases beside --cases, so a caller that names only the selector table runs both):
//       the FFI's backend branch of every stream function, through the kit's fake backend
//   case_runner fallthrough --library <libelizainference> --plan <file> --prompts <file> --max-tokens N
//       the gate fall-through cases of native/cases/gate-fallthrough.cases, expanded for one
//       cell by eliza (eliza.formats.case_tables) into a plan of concrete bundles and
//       expectations, through the shipped library
//
// Output, one line each: "ok <case>", "FAIL <case>: <why>" (seam cases are named
// "seam:<case>"), "output <case> <prompt#> <ids> |
// <hex text>" (greedy output, compared across cells by eliza), then "summary <ran> <passed>".
// Exit status: 0 when every case passed, 1 when one failed, 2 on bad usage or input, 3 when
// the library (or test kit) reports another ABI version than the header it was built with:
// refused with one line on stderr before anything else of it is looked up or called.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
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

int run_seam(void * handle, const Kit & kit, const std::string & seam_path, Tally & tally);

int run_selector(const std::string & kit_path, const std::string & cases_path, const std::string & seam_path) {
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
    const int seam = run_seam(handle, kit, seam_path, tally);
    kit.clear();
    if (seam != 0) return seam;
    return tally.finish();
}

// --- seam: the FFI's backend branch of each stream function, through the kit's fake -------
// The same steps tests/selector runs through ctypes (native/cases/seam.cases documents them;
// eliza.formats.case_tables parses and judges them on the host).

struct SeamApi {
    int (*register_fake_session)(const char *, int, int, int, const char *, char **);
    EliInferenceContext * (*context_without_model)(const char *, char **);
    int (*context_holders)(const EliInferenceContext *);
    int (*sessions_live)(void);
    char * (*session_held)(void);
    int (*session_wait_in_next)(int);
    decltype(&eliza_inference_destroy) destroy;
    decltype(&eliza_inference_llm_stream_open) open;
    decltype(&eliza_inference_llm_stream_prefill) prefill;
    decltype(&eliza_inference_llm_stream_next) next;
    decltype(&eliza_inference_llm_stream_cancel) cancel;
    decltype(&eliza_inference_llm_stream_reset) reset;
    decltype(&eliza_inference_llm_stream_reset_keep) reset_keep;
    decltype(&eliza_inference_llm_stream_save_slot) save_slot;
    decltype(&eliza_inference_llm_stream_restore_slot) restore_slot;
    decltype(&eliza_inference_llm_stream_close) close;
};

constexpr int kSeamMaxTokens = 4;
constexpr size_t kSeamTokensCap = 16;
constexpr size_t kSeamTextCap = 256;
constexpr int kInNextTimeoutMs = 10000;

// The header's ELIZA_ERR_* codes by the names a step spells them with.
constexpr struct {
    const char * name;
    int code;
} kErrors[] = {
    {"NOT_IMPLEMENTED", ELIZA_ERR_NOT_IMPLEMENTED}, {"INVALID_ARG", ELIZA_ERR_INVALID_ARG},
    {"BUNDLE_INVALID", ELIZA_ERR_BUNDLE_INVALID},   {"FFI_FAULT", ELIZA_ERR_FFI_FAULT},
    {"OOM", ELIZA_ERR_OOM},                         {"ABI_MISMATCH", ELIZA_ERR_ABI_MISMATCH},
    {"CANCELLED", ELIZA_ERR_CANCELLED},
};

std::string status_name(int rc) {
    if (rc >= 0) return std::to_string(rc);
    for (const auto & e : kErrors) {
        if (e.code == rc) return e.name;
    }
    return std::to_string(rc);
}

bool parse_int(const std::string & word, long * out) {
    const size_t digits = word.rfind('-', 0) == 0 ? 1 : 0;
    if (word.size() <= digits || word.size() > 10 ||
        word.find_first_not_of("0123456789", digits) != std::string::npos) {
        return false;
    }
    *out = std::strtol(word.c_str(), nullptr, 10);
    return true;
}

std::vector<std::string> words_of(const std::string & s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

bool has_message(const std::string & call) {
    return call == "prefill" || call == "next" || call == "cancel-during-next" || call == "save_slot" ||
           call == "restore_slot";
}

struct SeamStep {
    std::string call;
    std::vector<long> args;
    std::string expect;         // as written
    bool error = false;         // the step expects a failure of this code...
    int code = 0;               // ...or this count
    std::string texts;          // "&&"-separated, for a failure
    std::vector<long> tokens;   // next: what it writes; held: what the fake holds
    bool has_text = false;
    std::string text;
    long drafted = 0;
    long accepted = 0;
};

// One "call -> expect" step; false with *why for one the table must not hold.
bool parse_seam_step(const std::string & raw, SeamStep & step, std::string * why) {
    const size_t arrow = raw.find("->");
    const std::vector<std::string> call = words_of(arrow == std::string::npos ? raw : raw.substr(0, arrow));
    step.expect = arrow == std::string::npos ? "" : trim(raw.substr(arrow + 2));
    if (call.empty() || step.expect.empty()) {
        *why = "step '" + trim(raw) + "' is not 'call -> expect'";
        return false;
    }
    step.call = call[0];
    for (size_t i = 1; i < call.size(); ++i) {
        long v = 0;
        if (!parse_int(call[i], &v)) {
            *why = "step '" + trim(raw) + "': '" + call[i] + "' is not an integer";
            return false;
        }
        step.args.push_back(v);
    }
    const std::string & c = step.call;
    const bool known = has_message(c) || c == "cancel" || c == "reset" || c == "reset_keep" || c == "held" ||
                       c == "close";
    const size_t arity = c == "prefill" ? step.args.size() : c == "reset_keep" ? 1 : 0;
    if (!known || step.args.size() != arity) {
        *why = "step '" + trim(raw) + "': unknown call, or the wrong number of arguments";
        return false;
    }
    const std::vector<std::string> expect = words_of(step.expect);
    if (c == "held") {
        for (const std::string & w : expect) {
            long v = 0;
            if (step.expect == "none") break;
            if (!parse_int(w, &v) || v < 0) {
                *why = "step '" + trim(raw) + "': held -> ids >= 0, or none";
                return false;
            }
            step.tokens.push_back(v);
        }
        return true;
    }
    if (c == "close") {
        if (step.expect != "closed") *why = "step '" + trim(raw) + "': close -> closed";
        return step.expect == "closed";
    }
    for (const auto & e : kErrors) {
        if (expect[0] == e.name) {
            step.error = true;
            step.code = e.code;
            step.texts = trim(step.expect.substr(expect[0].size()));
            if (!step.texts.empty() && !has_message(c)) {
                *why = "step '" + trim(raw) + "': " + c + " has no message to hold texts";
                return false;
            }
            return true;
        }
    }
    long status = 0;
    if (!parse_int(expect[0], &status) || status < 0) {
        *why = "step '" + trim(raw) + "': expect a count >= 0 or a status name";
        return false;
    }
    step.code = static_cast<int>(status);
    std::string key;
    std::vector<std::string> seen;
    for (size_t i = 1; i < expect.size(); ++i) {
        const std::string & w = expect[i];
        const bool is_key = (c == "next" || c == "cancel-during-next") &&
                            (w == "tokens" || w == "text" || w == "drafted" || w == "accepted");
        if (is_key && std::find(seen.begin(), seen.end(), w) == seen.end()) {
            key = w;
            seen.push_back(w);
            continue;
        }
        long v = 0;
        const bool number = parse_int(w, &v) && v >= 0;
        if (key == "tokens" && number) {
            step.tokens.push_back(v);
        } else if (key == "text" && !step.has_text) {
            step.has_text = true;
            step.text = w;
        } else if (key == "drafted" && number) {
            step.drafted = v;
            key.clear();
        } else if (key == "accepted" && number) {
            step.accepted = v;
            key.clear();
        } else {
            *why = "step '" + trim(raw) + "': cannot read '" + w + "'";
            return false;
        }
    }
    if (!key.empty() && key != "tokens" && !(key == "text" && step.has_text)) {
        *why = "step '" + trim(raw) + "': " + key + " without its value";
        return false;
    }
    return true;
}

// What a step observed.
struct Observed {
    int rc = 0;
    std::string message;
    std::vector<long> tokens;
    std::string text;
    long drafted = 0;
    long accepted = 0;
    bool has_held = false;  // false: no fake session open
    std::vector<long> held;
    bool closed = false;
};

std::string ids(const std::vector<long> & v) {
    std::string out;
    for (long id : v) out += (out.empty() ? "" : " ") + std::to_string(id);
    return out.empty() ? "none" : out;
}

// "" when the step observed what it expects, else why not (the host's SeamStep.judge).
std::string judge(const SeamStep & step, const Observed & got) {
    const std::string want = "want " + step.call + " -> " + step.expect;
    if (step.call == "held") {
        if (got.has_held && got.held == step.tokens) return "";
        return want + "; the fake holds " + (got.has_held ? ids(got.held) : "nothing (no fake session open)");
    }
    if (step.call == "close") {
        return got.closed ? "" : want + "; the session or the context's hold outlived the close";
    }
    const std::string said = "; got " + status_name(got.rc) + (got.message.empty() ? "" : " '" + got.message + "'");
    if (step.error) {
        if (got.rc != step.code) return want + said;
        if (has_message(step.call) && got.message.empty()) return want + "; the failure carries no message";
        std::string missing;
        if (!contains_all(got.message, step.texts, &missing)) {
            return want + "; the message lacks '" + missing + "'" + said;
        }
        return "";
    }
    if (got.rc != step.code || !got.message.empty()) return want + said;
    if (step.call == "next" || step.call == "cancel-during-next") {
        if (got.tokens != step.tokens || got.drafted != step.drafted || got.accepted != step.accepted ||
            (step.has_text && got.text != step.text)) {
            return want + "; got tokens " + ids(got.tokens) + " text '" + got.text + "' drafted " +
                   std::to_string(got.drafted) + " accepted " + std::to_string(got.accepted);
        }
    }
    return "";
}

// One case's context and stream, closed and destroyed whatever its steps did.
class SeamStream {
public:
    SeamStream(const SeamApi & api, EliInferenceContext * ctx) : api_(api), ctx_(ctx) {}
    ~SeamStream() {
        close();
        if (ctx_) api_.destroy(ctx_);
    }
    SeamStream(const SeamStream &) = delete;
    SeamStream & operator=(const SeamStream &) = delete;
    void close() {
        if (stream_) api_.close(stream_);
        stream_ = nullptr;
    }
    EliInferenceContext * ctx() const { return ctx_; }
    EliLlmStream * stream() const { return stream_; }
    void set_stream(EliLlmStream * s) { stream_ = s; }

private:
    const SeamApi & api_;
    EliInferenceContext * ctx_;
    EliLlmStream * stream_ = nullptr;
};

Observed seam_next(const SeamApi & api, const Kit & kit, EliLlmStream * stream) {
    Observed got;
    std::vector<int32_t> tokens(kSeamTokensCap);
    std::vector<char> text(kSeamTextCap, '\0');
    size_t n = 0;
    int32_t drafted = -1;
    int32_t accepted = -1;
    char * err = nullptr;
    got.rc = api.next(stream, tokens.data(), tokens.size(), &n, text.data(), text.size(), &drafted, &accepted, &err);
    got.message = owned(kit.free_string, err);
    for (size_t i = 0; i < n && i < tokens.size(); ++i) got.tokens.push_back(tokens[i]);
    got.text = text.data();
    got.drafted = drafted;
    got.accepted = accepted;
    return got;
}

// Runs one step; false with *why when the step could not even be carried out.
bool seam_step(const SeamApi & api, const Kit & kit, SeamStream & s, const SeamStep & step, const std::string & slot,
               Observed & got, std::string * why) {
    EliLlmStream * stream = s.stream();
    if (!stream) {
        *why = step.call + " after close";
        return false;
    }
    char * err = nullptr;
    const std::string & c = step.call;
    if (c == "prefill") {
        std::vector<int32_t> tokens(step.args.begin(), step.args.end());
        got.rc = api.prefill(stream, tokens.data(), tokens.size(), &err);
        got.message = owned(kit.free_string, err);
    } else if (c == "next") {
        got = seam_next(api, kit, stream);
    } else if (c == "cancel-during-next") {
        // next on a worker; this thread cancels once the fake reports the call blocked in it.
        std::thread worker;
        try {
            worker = std::thread([&] { got = seam_next(api, kit, stream); });
        } catch (const std::exception & e) {
            *why = std::string("cannot start the worker thread: ") + e.what();
            return false;
        }
        const bool in_next = api.session_wait_in_next(kInNextTimeoutMs) == 1;
        const int cancelled = api.cancel(stream);
        worker.join();
        if (!in_next) *why = "next never blocked in the fake: the cancel did not land mid-call";
        if (cancelled != ELIZA_OK) *why = "_cancel returned " + status_name(cancelled);
        if (!why->empty()) return false;
    } else if (c == "cancel") {
        got.rc = api.cancel(stream);
    } else if (c == "reset") {
        got.rc = api.reset(stream);
    } else if (c == "reset_keep") {
        got.rc = api.reset_keep(stream, static_cast<int32_t>(step.args[0]));
    } else if (c == "save_slot" || c == "restore_slot") {
        got.rc = (c == "save_slot" ? api.save_slot : api.restore_slot)(stream, slot.c_str(), &err);
        got.message = owned(kit.free_string, err);
    } else if (c == "held") {
        char * held = api.session_held();
        got.has_held = held != nullptr;
        for (const std::string & w : words_of(owned(kit.free_string, held))) got.held.push_back(std::atol(w.c_str()));
    } else if (c == "close") {
        const int live = api.sessions_live();
        s.close();
        char * held = api.session_held();
        const bool session_gone = held == nullptr && api.sessions_live() == live - 1;
        kit.free_string(held);
        got.closed = session_gone && api.context_holders(s.ctx()) == 1;
    }
    return true;
}

// A private directory for the cases' slot files, removed with them.
class ScratchDir {
public:
    ScratchDir() {
        const char * tmp = std::getenv("TMPDIR");
        std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/case_runner-seam-XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (mkdtemp(buf.data())) path_ = buf.data();
    }
    ~ScratchDir() {
        if (!path_.empty()) rmdir(path_.c_str());
    }
    ScratchDir(const ScratchDir &) = delete;
    ScratchDir & operator=(const ScratchDir &) = delete;
    const std::string & path() const { return path_; }

private:
    std::string path_;
};

int run_seam(void * handle, const Kit & kit, const std::string & seam_path, Tally & tally) {
    SeamApi api{};
    if (!resolve(handle, "eliza_testkit_register_fake_session", api.register_fake_session) ||
        !resolve(handle, "eliza_testkit_context_without_model", api.context_without_model) ||
        !resolve(handle, "eliza_testkit_context_holders", api.context_holders) ||
        !resolve(handle, "eliza_testkit_sessions_live", api.sessions_live) ||
        !resolve(handle, "eliza_testkit_session_held", api.session_held) ||
        !resolve(handle, "eliza_testkit_session_wait_in_next", api.session_wait_in_next) ||
        !resolve(handle, "eliza_inference_destroy", api.destroy) ||
        !resolve(handle, "eliza_inference_llm_stream_open", api.open) ||
        !resolve(handle, "eliza_inference_llm_stream_prefill", api.prefill) ||
        !resolve(handle, "eliza_inference_llm_stream_next", api.next) ||
        !resolve(handle, "eliza_inference_llm_stream_cancel", api.cancel) ||
        !resolve(handle, "eliza_inference_llm_stream_reset", api.reset) ||
        !resolve(handle, "eliza_inference_llm_stream_reset_keep", api.reset_keep) ||
        !resolve(handle, "eliza_inference_llm_stream_save_slot", api.save_slot) ||
        !resolve(handle, "eliza_inference_llm_stream_restore_slot", api.restore_slot) ||
        !resolve(handle, "eliza_inference_llm_stream_close", api.close)) {
        return 2;
    }
    std::vector<std::string> lines;
    if (!read_lines(seam_path, lines)) return 2;
    const ScratchDir scratch;
    if (scratch.path().empty()) {
        std::fprintf(stderr, "case_runner: cannot create a directory for the seam cases' slot files\n");
        return 2;
    }
    for (const std::string & line : lines) {
        // name | fakes | env | session | steps
        const std::vector<std::string> f = split(line, " | ");
        const std::string name = f.empty() ? "" : "seam:" + trim(f[0]);
        bool env_set = false;
        std::string env;
        std::vector<SeamStep> steps;
        std::string why;
        if (f.size() != 5 || !parse_env(f[2], &env_set, &env)) {
            std::fprintf(stderr, "case_runner: %s: not 5 fields with an env of - or \"...\": %s\n",
                         seam_path.c_str(), line.c_str());
            return 2;
        }
        for (const std::string & raw : split(f[4], ";")) {
            steps.emplace_back();
            if (!parse_seam_step(raw, steps.back(), &why)) {
                std::fprintf(stderr, "case_runner: %s: case %s: %s\n", seam_path.c_str(), name.c_str(), why.c_str());
                return 2;
            }
        }
        kit.clear();
        const std::string fakes = trim(f[1]);
        if (fakes == "-") {
            std::fprintf(stderr, "case_runner: %s: case %s: a seam case needs a fake to serve its stream\n",
                         seam_path.c_str(), name.c_str());
            return 2;
        }
        for (const std::string & item : split(fakes, ",")) {
            const std::vector<std::string> parts = split(trim(item), "/");
            char * err = nullptr;
            const int rc = parts.size() != 4 ? ELIZA_ERR_INVALID_ARG
                                             : api.register_fake_session(
                                                   parts[0].c_str(), std::atoi(parts[1].c_str()),
                                                   std::atoi(parts[2].c_str()), std::atoi(parts[3].c_str()),
                                                   trim(f[3]).c_str(), &err);
            if (rc < 0) {
                const std::string said = owned(kit.free_string, err);
                std::fprintf(stderr, "case_runner: %s: case %s: fake '%s': %s\n", seam_path.c_str(), name.c_str(),
                             trim(item).c_str(), said.empty() ? "not name/available/can_serve/rank" : said.c_str());
                return 2;
            }
        }
        char * err = nullptr;
        SeamStream s(api, api.context_without_model("/bundle", &err));
        if (!s.ctx()) {
            tally.fail(name, "no context: " + owned(kit.free_string, err));
            continue;
        }
        eliza_llm_stream_config_t cfg{};
        cfg.max_tokens = kSeamMaxTokens;
        cfg.top_p = 1.0f;
        cfg.repeat_penalty = 1.0f;
        if (env_set) {
            setenv("ELIZA_LLM_BACKEND", env.c_str(), 1);
        } else {
            unsetenv("ELIZA_LLM_BACKEND");
        }
        s.set_stream(api.open(s.ctx(), &cfg, &err));
        unsetenv("ELIZA_LLM_BACKEND");
        if (!s.stream()) {
            tally.fail(name, "_open did not reach a fake: " + owned(kit.free_string, err));
            continue;
        }
        const std::string slot = scratch.path() + "/slot";
        std::string failure;
        for (size_t i = 0; i < steps.size() && failure.empty(); ++i) {
            Observed got;
            std::string broke;
            failure = seam_step(api, kit, s, steps[i], slot, got, &broke) ? judge(steps[i], got) : broke;
            if (!failure.empty()) failure = "step " + std::to_string(i + 1) + ": " + failure;
        }
        s.close();
        std::remove(slot.c_str());
        if (failure.empty()) {
            tally.ok(name);
        } else {
            tally.fail(name, failure);
        }
    }
    return 0;
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
                 "usage: case_runner selector --kit LIB --cases FILE [--seam-cases FILE]\n"
                 "       case_runner fallthrough --library LIB --plan FILE --prompts FILE [--max-tokens N]\n");
    return 2;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) return usage();
    const std::string mode = argv[1];
    std::string kit, cases, seam_cases, library, plan, prompts;
    int max_tokens = 16;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const std::string value = argv[i + 1];
        if (flag == "--kit") kit = value;
        else if (flag == "--cases") cases = value;
        else if (flag == "--seam-cases") seam_cases = value;
        else if (flag == "--library") library = value;
        else if (flag == "--plan") plan = value;
        else if (flag == "--prompts") prompts = value;
        else if (flag == "--max-tokens") max_tokens = std::atoi(value.c_str());
        else return usage();
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (mode == "selector" && !kit.empty() && !cases.empty()) {
        if (seam_cases.empty()) {
            const size_t slash = cases.rfind('/');
            seam_cases = (slash == std::string::npos ? std::string() : cases.substr(0, slash + 1)) + "seam.cases";
        }
        return run_selector(kit, cases, seam_cases);
    }
    if (mode == "fallthrough" && !library.empty() && !plan.empty() && !prompts.empty()) {
        return run_fallthrough(library, plan, prompts, max_tokens);
    }
    return usage();
}
