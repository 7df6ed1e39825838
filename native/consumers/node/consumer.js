#!/usr/bin/env node
'use strict';
// The Node consumer of libelizainference: drives the whole lifecycle of the C ABI through
// koffi and writes one JSON result (docs/consumers.md describes the command line, the
// steps, the result and the exit statuses; the JNI consumer takes the same ones).
//
//   node native/consumers/node/consumer.js --library LIB --bundle DIR --prompts FILE
//        --out RESULT.json [--max-tokens N] [--work DIR] [--cancel-after N] [--cancel-max-tokens N]

const fs = require('fs');
const os = require('os');
const path = require('path');

const USAGE = 'usage: consumer.js --library LIB --bundle DIR --prompts FILE --out FILE|- ' +
    '[--max-tokens N] [--work DIR] [--cancel-after N] [--cancel-max-tokens N]';
const EXIT = { passed: 0, failed: 1, usage: 2, abi_mismatch: 3, unloadable: 4, runtime_missing: 5 };

function parseArgs(argv) {
    const opts = { maxTokens: 16, cancelAfter: 4, cancelMaxTokens: 0, work: null };
    const names = {
        '--library': 'library', '--bundle': 'bundle', '--prompts': 'prompts', '--out': 'out', '--work': 'work',
        '--max-tokens': 'maxTokens', '--cancel-after': 'cancelAfter', '--cancel-max-tokens': 'cancelMaxTokens',
    };
    for (let i = 0; i < argv.length; i += 2) {
        const key = names[argv[i]];
        if (!key || i + 1 >= argv.length) throw new Error(`unknown or incomplete option '${argv[i]}'`);
        const value = argv[i + 1];
        if (['maxTokens', 'cancelAfter', 'cancelMaxTokens'].includes(key)) {
            if (!/^[0-9]+$/.test(value)) throw new Error(`${argv[i]} takes a non-negative integer, not '${value}'`);
            opts[key] = Number(value);
        } else {
            opts[key] = value;
        }
    }
    for (const required of ['library', 'bundle', 'prompts', 'out']) {
        if (!opts[required]) throw new Error(`--${required} is required`);
    }
    if (opts.maxTokens < 1) throw new Error('--max-tokens must be at least 1');
    if (opts.cancelAfter < 1) throw new Error('--cancel-after must be at least 1');
    return opts;
}

// The bench tools' prompt format (native/tools/bench_common.cpp): one prompt a line, "#"
// comments and blank lines skipped, "\n", "\t" and "\<c>" escapes.
function readPrompts(file) {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(fs.readFileSync(file));
    const prompts = [];
    for (let line of text.split('\n')) {
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '' || line[0] === '#') continue;
        let prompt = '';
        for (let i = 0; i < line.length; ++i) {
            if (line[i] === '\\' && i + 1 < line.length) {
                const c = line[++i];
                prompt += c === 'n' ? '\n' : c === 't' ? '\t' : c;
            } else {
                prompt += line[i];
            }
        }
        prompts.push(prompt);
    }
    if (prompts.length === 0) throw new Error(`prompt file '${file}' holds no prompts`);
    return prompts;
}

class StepFailure extends Error {}

function equalArrays(a, b) {
    return a.length === b.length && a.every((v, i) => v === b[i]);
}

class Run {
    constructor(opts, abi) {
        this.opts = opts;
        this.abi = abi;
        this.result = {
            format: 'eliza-consumer/1',
            consumer: 'node',
            runtime: `node ${process.version}, koffi ${abi ? abi.koffiVersion : 'absent'}`,
            library: path.resolve(opts.library),
            bundle: path.resolve(opts.bundle),
            prompts_file: path.resolve(opts.prompts),
            max_tokens: opts.maxTokens,
            abi: { expected: abi ? abi.ABI_VERSION : null, library: null },
            passed: false,
            exit_status: null,
            steps: [],
            prompts: [],
            cancel: null,
            errors: [],
        };
    }

    record(step, ok, detail) {
        this.result.steps.push({ step, ok, detail });
        // With --out - the result owns stdout; the progress lines go to stderr then.
        const log = this.opts.out === '-' ? process.stderr : process.stdout;
        log.write(`${ok ? 'ok' : 'FAIL'} ${step}${detail ? `: ${detail}` : ''}\n`);
        return ok;
    }

    // Runs fn (returns a detail string, throws StepFailure) as one step; false when it failed.
    step(name, fn) {
        try {
            return this.record(name, true, fn() || '');
        } catch (err) {
            if (!(err instanceof StepFailure)) return this.record(name, false, `unexpected error: ${err.stack || err}`);
            return this.record(name, false, err.message);
        }
    }

    skip(name, why) {
        return this.record(name, false, `not run: ${why}`);
    }
}

// --- the ABI, step by step ------------------------------------------------------------------

const TOKENS_CAP = 16;
const TEXT_CAP = 4096;

function check(lib, rc, errOut, what) {
    const message = lib.takeError(errOut);
    if (rc < 0) throw new StepFailure(`${what} returned ${rc}: ${message ? message.text ?? message.hex : '(no message)'}`);
    return rc;
}

function tokenize(lib, ctx, text, addSpecial) {
    const bytes = Buffer.from(text, 'utf8');
    const out = [null];
    const n = [0];
    const err = [null];
    const rc = lib.fn.tokenize(ctx, bytes, bytes.length, addSpecial ? 1 : 0, 0, out, n, err);
    check(lib, rc, err, 'eliza_inference_tokenize');
    const count = Number(n[0]);
    const ids = count > 0 ? Array.from(lib.abi.koffi.decode(out[0], 'int32_t', count)) : [];
    lib.fn.free_tokens(out[0]);
    return ids;
}

function detokenize(lib, ctx, tokens, removeSpecial) {
    const ids = Int32Array.from(tokens);
    const out = [null];
    const n = [0];
    const err = [null];
    const rc = lib.fn.detokenize(ctx, ids, ids.length, removeSpecial ? 1 : 0, 0, out, n, err);
    check(lib, rc, err, 'eliza_inference_detokenize');
    const len = Number(n[0]);
    const bytes = len > 0 ? Buffer.from(lib.abi.koffi.decode(out[0], 'uint8_t', len)) : Buffer.alloc(0);
    lib.fn.free_string(out[0]);
    return bytes;
}

function openStream(lib, ctx, overrides) {
    const err = [null];
    const stream = lib.fn.open(ctx, lib.abi.streamConfig(overrides), err);
    const message = lib.takeError(err);
    if (!stream) throw new StepFailure(`eliza_inference_llm_stream_open failed: ${message ? message.text ?? message.hex : '(no message)'}`);
    return stream;
}

function prefill(lib, stream, tokens) {
    const err = [null];
    const ids = Int32Array.from(tokens);
    return { rc: lib.fn.prefill(stream, ids, ids.length, err), message: lib.takeError(err) };
}

// One eliza_inference_llm_stream_next: {rc, tokens, text (bytes), message}.
function nextStep(lib, stream, buffers) {
    const n = [0];
    const drafted = [0];
    const accepted = [0];
    const err = [null];
    const rc = lib.fn.next(stream, buffers.tokens, TOKENS_CAP, n, buffers.text, TEXT_CAP, drafted, accepted, err);
    const message = lib.takeError(err);
    const count = rc >= 0 ? Number(n[0]) : 0;
    const end = buffers.text.indexOf(0);
    return {
        rc,
        tokens: Array.from(buffers.tokens.subarray(0, count)),
        text: Buffer.from(buffers.text.subarray(0, rc >= 0 && end >= 0 ? end : 0)),
        message,
    };
}

function newBuffers() {
    return { tokens: new Int32Array(TOKENS_CAP), text: new Uint8Array(TEXT_CAP) };
}

// Steps until the final one (or limit steps): {tokens, text, final_status, steps}.
function generate(lib, stream, limit = 100000) {
    const buffers = newBuffers();
    const tokens = [];
    const texts = [];
    for (let steps = 1; steps <= limit; ++steps) {
        const s = nextStep(lib, stream, buffers);
        if (s.rc < 0) throw new StepFailure(`eliza_inference_llm_stream_next returned ${s.rc}: ${s.message ? s.message.text ?? s.message.hex : '(no message)'}`);
        tokens.push(...s.tokens);
        texts.push(s.text);
        if (s.rc === 1) return { tokens, text: Buffer.concat(texts), final_status: 1, steps };
    }
    return { tokens, text: Buffer.concat(texts), final_status: 0, steps: limit };
}

function messageOf(m) {
    return m ? (m.text ?? `(not UTF-8: ${m.hex})`) : '(no message)';
}

// One error path: the status (null where the function returns a handle), the message,
// and whether it decodes strictly as UTF-8.
function errorCase(run, name, fn, expected) {
    let entry;
    try {
        entry = fn();
    } catch (err) {
        run.record(`error_${name}`, false, `unexpected error: ${err.stack || err}`);
        return;
    }
    const message = entry.message;
    const record = {
        case: name,
        function: entry.function,
        status: entry.status,
        expected_status: expected.status,
        message: message ? message.text : null,
        utf8_strict: message ? message.utf8_strict : false,
        message_bytes: message ? message.bytes : 0,
    };
    if (message && !message.utf8_strict) record.message_hex = message.hex;
    run.result.errors.push(record);
    const problems = [];
    if (entry.status !== expected.status) problems.push(`status ${entry.status}, expected ${expected.status}`);
    if (!message) problems.push('no message');
    else if (!message.utf8_strict) problems.push('the message is not valid UTF-8');
    else if (!message.text.includes(expected.contains)) problems.push(`the message lacks '${expected.contains}': ${message.text}`);
    run.record(`error_${name}`, problems.length === 0,
        problems.length ? problems.join('; ') : `${entry.function}: ${entry.status === null ? 'NULL' : entry.status}, ${message.bytes} bytes of UTF-8`);
}

async function cancelFromWorker(run, lib, ctx, prompt, expected) {
    const { Worker } = require('worker_threads');
    const opts = run.opts;
    const stream = openStream(lib, ctx, { max_tokens: opts.cancelMaxTokens });
    const shared = new SharedArrayBuffer(5 * 4);
    const progress = new Int32Array(shared);
    const worker = new Worker(path.join(__dirname, 'cancel-worker.js'), {
        workerData: { library: lib.path, stream, shared, after: opts.cancelAfter, timeoutMs: 120000 },
    });
    const messages = [];
    let failed = null;
    const exited = new Promise((resolve) => {
        worker.on('message', (m) => messages.push(m));
        worker.on('error', (e) => { failed = e; });
        worker.on('exit', resolve);
    });
    const ready = await new Promise((resolve) => {
        const poll = () => (messages.some((m) => m.ready) ? resolve(true) : failed || messages.some((m) => m.why)
            ? resolve(false) : setTimeout(poll, 5));
        poll();
    });
    const info = {
        thread: 'worker_threads Worker',
        prompt_index: prompt.index,
        max_tokens: opts.cancelMaxTokens,
        cancel_after_steps: opts.cancelAfter,
        steps_before_cancel: 0,
        steps_started_after_cancel: 0,
        tokens_before_cancel: [],
        cancel_status: null,
        step_status: null,
        message: null,
        utf8_strict: null,
        stopped_early: false,
        final_before_cancel: false,
    };
    run.result.cancel = info;
    const state = { stream, stoppedEarly: false };
    if (!ready) {
        await exited;
        run.record('cancel_from_thread', false, `the worker did not start: ${failed || JSON.stringify(messages)}`);
        lib.fn.close(stream);
        return state;
    }
    const p = prefill(lib, stream, prompt.prompt_tokens);
    const buffers = newBuffers();
    let last = null;
    if (p.rc < 0) {
        last = { rc: p.rc, message: p.message };
    } else {
        // Synchronous on purpose: the main thread stays inside the library while the
        // worker cancels; the worker reads progress through shared memory, not messages.
        for (let i = 0; i < 100000; ++i) {
            const cancelReturned = Atomics.load(progress, 1) === 1;
            const s = nextStep(lib, stream, buffers);
            if (s.rc < 0) {
                last = s;
                break;
            }
            if (cancelReturned) info.steps_started_after_cancel += 1;
            info.tokens_before_cancel.push(...s.tokens);
            info.steps_before_cancel += 1;
            Atomics.store(progress, 0, info.steps_before_cancel);
            Atomics.notify(progress, 0);
            if (s.rc === 1) {
                info.final_before_cancel = true;
                break;
            }
        }
    }
    Atomics.store(progress, 4, 1);
    Atomics.notify(progress, 0);
    await exited;  // the worker holds the stream handle: never close it under the worker
    const said = messages.find((m) => 'cancelled' in m) || { cancelled: false, why: String(failed) };
    info.cancel_status = said.cancelled ? said.status : null;
    if (last) {
        info.step_status = last.rc;
        info.message = last.message ? last.message.text : null;
        info.utf8_strict = last.message ? last.message.utf8_strict : null;
    }
    const S = lib.abi.STATUS;
    info.stopped_early = Boolean(said.cancelled && last && last.rc === S.ELIZA_ERR_CANCELLED && !info.final_before_cancel);
    state.stoppedEarly = info.stopped_early;
    const problems = [];
    if (!said.cancelled) problems.push(`the worker did not cancel: ${said.why}`);
    else if (said.status !== S.ELIZA_OK) problems.push(`cancel returned ${said.status}`);
    if (!last) problems.push('the generation ended without ELIZA_ERR_CANCELLED');
    else if (last.rc !== S.ELIZA_ERR_CANCELLED) problems.push(`the step failed with ${last.rc}, not ELIZA_ERR_CANCELLED: ${messageOf(last.message)}`);
    else if (!last.message || !last.message.utf8_strict) problems.push('the cancelled step has no strict UTF-8 message');
    if (info.steps_started_after_cancel > 0) problems.push(`${info.steps_started_after_cancel} step(s) started after cancel returned and still ran`);
    const n = Math.min(info.tokens_before_cancel.length, expected.length);
    if (!equalArrays(info.tokens_before_cancel.slice(0, n), expected.slice(0, n))) {
        problems.push('the tokens before the cancel are not the greedy run\'s');
    }
    run.record('cancel_from_thread', problems.length === 0, problems.length ? problems.join('; ')
        : `worker cancelled after ${said.seen} steps; the main thread's next step returned ELIZA_ERR_CANCELLED ` +
          `after ${info.steps_before_cancel} steps`);
    return state;
}

async function lifecycle(run, lib, prompts) {
    const opts = run.opts;
    const work = opts.work ? path.resolve(opts.work) : fs.mkdtempSync(path.join(os.tmpdir(), 'eliza-node-consumer-'));
    fs.mkdirSync(work, { recursive: true });

    run.step('layout', () => {
        const got = lib.abi.configLayout();
        if (got.pointer_size !== 8) return `pointer size ${got.pointer_size}: the 64-bit layout does not apply`;
        const want = lib.abi.CONFIG_LAYOUT_64;
        if (got.size !== want.size) throw new StepFailure(`sizeof(eliza_llm_stream_config_t) ${got.size}, header ${want.size}`);
        for (const [field, offset] of Object.entries(want.offsets)) {
            if (got.offsets[field] !== offset) throw new StepFailure(`${field} at ${got.offsets[field]}, header ${offset}`);
        }
        return `${got.size} bytes, every offset as the header publishes`;
    });
    run.step('supported', () => {
        const t = lib.fn.tokenize_supported();
        const s = lib.fn.stream_supported();
        if (t !== 1 || s !== 1) throw new StepFailure(`tokenize_supported ${t}, llm_stream_supported ${s}`);
        return 'tokenize and streaming supported';
    });

    let ctx = null;
    run.step('create', () => {
        const err = [null];
        ctx = lib.fn.create(run.result.bundle, err);
        const message = lib.takeError(err);
        if (!ctx) throw new StepFailure(`eliza_inference_create returned NULL: ${messageOf(message)}`);
        if (message) throw new StepFailure(`eliza_inference_create succeeded but set *out_error: ${messageOf(message)}`);
        return `context for ${run.result.bundle}`;
    });
    const lifecycleSteps = ['tokenize', 'detokenize', 'stream_open', 'prefill', 'next_until_final', 'cancel_from_thread',
        'cancelled_stays_cancelled', 'reset', 'reset_keep', 'save_slot', 'restore_slot', 'error_bad_config',
        'error_bad_token', 'error_missing_slot', 'close', 'destroy'];
    if (!ctx) {
        for (const name of lifecycleSteps) run.skip(name, 'create failed');
    } else {
        await withContext(run, lib, ctx, prompts, work);
    }

    errorCase(run, 'missing_bundle', () => {
        const missing = path.join(work, 'no-such-bundle-ünïcødé-東京-🙂');
        const err = [null];
        const handle = lib.fn.create(missing, err);
        if (handle) lib.fn.destroy(handle);
        return { function: 'eliza_inference_create', status: handle ? 'handle' : null, message: lib.takeError(err) };
    }, { status: null, contains: 'does not exist' });

    errorCase(run, 'corrupt_model', () => {
        // A refused GGUF under a long path of three-byte characters: llama.cpp's error line
        // names the path and the library keeps at most 400 bytes of such a line, so the
        // cut falls inside the path. Three paddings put it on each byte of a character.
        let entry = null;
        for (let pad = 0; pad < 3; ++pad) {
            const dir = path.join(work, `corrupt-${pad}`, '€'.repeat(60), 'x'.repeat(pad) + '東'.repeat(60));
            fs.mkdirSync(path.join(dir, 'text'), { recursive: true });
            fs.writeFileSync(path.join(dir, 'text', 'model.gguf'), Buffer.concat([Buffer.from('NOTAGGUF'), Buffer.alloc(56)]));
            const err = [null];
            const handle = lib.fn.create(dir, err);
            if (handle) lib.fn.destroy(handle);
            const message = lib.takeError(err);
            entry = { function: 'eliza_inference_create', status: handle ? 'handle' : null, message };
            if (handle || !message || !message.utf8_strict) break;
        }
        return entry;
    }, { status: null, contains: 'cannot load text model' });

    if (!opts.work) fs.rmSync(work, { recursive: true, force: true });
}

async function withContext(run, lib, ctx, prompts, work) {
    const S = lib.abi.STATUS;
    const opts = run.opts;
    let bos = null;
    run.step('tokenize', () => {
        for (const [index, prompt] of prompts.entries()) {
            const ids = tokenize(lib, ctx, prompt, true);
            if (ids.length === 0) throw new StepFailure(`prompt ${index} tokenized to nothing`);
            run.result.prompts.push({ index, prompt, prompt_tokens: ids, tokens: [], text_hex: '', final_status: null });
        }
        bos = tokenize(lib, ctx, '', true);
        if (bos.length !== 1) throw new StepFailure(`"" with add_special gave ${bos.length} tokens, not one BOS`);
        return `${prompts.length} prompts; BOS ${bos[0]}`;
    });
    const records = run.result.prompts;
    const tokenized = records.length === prompts.length && bos !== null;

    // Greedy per prompt, one stream each: open, prefill, next until final.
    const streams = [];
    const opened = tokenized && run.step('stream_open', () => {
        for (let i = 0; i < records.length; ++i) streams.push(openStream(lib, ctx, { max_tokens: opts.maxTokens }));
        return `${streams.length} greedy streams, max_tokens ${opts.maxTokens}`;
    });
    if (!tokenized) run.skip('stream_open', 'tokenize failed');
    const prefilled = opened && run.step('prefill', () => {
        records.forEach((r, i) => {
            const p = prefill(lib, streams[i], r.prompt_tokens);
            if (p.rc !== S.ELIZA_OK) throw new StepFailure(`prompt ${i}: prefill returned ${p.rc}: ${messageOf(p.message)}`);
            if (p.message) throw new StepFailure(`prompt ${i}: prefill succeeded but set *out_error`);
        });
        return `${records.length} prompts`;
    });
    if (!opened) run.skip('prefill', 'stream_open failed');
    const texts = [];
    const generated = prefilled && run.step('next_until_final', () => {
        records.forEach((r, i) => {
            const g = generate(lib, streams[i], opts.maxTokens + 1);
            if (g.final_status !== 1) throw new StepFailure(`prompt ${i}: no final step within ${opts.maxTokens + 1} steps`);
            if (g.tokens.length > opts.maxTokens) throw new StepFailure(`prompt ${i}: ${g.tokens.length} tokens > max_tokens`);
            const again = generate(lib, streams[i], 1);
            if (again.final_status !== 1 || again.tokens.length !== 0) throw new StepFailure(`prompt ${i}: next after the final step is not final and empty`);
            r.tokens = g.tokens;
            r.text_hex = g.text.toString('hex');
            r.final_status = g.final_status;
            texts.push(g.text);
        });
        return records.map((r) => `${r.index}:${r.tokens.length}`).join(' ') + ' tokens';
    });
    if (!prefilled) run.skip('next_until_final', 'prefill failed');
    if (generated) {
        run.step('detokenize', () => {
            records.forEach((r, i) => {
                const text = detokenize(lib, ctx, [...bos, ...r.tokens], true);
                if (!text.equals(texts[i])) throw new StepFailure(`prompt ${i}: detokenize([BOS] + tokens) != the streamed text`);
                // A SentencePiece vocabulary puts a space before the first word: the
                // prompt comes back as it was, or with that one leading space.
                const round = detokenize(lib, ctx, r.prompt_tokens, true);
                const bytes = Buffer.from(r.prompt, 'utf8');
                if (!round.equals(bytes) && !round.equals(Buffer.concat([Buffer.from(' '), bytes]))) {
                    throw new StepFailure(`prompt ${i}: detokenize(tokenize(prompt)) is not the prompt: ${round.toString('hex')}`);
                }
            });
            return 'streamed text = detokenize([BOS] + tokens), and every prompt round-trips';
        });
    } else {
        run.skip('detokenize', 'next_until_final failed');
    }
    const closedFirst = streams.length;
    for (const s of streams) lib.fn.close(s);

    const usable = generated;
    // The cancel prompt: the first whose greedy run stopped at max_tokens, not at EOS.
    const chosen = records.find((r) => r.tokens.length === opts.maxTokens) || records[0];
    let cancelState = null;
    if (usable) {
        try {
            cancelState = await cancelFromWorker(run, lib, ctx, chosen, chosen.tokens);
        } catch (err) {
            run.record('cancel_from_thread', false, `unexpected error: ${err.stack || err}`);
        }
    } else {
        run.skip('cancel_from_thread', 'next_until_final failed');
    }
    const stream = cancelState ? cancelState.stream : null;
    if (stream && cancelState.stoppedEarly) {
        run.step('cancelled_stays_cancelled', () => {
            const s = nextStep(lib, stream, newBuffers());
            if (s.rc !== S.ELIZA_ERR_CANCELLED) throw new StepFailure(`next after the cancel returned ${s.rc}`);
            const p = prefill(lib, stream, chosen.prompt_tokens);
            if (p.rc !== S.ELIZA_ERR_CANCELLED) throw new StepFailure(`prefill after the cancel returned ${p.rc}`);
            return 'next and prefill return ELIZA_ERR_CANCELLED until a reset';
        });
    } else {
        run.skip('cancelled_stays_cancelled', 'cancel_from_thread did not stop the generation');
    }
    if (stream) {
        run.step('reset', () => {
            const rc = lib.fn.reset(stream);
            if (rc !== S.ELIZA_OK) throw new StepFailure(`reset returned ${rc}`);
            const p = prefill(lib, stream, chosen.prompt_tokens);
            if (p.rc !== S.ELIZA_OK) throw new StepFailure(`prefill after reset returned ${p.rc}: ${messageOf(p.message)}`);
            const g = generate(lib, stream, chosen.tokens.length);
            const got = g.tokens.slice(0, chosen.tokens.length);
            if (!equalArrays(got, chosen.tokens)) throw new StepFailure('after reset the stream does not generate its greedy tokens');
            return `reset cleared the cancel; ${got.length} greedy tokens again`;
        });
        lib.fn.close(stream);
    } else {
        run.skip('reset', 'no stream from the cancel step');
    }

    const P = chosen.prompt_tokens;
    if (usable) {
        run.step('reset_keep', () => {
            const s = openStream(lib, ctx, { max_tokens: opts.maxTokens });
            try {
                let p = prefill(lib, s, P);
                if (p.rc !== S.ELIZA_OK) throw new StepFailure(`prefill returned ${p.rc}`);
                const clamped = lib.fn.reset_keep(s, 1 << 30);
                if (clamped !== P.length) throw new StepFailure(`reset_keep(2^30) returned ${clamped}, not the ${P.length} tokens held`);
                const kept = lib.fn.reset_keep(s, P.length - 1);
                if (kept !== P.length - 1) throw new StepFailure(`reset_keep(${P.length - 1}) returned ${kept}`);
                p = prefill(lib, s, P.slice(-1));
                if (p.rc !== S.ELIZA_OK) throw new StepFailure(`prefill of the last prompt token returned ${p.rc}`);
                const g = generate(lib, s);
                if (!equalArrays(g.tokens, chosen.tokens)) throw new StepFailure('the kept prefix plus the last token does not continue greedily');
                return `kept ${kept} of ${P.length} tokens; the continuation equals the greedy run`;
            } finally {
                lib.fn.close(s);
            }
        });
        const slot = path.join(work, 'slot-ünïcødé.bin');
        let tail = null;
        run.step('save_slot', () => {
            const s = openStream(lib, ctx, { max_tokens: opts.maxTokens });
            try {
                const p = prefill(lib, s, P);
                if (p.rc !== S.ELIZA_OK) throw new StepFailure(`prefill returned ${p.rc}`);
                const headSteps = Math.max(1, Math.min(3, chosen.tokens.length - 1));
                const head = generate(lib, s, headSteps);
                const err = [null];
                check(lib, lib.fn.save_slot(s, slot, err), err, 'eliza_inference_llm_stream_save_slot');
                if (!fs.existsSync(slot)) throw new StepFailure(`no slot file at ${slot}`);
                const rest = head.final_status === 1 ? { tokens: [] } : generate(lib, s);
                if (!equalArrays([...head.tokens, ...rest.tokens], chosen.tokens)) throw new StepFailure('saving changed the generation');
                tail = rest.tokens;
                return `saved after ${head.tokens.length} tokens (${fs.statSync(slot).size} bytes)`;
            } finally {
                lib.fn.close(s);
            }
        });
        if (tail !== null) {
            run.step('restore_slot', () => {
                const s = openStream(lib, ctx, { max_tokens: opts.maxTokens });
                try {
                    const err = [null];
                    check(lib, lib.fn.restore_slot(s, slot, err), err, 'eliza_inference_llm_stream_restore_slot');
                    const g = generate(lib, s);
                    if (!equalArrays(g.tokens, tail)) throw new StepFailure('a new stream restored from the slot does not continue identically');
                    return `a new stream continued with the same ${tail.length} tokens`;
                } finally {
                    lib.fn.close(s);
                }
            });
        } else {
            run.skip('restore_slot', 'save_slot failed');
        }
    } else {
        for (const name of ['reset_keep', 'save_slot', 'restore_slot']) run.skip(name, 'next_until_final failed');
    }

    errorCase(run, 'bad_config', () => {
        const err = [null];
        const s = lib.fn.open(ctx, lib.abi.streamConfig({ temperature: NaN }), err);
        if (s) lib.fn.close(s);
        return { function: 'eliza_inference_llm_stream_open', status: s ? 'handle' : null, message: lib.takeError(err) };
    }, { status: null, contains: 'temperature' });
    errorCase(run, 'bad_token', () => {
        const s = openStream(lib, ctx, { max_tokens: 4 });
        try {
            const p = prefill(lib, s, [0x7fffffff]);
            return { function: 'eliza_inference_llm_stream_prefill', status: p.rc, message: p.message };
        } finally {
            lib.fn.close(s);
        }
    }, { status: S.ELIZA_ERR_INVALID_ARG, contains: 'eliza_inference_llm_stream_prefill' });
    errorCase(run, 'missing_slot', () => {
        const s = openStream(lib, ctx, { max_tokens: 4 });
        try {
            const err = [null];
            const rc = lib.fn.restore_slot(s, path.join(work, 'kein-slot-ünïcødé-東京.bin'), err);
            return { function: 'eliza_inference_llm_stream_restore_slot', status: rc, message: lib.takeError(err) };
        } finally {
            lib.fn.close(s);
        }
    }, { status: S.ELIZA_ERR_INVALID_ARG, contains: 'eliza_inference_llm_stream_restore_slot' });

    run.record('close', true, `${closedFirst} greedy streams and every later stream closed`);
    lib.fn.destroy(ctx);
    run.record('destroy', true, 'context destroyed with no stream open');
}

function writeResult(run, status) {
    run.result.exit_status = status;
    run.result.passed = status === EXIT.passed;
    const json = JSON.stringify(run.result, null, 2) + '\n';
    if (run.opts.out === '-') {
        process.stdout.write(json);
    } else {
        const out = path.resolve(run.opts.out);
        fs.mkdirSync(path.dirname(out), { recursive: true });
        const tmp = `${out}.${process.pid}.tmp`;
        fs.writeFileSync(tmp, json);
        fs.renameSync(tmp, out);
    }
    return status;
}

async function main(argv) {
    let opts;
    let prompts;
    try {
        opts = parseArgs(argv);
        prompts = readPrompts(opts.prompts);
    } catch (err) {
        process.stderr.write(`node-consumer: ${err.message}\n${USAGE}\n`);
        return EXIT.usage;
    }
    let abi;
    try {
        abi = require('./abi');
    } catch (err) {
        const run = new Run(opts, null);
        process.stderr.write(`node-consumer: ${err.message}\n`);
        run.record('load', false, err.message);
        return writeResult(run, err.constructor.name === 'RuntimeMissing' ? EXIT.runtime_missing : EXIT.failed);
    }
    const run = new Run(opts, abi);
    let lib;
    try {
        lib = abi.Library.open(opts.library);
    } catch (err) {
        process.stderr.write(`node-consumer: ${err.message}\n`);
        if (err instanceof abi.AbiMismatch) {
            run.result.abi.library = err.version;
            run.record('load', true, `loaded ${opts.library}`);
            run.record('abi_version', false, err.message);
            return writeResult(run, EXIT.abi_mismatch);
        }
        run.record('load', false, err.message);
        return writeResult(run, EXIT.unloadable);
    }
    lib.abi = abi;
    run.result.abi.library = lib.version;
    run.record('load', true, `loaded ${opts.library}`);
    run.record('abi_version', true, `library and consumer are ABI ${lib.version}`);
    run.record('bind', true, `${Object.keys(lib.fn).length + 1} functions of the ABI resolved`);
    await lifecycle(run, lib, prompts);
    const failed = run.result.steps.filter((s) => !s.ok).map((s) => s.step);
    (opts.out === '-' ? process.stderr : process.stdout)
        .write(`summary ${run.result.steps.length} ${run.result.steps.length - failed.length}\n`);
    return writeResult(run, failed.length === 0 ? EXIT.passed : EXIT.failed);
}

main(process.argv.slice(2)).then((status) => { process.exitCode = status; }, (err) => {
    process.stderr.write(`node-consumer: internal error: ${err.stack || err}\n`);
    process.exitCode = EXIT.failed;
});
