package eliza.inference.jni;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;

/**
 * The JVM consumer of libelizainference: the whole lifecycle of the C ABI through the JNI
 * glue, one JSON result. Same command line, steps, result and exit statuses as the Node
 * consumer (docs/consumers.md):
 *
 * <pre>
 *   jni-consumer --library LIB --bundle DIR --prompts FILE --out RESULT.json
 *       [--max-tokens N] [--work DIR] [--cancel-after N] [--cancel-max-tokens N]
 * </pre>
 */
public final class JniConsumer {
    static final int EXIT_PASSED = 0;
    static final int EXIT_FAILED = 1;
    static final int EXIT_USAGE = 2;
    static final int EXIT_ABI_MISMATCH = 3;
    static final int EXIT_UNLOADABLE = 4;
    static final int EXIT_RUNTIME_MISSING = 5;

    static final int TOKENS_CAP = 16;
    static final int TEXT_CAP = 4096;
    static final String USAGE = "usage: jni-consumer --library LIB --bundle DIR --prompts FILE --out FILE|- "
            + "[--max-tokens N] [--work DIR] [--cancel-after N] [--cancel-max-tokens N]";

    /** A step that did not hold; its message is the step's detail. */
    static final class StepFailure extends Exception {
        private static final long serialVersionUID = 1L;

        StepFailure(String message) {
            super(message);
        }
    }

    interface StepBody {
        String run() throws Exception;
    }

    static final class Options {
        String library;
        String bundle;
        String prompts;
        String out;
        String work;
        int maxTokens = 16;
        int cancelAfter = 4;
        int cancelMaxTokens = 0;
    }

    static final class Generation {
        List<Integer> tokens = new ArrayList<>();
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        int finalStatus = 0;
        int steps = 0;
    }

    static final class PromptRecord {
        int index;
        String prompt;
        int[] promptTokens;
        int[] tokens = new int[0];
        byte[] text = new byte[0];
        Integer finalStatus;

        Map<String, Object> json() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("index", index);
            m.put("prompt", prompt);
            m.put("prompt_tokens", promptTokens);
            m.put("tokens", tokens);
            m.put("text_hex", hex(text));
            m.put("final_status", finalStatus);
            return m;
        }
    }

    final Options opts;
    final Map<String, Object> result = new LinkedHashMap<>();
    final List<Object> steps = new ArrayList<>();
    final List<Object> errors = new ArrayList<>();
    final List<PromptRecord> records = new ArrayList<>();
    final Map<String, Object> abi = new LinkedHashMap<>();
    int failures = 0;

    JniConsumer(Options opts) {
        this.opts = opts;
        result.put("format", "eliza-consumer/1");
        result.put("consumer", "jni");
        result.put("runtime", "java " + System.getProperty("java.version") + " (" + System.getProperty("java.vm.name")
                + "), JNI glue libeliza_jni");
        result.put("library", absolute(opts.library));
        result.put("bundle", absolute(opts.bundle));
        result.put("prompts_file", absolute(opts.prompts));
        result.put("max_tokens", opts.maxTokens);
        abi.put("expected", ElizaNative.ABI_VERSION);
        abi.put("library", null);
        result.put("abi", abi);
        result.put("passed", false);
        result.put("exit_status", null);
        result.put("steps", steps);
        result.put("prompts", new ArrayList<>());
        result.put("cancel", null);
        result.put("errors", errors);
    }

    static String absolute(String p) {
        return Paths.get(p).toAbsolutePath().normalize().toString();
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) sb.append(String.format("%02x", b & 0xff));
        return sb.toString();
    }

    static String messageOf(ElizaException e) {
        if (e.messageBytes == null) return "(no message)";
        String text = e.strictMessage();
        return text != null ? text : "(not UTF-8: " + hex(e.messageBytes) + ")";
    }

    boolean record(String step, boolean ok, String detail) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("step", step);
        m.put("ok", ok);
        m.put("detail", detail);
        steps.add(m);
        if (!ok) ++failures;
        log().println((ok ? "ok " : "FAIL ") + step + (detail.isEmpty() ? "" : ": " + detail));
        return ok;
    }

    /** With --out - the result owns stdout; the progress lines go to stderr then. */
    java.io.PrintStream log() {
        return "-".equals(opts.out) ? System.err : System.out;
    }

    boolean step(String name, StepBody body) {
        try {
            String detail = body.run();
            return record(name, true, detail == null ? "" : detail);
        } catch (StepFailure e) {
            return record(name, false, e.getMessage());
        } catch (ElizaException e) {
            return record(name, false, e.function + (e.hasStatus ? " returned " + e.status : " failed") + ": " + messageOf(e));
        } catch (Exception | Error e) {
            return record(name, false, "unexpected error: " + e);
        }
    }

    boolean skip(String name, String why) {
        return record(name, false, "not run: " + why);
    }

    // --- prompts, in the bench tools' format ------------------------------------------------

    static List<String> readPrompts(String file) throws IOException {
        String text = ElizaException.strictUtf8(Files.readAllBytes(Paths.get(file)));
        if (text == null) throw new IOException("prompt file '" + file + "' is not UTF-8");
        List<String> prompts = new ArrayList<>();
        for (String line : text.split("\n", -1)) {
            if (line.endsWith("\r")) line = line.substring(0, line.length() - 1);
            if (line.isEmpty() || line.charAt(0) == '#') continue;
            StringBuilder prompt = new StringBuilder();
            for (int i = 0; i < line.length(); ++i) {
                char c = line.charAt(i);
                if (c == '\\' && i + 1 < line.length()) {
                    char e = line.charAt(++i);
                    prompt.append(e == 'n' ? '\n' : e == 't' ? '\t' : e);
                } else {
                    prompt.append(c);
                }
            }
            prompts.add(prompt.toString());
        }
        if (prompts.isEmpty()) throw new IOException("prompt file '" + file + "' holds no prompts");
        return prompts;
    }

    // --- the ABI, step by step ----------------------------------------------------------------

    static long openGreedy(long ctx, int maxTokens) throws ElizaException {
        return ElizaNative.open(ctx, maxTokens, 0.0f, 1.0f, 0, 1.0f, 0, 0, 0);
    }

    /** Steps until the final one, or limit steps. */
    static Generation generate(long stream, int limit) throws ElizaException {
        Generation g = new Generation();
        int[] ids = new int[TOKENS_CAP];
        byte[] text = new byte[TEXT_CAP];
        int[] meta = new int[4];
        while (g.steps < limit) {
            int rc = ElizaNative.next(stream, ids, text, meta);
            ++g.steps;
            for (int i = 0; i < meta[0]; ++i) g.tokens.add(ids[i]);
            g.text.write(text, 0, meta[1]);
            if (rc == 1) {
                g.finalStatus = 1;
                break;
            }
        }
        return g;
    }

    static int[] ints(List<Integer> list) {
        int[] out = new int[list.size()];
        for (int i = 0; i < out.length; ++i) out[i] = list.get(i);
        return out;
    }

    /** One error path: status (null where the function returns a handle), message, strict decode. */
    void errorCase(String name, String expectedContains, Integer expectedStatus, ErrorBody body) {
        ElizaException e;
        try {
            e = body.run();
        } catch (Exception | Error ex) {
            record("error_" + name, false, "unexpected error: " + ex);
            return;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("case", name);
        String message = e == null ? null : e.strictMessage();
        m.put("function", e == null ? null : e.function);
        m.put("status", e == null ? "handle" : e.hasStatus ? (Object) e.status : null);
        m.put("expected_status", expectedStatus);
        m.put("message", message);
        m.put("utf8_strict", e != null && e.messageBytes != null && message != null);
        m.put("message_bytes", e == null || e.messageBytes == null ? 0 : e.messageBytes.length);
        if (e != null && e.messageBytes != null && message == null) m.put("message_hex", hex(e.messageBytes));
        errors.add(m);
        List<String> problems = new ArrayList<>();
        if (e == null) {
            problems.add("the call succeeded");
        } else {
            Integer status = e.hasStatus ? e.status : null;
            if (status == null ? expectedStatus != null : !status.equals(expectedStatus)) {
                problems.add("status " + status + ", expected " + expectedStatus);
            }
            if (e.messageBytes == null) {
                problems.add("no message");
            } else if (message == null) {
                problems.add("the message is not valid UTF-8");
            } else if (!message.contains(expectedContains)) {
                problems.add("the message lacks '" + expectedContains + "': " + message);
            }
        }
        record("error_" + name, problems.isEmpty(), problems.isEmpty()
                ? e.function + ": " + (e.hasStatus ? String.valueOf(e.status) : "NULL") + ", " + e.messageBytes.length
                        + " bytes of UTF-8"
                : String.join("; ", problems));
    }

    interface ErrorBody {
        /** The exception the failing call threw, or null when it succeeded. */
        ElizaException run() throws Exception;
    }

    int run(List<String> prompts) {
        try {
            ElizaNative.loadGlue();
        } catch (UnsatisfiedLinkError e) {
            String why = "the JNI glue libeliza_jni is not loadable (" + e.getMessage() + "): build it with "
                    + "native/consumers/jni/build.sh OUT_DIR and run OUT_DIR/jni-consumer";
            System.err.println("jni-consumer: " + why);
            record("load", false, why);
            return finish(EXIT_RUNTIME_MISSING);
        }
        if (ElizaNative.headerAbiVersion() != Integer.parseInt(ElizaNative.ABI_VERSION)) {
            String why = "the JNI glue was compiled against ABI " + ElizaNative.headerAbiVersion()
                    + " but this Java class is written for ABI " + ElizaNative.ABI_VERSION + ": rebuild both together";
            System.err.println("jni-consumer: " + why);
            record("load", false, why);
            return finish(EXIT_RUNTIME_MISSING);
        }
        String version;
        try {
            byte[] reported = ElizaNative.load(utf8(opts.library));
            version = reported == null ? null : ElizaException.strictUtf8(reported);
        } catch (ElizaException e) {
            System.err.println("jni-consumer: " + messageOf(e));
            record("load", false, messageOf(e));
            return finish(EXIT_UNLOADABLE);
        }
        record("load", true, "loaded " + opts.library);
        abi.put("library", version);
        if (!ElizaNative.ABI_VERSION.equals(version)) {
            String why = "library '" + opts.library + "' reports ABI version "
                    + (version == null ? "null" : "\"" + version + "\"") + "; this consumer is written for ABI "
                    + ElizaNative.ABI_VERSION + " (ELIZA_INFERENCE_ABI_VERSION): use a library and a consumer of the "
                    + "same ABI version";
            System.err.println("jni-consumer: " + why);
            record("abi_version", false, why);
            return finish(EXIT_ABI_MISMATCH);
        }
        record("abi_version", true, "library and consumer are ABI " + version);
        try {
            ElizaNative.bind();
        } catch (ElizaException e) {
            System.err.println("jni-consumer: " + messageOf(e));
            record("bind", false, messageOf(e));
            return finish(EXIT_UNLOADABLE);
        }
        record("bind", true, "18 functions of the ABI resolved");
        try {
            lifecycle(prompts);
        } catch (IOException e) {
            record("work_dir", false, "cannot use the work directory: " + e);
        }
        log().println("summary " + steps.size() + " " + (steps.size() - failures));
        return finish(failures == 0 ? EXIT_PASSED : EXIT_FAILED);
    }

    void lifecycle(List<String> prompts) throws IOException {
        boolean ownWork = opts.work == null;
        Path work = ownWork ? Files.createTempDirectory("eliza-jni-consumer-") : Paths.get(opts.work).toAbsolutePath();
        Files.createDirectories(work);

        step("layout", () -> {
            int[] got = ElizaNative.configLayout();
            int pointer = got[got.length - 1];
            if (pointer != 8) return "pointer size " + pointer + ": the 64-bit layout does not apply";
            int[] want = ElizaNative.CONFIG_LAYOUT_64;
            if (got[0] != want[0]) throw new StepFailure("sizeof(eliza_llm_stream_config_t) " + got[0] + ", header " + want[0]);
            for (int i = 1; i < want.length; ++i) {
                if (got[i] != want[i]) {
                    throw new StepFailure(ElizaNative.CONFIG_FIELDS[i - 1] + " at " + got[i] + ", header " + want[i]);
                }
            }
            return got[0] + " bytes, every offset as the header publishes";
        });
        step("supported", () -> {
            int t = ElizaNative.tokenizeSupported();
            int s = ElizaNative.streamSupported();
            if (t != 1 || s != 1) throw new StepFailure("tokenize_supported " + t + ", llm_stream_supported " + s);
            return "tokenize and streaming supported";
        });
        long[] ctx = {0};
        step("create", () -> {
            ctx[0] = ElizaNative.create(utf8(absolute(opts.bundle)));
            return "context for " + absolute(opts.bundle);
        });
        if (ctx[0] == 0) {
            for (String name : new String[] {"tokenize", "detokenize", "stream_open", "prefill", "next_until_final",
                    "cancel_from_thread", "cancelled_stays_cancelled", "reset", "reset_keep", "save_slot",
                    "restore_slot", "error_bad_config", "error_bad_token", "error_missing_slot", "close", "destroy"}) {
                skip(name, "create failed");
            }
        } else {
            withContext(ctx[0], prompts, work);
        }

        Path missing = work.resolve("no-such-bundle-ünïcødé-東京-🙂");
        errorCase("missing_bundle", "does not exist", null, () -> {
            try {
                ElizaNative.destroy(ElizaNative.create(utf8(missing.toString())));
                return null;
            } catch (ElizaException e) {
                return e;
            }
        });
        errorCase("corrupt_model", "cannot load text model", null, () -> {
            // A refused GGUF under a long path of three-byte characters: llama.cpp's error
            // line names the path and the library keeps at most 400 bytes of such a line, so
            // the cut falls inside the path. Three paddings put it on each byte of a character.
            ElizaException last = null;
            for (int pad = 0; pad < 3; ++pad) {
                Path dir = work.resolve("corrupt-" + pad).resolve("€".repeat(60)).resolve("x".repeat(pad) + "東".repeat(60));
                Files.createDirectories(dir.resolve("text"));
                byte[] junk = new byte[64];
                System.arraycopy(utf8("NOTAGGUF"), 0, junk, 0, 8);
                Files.write(dir.resolve("text").resolve("model.gguf"), junk);
                try {
                    ElizaNative.destroy(ElizaNative.create(utf8(dir.toString())));
                    return null;
                } catch (ElizaException e) {
                    last = e;
                    if (e.strictMessage() == null) break;
                }
            }
            return last;
        });
        if (ownWork) deleteTree(work);
    }

    static void deleteTree(Path root) throws IOException {
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path p : (Iterable<Path>) walk.sorted(Comparator.reverseOrder())::iterator) Files.deleteIfExists(p);
        }
    }

    void withContext(long ctx, List<String> prompts, Path work) {
        int[][] bos = {null};
        boolean tokenized = step("tokenize", () -> {
            for (int i = 0; i < prompts.size(); ++i) {
                PromptRecord r = new PromptRecord();
                r.index = i;
                r.prompt = prompts.get(i);
                r.promptTokens = ElizaNative.tokenize(ctx, utf8(r.prompt), true, false);
                if (r.promptTokens.length == 0) throw new StepFailure("prompt " + i + " tokenized to nothing");
                records.add(r);
            }
            bos[0] = ElizaNative.tokenize(ctx, new byte[0], true, false);
            if (bos[0].length != 1) throw new StepFailure("\"\" with add_special gave " + bos[0].length + " tokens, not one BOS");
            return prompts.size() + " prompts; BOS " + bos[0][0];
        });
        @SuppressWarnings("unchecked")
        List<Object> promptJson = (List<Object>) result.get("prompts");

        List<Long> streams = new ArrayList<>();
        boolean opened = tokenized && step("stream_open", () -> {
            for (int i = 0; i < records.size(); ++i) streams.add(openGreedy(ctx, opts.maxTokens));
            return streams.size() + " greedy streams, max_tokens " + opts.maxTokens;
        });
        if (!tokenized) skip("stream_open", "tokenize failed");
        boolean prefilled = opened && step("prefill", () -> {
            for (int i = 0; i < records.size(); ++i) ElizaNative.prefill(streams.get(i), records.get(i).promptTokens);
            return records.size() + " prompts";
        });
        if (!opened) skip("prefill", "stream_open failed");
        boolean generated = prefilled && step("next_until_final", () -> {
            StringBuilder counts = new StringBuilder();
            for (int i = 0; i < records.size(); ++i) {
                PromptRecord r = records.get(i);
                Generation g = generate(streams.get(i), opts.maxTokens + 1);
                if (g.finalStatus != 1) throw new StepFailure("prompt " + i + ": no final step within " + (opts.maxTokens + 1) + " steps");
                if (g.tokens.size() > opts.maxTokens) throw new StepFailure("prompt " + i + ": " + g.tokens.size() + " tokens > max_tokens");
                Generation again = generate(streams.get(i), 1);
                if (again.finalStatus != 1 || !again.tokens.isEmpty()) {
                    throw new StepFailure("prompt " + i + ": next after the final step is not final and empty");
                }
                r.tokens = ints(g.tokens);
                r.text = g.text.toByteArray();
                r.finalStatus = g.finalStatus;
                counts.append(counts.length() == 0 ? "" : " ").append(i).append(':').append(r.tokens.length);
            }
            return counts + " tokens";
        });
        if (!prefilled) skip("next_until_final", "prefill failed");
        for (PromptRecord r : records) promptJson.add(r.json());
        if (generated) {
            step("detokenize", () -> {
                for (PromptRecord r : records) {
                    int[] withBos = new int[r.tokens.length + 1];
                    withBos[0] = bos[0][0];
                    System.arraycopy(r.tokens, 0, withBos, 1, r.tokens.length);
                    byte[] text = ElizaNative.detokenize(ctx, withBos, true, false);
                    if (!Arrays.equals(text, r.text)) {
                        throw new StepFailure("prompt " + r.index + ": detokenize([BOS] + tokens) != the streamed text");
                    }
                    // A SentencePiece vocabulary puts a space before the first word: the prompt
                    // comes back as it was, or with that one leading space.
                    byte[] round = ElizaNative.detokenize(ctx, r.promptTokens, true, false);
                    byte[] bytes = utf8(r.prompt);
                    byte[] spaced = utf8(" " + r.prompt);
                    if (!Arrays.equals(round, bytes) && !Arrays.equals(round, spaced)) {
                        throw new StepFailure("prompt " + r.index + ": detokenize(tokenize(prompt)) is not the prompt: " + hex(round));
                    }
                }
                return "streamed text = detokenize([BOS] + tokens), and every prompt round-trips";
            });
        } else {
            skip("detokenize", "next_until_final failed");
        }
        int closedFirst = streams.size();
        for (long s : streams) ElizaNative.close(s);

        // The cancel prompt: the first whose greedy run stopped at max_tokens, not at EOS.
        PromptRecord chosen = null;
        for (PromptRecord r : records) {
            if (r.tokens.length == opts.maxTokens) {
                chosen = r;
                break;
            }
        }
        if (chosen == null && !records.isEmpty()) chosen = records.get(0);
        long stream = 0;
        boolean stoppedEarly = false;
        if (generated) {
            long[] held = {0};
            boolean[] early = {false};
            PromptRecord c = chosen;
            try {
                cancelFromThread(ctx, c, held, early);
            } catch (Exception | Error e) {
                record("cancel_from_thread", false, "unexpected error: " + e);
            }
            stream = held[0];
            stoppedEarly = early[0];
        } else {
            skip("cancel_from_thread", "next_until_final failed");
        }
        final long cancelled = stream;
        final PromptRecord c = chosen;
        if (stream != 0 && stoppedEarly) {
            step("cancelled_stays_cancelled", () -> {
                try {
                    ElizaNative.next(cancelled, new int[TOKENS_CAP], new byte[TEXT_CAP], new int[4]);
                    throw new StepFailure("next after the cancel succeeded");
                } catch (ElizaException e) {
                    if (e.status != ElizaNative.ELIZA_ERR_CANCELLED) throw new StepFailure("next after the cancel returned " + e.status);
                }
                try {
                    ElizaNative.prefill(cancelled, c.promptTokens);
                    throw new StepFailure("prefill after the cancel succeeded");
                } catch (ElizaException e) {
                    if (e.status != ElizaNative.ELIZA_ERR_CANCELLED) throw new StepFailure("prefill after the cancel returned " + e.status);
                }
                return "next and prefill return ELIZA_ERR_CANCELLED until a reset";
            });
        } else {
            skip("cancelled_stays_cancelled", "cancel_from_thread did not stop the generation");
        }
        if (stream != 0) {
            step("reset", () -> {
                int rc = ElizaNative.reset(cancelled);
                if (rc != ElizaNative.ELIZA_OK) throw new StepFailure("reset returned " + rc);
                ElizaNative.prefill(cancelled, c.promptTokens);
                Generation g = generate(cancelled, c.tokens.length);
                int[] got = Arrays.copyOf(ints(g.tokens), Math.min(g.tokens.size(), c.tokens.length));
                if (!Arrays.equals(got, c.tokens)) throw new StepFailure("after reset the stream does not generate its greedy tokens");
                return "reset cleared the cancel; " + got.length + " greedy tokens again";
            });
            ElizaNative.close(stream);
        } else {
            skip("reset", "no stream from the cancel step");
        }

        Path slot = work.resolve("slot-ünïcødé.bin");
        int[][] tail = {null};
        if (generated) {
            int[] p = c.promptTokens;
            step("reset_keep", () -> {
                long s = openGreedy(ctx, opts.maxTokens);
                try {
                    ElizaNative.prefill(s, p);
                    int clamped = ElizaNative.resetKeep(s, 1 << 30);
                    if (clamped != p.length) throw new StepFailure("reset_keep(2^30) returned " + clamped + ", not the " + p.length + " tokens held");
                    int kept = ElizaNative.resetKeep(s, p.length - 1);
                    if (kept != p.length - 1) throw new StepFailure("reset_keep(" + (p.length - 1) + ") returned " + kept);
                    ElizaNative.prefill(s, new int[] {p[p.length - 1]});
                    Generation g = generate(s, Integer.MAX_VALUE);
                    if (!Arrays.equals(ints(g.tokens), c.tokens)) {
                        throw new StepFailure("the kept prefix plus the last token does not continue greedily");
                    }
                    return "kept " + kept + " of " + p.length + " tokens; the continuation equals the greedy run";
                } finally {
                    ElizaNative.close(s);
                }
            });
            step("save_slot", () -> {
                long s = openGreedy(ctx, opts.maxTokens);
                try {
                    ElizaNative.prefill(s, p);
                    int headSteps = Math.max(1, Math.min(3, c.tokens.length - 1));
                    Generation head = generate(s, headSteps);
                    ElizaNative.saveSlot(s, utf8(slot.toString()));
                    if (!Files.isRegularFile(slot)) throw new StepFailure("no slot file at " + slot);
                    Generation rest = head.finalStatus == 1 ? new Generation() : generate(s, Integer.MAX_VALUE);
                    List<Integer> all = new ArrayList<>(head.tokens);
                    all.addAll(rest.tokens);
                    if (!Arrays.equals(ints(all), c.tokens)) throw new StepFailure("saving changed the generation");
                    tail[0] = ints(rest.tokens);
                    return "saved after " + head.tokens.size() + " tokens (" + Files.size(slot) + " bytes)";
                } finally {
                    ElizaNative.close(s);
                }
            });
            if (tail[0] != null) {
                step("restore_slot", () -> {
                    long s = openGreedy(ctx, opts.maxTokens);
                    try {
                        ElizaNative.restoreSlot(s, utf8(slot.toString()));
                        Generation g = generate(s, Integer.MAX_VALUE);
                        if (!Arrays.equals(ints(g.tokens), tail[0])) {
                            throw new StepFailure("a new stream restored from the slot does not continue identically");
                        }
                        return "a new stream continued with the same " + tail[0].length + " tokens";
                    } finally {
                        ElizaNative.close(s);
                    }
                });
            } else {
                skip("restore_slot", "save_slot failed");
            }
        } else {
            for (String name : new String[] {"reset_keep", "save_slot", "restore_slot"}) skip(name, "next_until_final failed");
        }

        errorCase("bad_config", "temperature", null, () -> {
            try {
                ElizaNative.close(ElizaNative.open(ctx, 16, Float.NaN, 1.0f, 0, 1.0f, 0, 0, 0));
                return null;
            } catch (ElizaException e) {
                return e;
            }
        });
        errorCase("bad_token", "eliza_inference_llm_stream_prefill", ElizaNative.ELIZA_ERR_INVALID_ARG, () -> {
            long s = openGreedy(ctx, 4);
            try {
                ElizaNative.prefill(s, new int[] {Integer.MAX_VALUE});
                return null;
            } catch (ElizaException e) {
                return e;
            } finally {
                ElizaNative.close(s);
            }
        });
        errorCase("missing_slot", "eliza_inference_llm_stream_restore_slot", ElizaNative.ELIZA_ERR_INVALID_ARG, () -> {
            long s = openGreedy(ctx, 4);
            try {
                ElizaNative.restoreSlot(s, utf8(work.resolve("kein-slot-ünïcødé-東京.bin").toString()));
                return null;
            } catch (ElizaException e) {
                return e;
            } finally {
                ElizaNative.close(s);
            }
        });

        record("close", true, closedFirst + " greedy streams and every later stream closed");
        ElizaNative.destroy(ctx);
        record("destroy", true, "context destroyed with no stream open");
    }

    /**
     * The main thread generates; a second Java thread waits until it has finished
     * cancelAfter steps and calls cancel on the same stream while the main thread goes on.
     */
    void cancelFromThread(long ctx, PromptRecord prompt, long[] held, boolean[] early) throws Exception {
        Map<String, Object> info = new LinkedHashMap<>();
        result.put("cancel", info);
        info.put("thread", "java.lang.Thread");
        info.put("prompt_index", prompt.index);
        info.put("max_tokens", opts.cancelMaxTokens);
        info.put("cancel_after_steps", opts.cancelAfter);
        long stream = ElizaNative.open(ctx, opts.cancelMaxTokens, 0.0f, 1.0f, 0, 1.0f, 0, 0, 0);
        held[0] = stream;
        CountDownLatch enough = new CountDownLatch(opts.cancelAfter);
        AtomicBoolean done = new AtomicBoolean(false);
        AtomicBoolean cancelReturned = new AtomicBoolean(false);
        AtomicInteger cancelStatus = new AtomicInteger(Integer.MIN_VALUE);
        AtomicInteger stepsDone = new AtomicInteger(0);
        AtomicInteger seenAtCancel = new AtomicInteger(-1);
        Thread canceller = new Thread(() -> {
            try {
                if (!enough.await(120, TimeUnit.SECONDS) || done.get()) return;
                seenAtCancel.set(stepsDone.get());
                cancelStatus.set(ElizaNative.cancel(stream));
                cancelReturned.set(true);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "eliza-cancel");
        canceller.start();

        List<Integer> before = new ArrayList<>();
        int stepsStartedAfterCancel = 0;
        boolean finalBeforeCancel = false;
        ElizaException last = null;
        try {
            ElizaNative.prefill(stream, prompt.promptTokens);
            int[] ids = new int[TOKENS_CAP];
            byte[] text = new byte[TEXT_CAP];
            int[] meta = new int[4];
            for (int i = 0; i < 100000; ++i) {
                boolean afterCancel = cancelReturned.get();
                int rc = ElizaNative.next(stream, ids, text, meta);
                if (afterCancel) ++stepsStartedAfterCancel;
                for (int k = 0; k < meta[0]; ++k) before.add(ids[k]);
                stepsDone.incrementAndGet();
                enough.countDown();
                if (rc == 1) {
                    finalBeforeCancel = true;
                    break;
                }
            }
        } catch (ElizaException e) {
            last = e;
        } finally {
            done.set(true);
            while (enough.getCount() > 0) enough.countDown();
            canceller.join();  // the canceller holds the stream: never close it under the thread
        }
        boolean cancelledByThread = cancelReturned.get();
        info.put("steps_before_cancel", stepsDone.get());
        info.put("steps_started_after_cancel", stepsStartedAfterCancel);
        info.put("tokens_before_cancel", ints(before));
        info.put("cancel_status", cancelledByThread ? (Object) cancelStatus.get() : null);
        info.put("step_status", last == null ? null : (Object) last.status);
        String message = last == null ? null : last.strictMessage();
        info.put("message", message);
        info.put("utf8_strict", last == null ? null : (Object) (last.messageBytes != null && message != null));
        boolean stopped = cancelledByThread && last != null && last.status == ElizaNative.ELIZA_ERR_CANCELLED && !finalBeforeCancel;
        info.put("stopped_early", stopped);
        info.put("final_before_cancel", finalBeforeCancel);
        early[0] = stopped;

        List<String> problems = new ArrayList<>();
        if (!cancelledByThread) {
            problems.add("the second thread did not cancel (the generation ended first or the thread timed out)");
        } else if (cancelStatus.get() != ElizaNative.ELIZA_OK) {
            problems.add("cancel returned " + cancelStatus.get());
        }
        if (last == null) {
            problems.add("the generation ended without ELIZA_ERR_CANCELLED");
        } else if (last.status != ElizaNative.ELIZA_ERR_CANCELLED) {
            problems.add("the step failed with " + last.status + ", not ELIZA_ERR_CANCELLED: " + messageOf(last));
        } else if (message == null) {
            problems.add("the cancelled step has no strict UTF-8 message");
        }
        if (stepsStartedAfterCancel > 0) problems.add(stepsStartedAfterCancel + " step(s) started after cancel returned and still ran");
        int n = Math.min(before.size(), prompt.tokens.length);
        if (!Arrays.equals(Arrays.copyOf(ints(before), n), Arrays.copyOf(prompt.tokens, n))) {
            problems.add("the tokens before the cancel are not the greedy run's");
        }
        record("cancel_from_thread", problems.isEmpty(), problems.isEmpty()
                ? "second thread cancelled after " + seenAtCancel.get() + " steps; the main thread's next step returned "
                        + "ELIZA_ERR_CANCELLED after " + stepsDone.get() + " steps"
                : String.join("; ", problems));
    }

    int finish(int status) {
        result.put("exit_status", status);
        result.put("passed", status == EXIT_PASSED);
        String json = Json.write(result);
        try {
            if ("-".equals(opts.out)) {
                System.out.print(json);
            } else {
                Path out = Paths.get(opts.out).toAbsolutePath();
                if (out.getParent() != null) Files.createDirectories(out.getParent());
                Path tmp = out.resolveSibling(out.getFileName() + "." + ProcessHandle.current().pid() + ".tmp");
                Files.write(tmp, utf8(json));
                Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            }
        } catch (IOException e) {
            System.err.println("jni-consumer: cannot write " + opts.out + ": " + e);
            return EXIT_USAGE;
        }
        return status;
    }

    static Options parse(String[] args) {
        Options o = new Options();
        for (int i = 0; i < args.length; i += 2) {
            String flag = args[i];
            if (i + 1 >= args.length) throw new IllegalArgumentException("option '" + flag + "' needs a value");
            String value = args[i + 1];
            switch (flag) {
                case "--library": o.library = value; break;
                case "--bundle": o.bundle = value; break;
                case "--prompts": o.prompts = value; break;
                case "--out": o.out = value; break;
                case "--work": o.work = value; break;
                case "--max-tokens": o.maxTokens = count(flag, value); break;
                case "--cancel-after": o.cancelAfter = count(flag, value); break;
                case "--cancel-max-tokens": o.cancelMaxTokens = count(flag, value); break;
                default: throw new IllegalArgumentException("unknown option '" + flag + "'");
            }
        }
        if (o.library == null) throw new IllegalArgumentException("--library is required");
        if (o.bundle == null) throw new IllegalArgumentException("--bundle is required");
        if (o.prompts == null) throw new IllegalArgumentException("--prompts is required");
        if (o.out == null) throw new IllegalArgumentException("--out is required");
        if (o.maxTokens < 1) throw new IllegalArgumentException("--max-tokens must be at least 1");
        if (o.cancelAfter < 1) throw new IllegalArgumentException("--cancel-after must be at least 1");
        return o;
    }

    static int count(String flag, String value) {
        if (!value.matches("[0-9]{1,9}")) throw new IllegalArgumentException(flag + " takes a non-negative integer, not '" + value + "'");
        return Integer.parseInt(value);
    }

    public static void main(String[] args) {
        Options opts;
        List<String> prompts;
        try {
            opts = parse(args);
            prompts = readPrompts(opts.prompts);
        } catch (IllegalArgumentException | IOException e) {
            System.err.println("jni-consumer: " + e.getMessage() + "\n" + USAGE);
            System.exit(EXIT_USAGE);
            return;
        }
        int status = new JniConsumer(opts).run(prompts);
        System.out.flush();
        System.exit(status);
    }
}
