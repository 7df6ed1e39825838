'use strict';
// The libelizainference C ABI as a Node program sees it, through koffi: the released ABI
// (native/include/eliza-inference-ffi.h, ABI version 9) written down here the way a
// shipped Node binding carries it, not read from the header at run time. A library whose
// header changed a status, a layout or a prototype without bumping the version must
// therefore fail against this file: that is what a consumer check is for.
//
// Prototypes follow the header. Where the header has `char *` for bytes the library
// writes or allocates, this file says `uint8_t *` or `void *`: the same pointer in the
// same register, but koffi then hands over raw memory instead of decoding a JS string
// leniently, so every message is decoded strictly (decodeStrict) by the caller.

const fs = require('fs');
const os = require('os');
const path = require('path');

const ABI_VERSION = '9';

// The header's status constants (native/abi/abi-9.constants is the released list).
const STATUS = Object.freeze({
    ELIZA_OK: 0,
    ELIZA_ERR_NOT_IMPLEMENTED: -1,
    ELIZA_ERR_INVALID_ARG: -2,
    ELIZA_ERR_BUNDLE_INVALID: -3,
    ELIZA_ERR_FFI_FAULT: -4,
    ELIZA_ERR_OOM: -5,
    ELIZA_ERR_ABI_MISMATCH: -6,
    ELIZA_ERR_CANCELLED: -7,
});

// eliza_llm_stream_config_t with 64-bit pointers: size and offsets the header publishes.
const CONFIG_LAYOUT_64 = Object.freeze({
    size: 64,
    offsets: {
        max_tokens: 0, temperature: 4, top_p: 8, top_k: 12, repeat_penalty: 16, slot_id: 20,
        prompt_cache_key: 24, draft_min: 32, draft_max: 36, mtp_drafter_path: 40, gbnf_grammar: 48,
        disable_thinking: 56,
    },
});

// Exit statuses shared with the JNI consumer (docs/consumers.md).
const EXIT = Object.freeze({ passed: 0, failed: 1, usage: 2, abi_mismatch: 3, unloadable: 4, runtime_missing: 5 });

class RuntimeMissing extends Error {}

// koffi from the first place that has it: ELIZA_NODE_CONSUMER_MODULES, this folder's
// node_modules, then where ci/setup.sh installs it (the cache's tools/node-consumer).
function cacheDir() {
    if (process.env.ELIZA_CACHE_DIR) return path.resolve(process.env.ELIZA_CACHE_DIR);
    const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
    return path.join(base, 'eliza-inference');
}

function koffiCandidates() {
    const dirs = [];
    if (process.env.ELIZA_NODE_CONSUMER_MODULES) dirs.push(path.resolve(process.env.ELIZA_NODE_CONSUMER_MODULES));
    dirs.push(path.join(__dirname, 'node_modules'));
    dirs.push(path.join(cacheDir(), 'tools', 'node-consumer', 'node_modules'));
    return dirs;
}

function loadKoffi() {
    const tried = [];
    for (const dir of koffiCandidates()) {
        const entry = path.join(dir, 'koffi');
        tried.push(entry);
        if (!fs.existsSync(path.join(entry, 'package.json'))) continue;
        try {
            return require(entry);
        } catch (err) {
            throw new RuntimeMissing(`koffi at ${entry} does not load (${err.message}); ` +
                'reinstall it: bash ci/setup.sh (npm ci of native/consumers/node)');
        }
    }
    throw new RuntimeMissing(`koffi is not installed (looked in ${tried.join(', ')}): ` +
        'run bash ci/setup.sh, which runs npm ci for native/consumers/node into the cache');
}

const koffi = loadKoffi();
// Synchronous calls run on koffi's own stack (2 MiB by default); a decode granted one
// thread computes on the calling thread, so give it what a native thread would have.
// koffi refuses this once a library is loaded, which in this process happens only below.
koffi.config({ ...koffi.config(), sync_stack_size: 8 * 1024 * 1024 });

const EliInferenceContext = koffi.opaque('EliInferenceContext');
const EliLlmStream = koffi.opaque('EliLlmStream');
const ContextPtr = koffi.pointer('EliInferenceContextPtr', EliInferenceContext);
const StreamPtr = koffi.pointer('EliLlmStreamPtr', EliLlmStream);
const StreamConfig = koffi.struct('eliza_llm_stream_config_t', {
    max_tokens: 'int32_t',
    temperature: 'float',
    top_p: 'float',
    top_k: 'int32_t',
    repeat_penalty: 'float',
    slot_id: 'int32_t',
    prompt_cache_key: 'const char *',
    draft_min: 'int32_t',
    draft_max: 'int32_t',
    mtp_drafter_path: 'const char *',
    gbnf_grammar: 'const char *',
    disable_thinking: 'int32_t',
});

// Everything but eliza_inference_abi_version, which is resolved (and checked) first so a
// library of another version is refused before any other symbol is looked up.
const PROTOTYPES = {
    free_string: 'void eliza_inference_free_string(void *s)',
    create: 'EliInferenceContextPtr eliza_inference_create(const char *bundle_dir, _Out_ void **out_error)',
    destroy: 'void eliza_inference_destroy(EliInferenceContextPtr ctx)',
    tokenize_supported: 'int eliza_inference_tokenize_supported(void)',
    tokenize: 'int eliza_inference_tokenize(EliInferenceContextPtr ctx, const uint8_t *text, size_t len, ' +
        'int add_special, int parse_special, _Out_ void **out_tokens, _Out_ size_t *out_n, _Out_ void **out_error)',
    detokenize: 'int eliza_inference_detokenize(EliInferenceContextPtr ctx, const int32_t *tokens, size_t n, ' +
        'int remove_special, int unparse_special, _Out_ void **out_text, _Out_ size_t *out_len, _Out_ void **out_error)',
    free_tokens: 'void eliza_inference_free_tokens(void *tokens)',
    stream_supported: 'int eliza_inference_llm_stream_supported(void)',
    open: 'EliLlmStreamPtr eliza_inference_llm_stream_open(EliInferenceContextPtr ctx, ' +
        'const eliza_llm_stream_config_t *cfg, _Out_ void **out_error)',
    prefill: 'int eliza_inference_llm_stream_prefill(EliLlmStreamPtr stream, const int32_t *token_ids, size_t n, ' +
        '_Out_ void **out_error)',
    next: 'int eliza_inference_llm_stream_next(EliLlmStreamPtr stream, int32_t *tokens_out, size_t tokens_cap, ' +
        '_Out_ size_t *num_tokens_out, uint8_t *text_out, size_t text_cap, _Out_ int32_t *drafter_drafted_out, ' +
        '_Out_ int32_t *drafter_accepted_out, _Out_ void **out_error)',
    cancel: 'int eliza_inference_llm_stream_cancel(EliLlmStreamPtr stream)',
    reset: 'int eliza_inference_llm_stream_reset(EliLlmStreamPtr stream)',
    reset_keep: 'int eliza_inference_llm_stream_reset_keep(EliLlmStreamPtr stream, int32_t n_keep)',
    save_slot: 'int eliza_inference_llm_stream_save_slot(EliLlmStreamPtr stream, const char *filename, ' +
        '_Out_ void **out_error)',
    restore_slot: 'int eliza_inference_llm_stream_restore_slot(EliLlmStreamPtr stream, const char *filename, ' +
        '_Out_ void **out_error)',
    close: 'void eliza_inference_llm_stream_close(EliLlmStreamPtr stream)',
};

class LoadError extends Error {}
class AbiMismatch extends Error {
    constructor(version, message) {
        super(message);
        this.version = version;
    }
}

// The NUL-terminated bytes at ptr (a BigInt), copied; capped so a missing NUL cannot run away.
function cBytes(ptr, cap = 1 << 20) {
    const out = [];
    for (let i = 0n; out.length < cap; i += 1n) {
        const b = koffi.decode.uint8(ptr + i);
        if (b === 0) break;
        out.push(b);
    }
    return Uint8Array.from(out);
}

const STRICT = new TextDecoder('utf-8', { fatal: true });

// {text, utf8_strict}: the bytes as a string when they are valid UTF-8, else null text.
function decodeStrict(bytes) {
    try {
        return { text: STRICT.decode(bytes), utf8_strict: true };
    } catch (_) {
        return { text: null, utf8_strict: false };
    }
}

// The ABI of the library at libraryPath. open() throws LoadError (cannot load, a symbol is
// missing) or AbiMismatch (another ABI version) with one message.
class Library {
    constructor(libraryPath, lib, fns, version) {
        this.path = libraryPath;
        this.lib = lib;
        this.fn = fns;
        this.version = version;
    }

    static open(libraryPath) {
        let lib;
        try {
            lib = koffi.load(libraryPath);
        } catch (err) {
            throw new LoadError(`cannot load library '${libraryPath}': ${err.message}`);
        }
        let abiVersion;
        try {
            abiVersion = lib.func('const char *eliza_inference_abi_version(void)');
        } catch (err) {
            throw new LoadError(`'${libraryPath}' has no eliza_inference_abi_version: not a libelizainference (${err.message})`);
        }
        const version = abiVersion();
        if (version !== ABI_VERSION) {
            throw new AbiMismatch(version, `library '${libraryPath}' reports ABI version ${JSON.stringify(version)}; ` +
                `this consumer is written for ABI ${ABI_VERSION} (ELIZA_INFERENCE_ABI_VERSION): ` +
                'use a library and a consumer of the same ABI version');
        }
        const fns = {};
        for (const [name, proto] of Object.entries(PROTOTYPES)) {
            try {
                fns[name] = lib.func(proto);
            } catch (err) {
                throw new LoadError(`'${libraryPath}' (ABI ${version}) lacks a function of the ABI: ${proto} (${err.message})`);
            }
        }
        return new Library(libraryPath, lib, fns, version);
    }

    // The message of *out_error (decoded strictly), freed; null when none was set.
    takeError(errOut) {
        const ptr = errOut[0];
        errOut[0] = null;
        if (!ptr) return null;
        const bytes = cBytes(ptr);
        this.fn.free_string(ptr);
        return { ...decodeStrict(bytes), bytes: bytes.length, hex: Buffer.from(bytes).toString('hex') };
    }
}

// A config of the header's struct: greedy unless overridden.
function streamConfig(overrides = {}) {
    return {
        max_tokens: 16, temperature: 0, top_p: 1, top_k: 0, repeat_penalty: 1, slot_id: 0,
        prompt_cache_key: null, draft_min: 0, draft_max: 0, mtp_drafter_path: null, gbnf_grammar: null,
        disable_thinking: 0, ...overrides,
    };
}

function configLayout() {
    const offsets = {};
    for (const field of Object.keys(CONFIG_LAYOUT_64.offsets)) offsets[field] = koffi.offsetof(StreamConfig, field);
    return { size: koffi.sizeof(StreamConfig), offsets, pointer_size: koffi.sizeof('void *') };
}

module.exports = {
    ABI_VERSION, STATUS, CONFIG_LAYOUT_64, EXIT, Library, LoadError, AbiMismatch, RuntimeMissing,
    streamConfig, configLayout, decodeStrict, cBytes, koffi, StreamPtr, koffiVersion: koffi.version,
};
