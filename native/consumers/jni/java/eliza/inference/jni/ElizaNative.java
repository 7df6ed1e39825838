package eliza.inference.jni;

/**
 * The released C ABI (native/include/eliza-inference-ffi.h, ABI version 9) through the JNI
 * glue (libeliza_jni). The constants are written down here the way a shipped Java binding
 * carries them, not taken from the header at run time: a library whose header renumbered a
 * status or moved a field without bumping the version must fail against this class.
 * Handles are the C pointers as longs; texts cross as UTF-8 bytes.
 */
public final class ElizaNative {
    private ElizaNative() {}

    public static final String ABI_VERSION = "9";

    public static final int ELIZA_OK = 0;
    public static final int ELIZA_ERR_NOT_IMPLEMENTED = -1;
    public static final int ELIZA_ERR_INVALID_ARG = -2;
    public static final int ELIZA_ERR_BUNDLE_INVALID = -3;
    public static final int ELIZA_ERR_FFI_FAULT = -4;
    public static final int ELIZA_ERR_OOM = -5;
    public static final int ELIZA_ERR_ABI_MISMATCH = -6;
    public static final int ELIZA_ERR_CANCELLED = -7;

    /** eliza_llm_stream_config_t with 64-bit pointers: size, then the offsets in field order. */
    public static final int[] CONFIG_LAYOUT_64 = {64, 0, 4, 8, 12, 16, 20, 24, 32, 36, 40, 48, 56};
    public static final String[] CONFIG_FIELDS = {
        "max_tokens", "temperature", "top_p", "top_k", "repeat_penalty", "slot_id", "prompt_cache_key",
        "draft_min", "draft_max", "mtp_drafter_path", "gbnf_grammar", "disable_thinking",
    };

    /** Loads the glue (libeliza_jni from java.library.path); throws UnsatisfiedLinkError. */
    public static void loadGlue() {
        System.loadLibrary("eliza_jni");
    }

    /** dlopens the library and returns what eliza_inference_abi_version reports. */
    public static native byte[] load(byte[] libraryPath) throws ElizaException;

    /** ELIZA_INFERENCE_ABI_VERSION of the header the glue was compiled against. */
    public static native int headerAbiVersion();

    /** Resolves every other function; ElizaException names a missing one. */
    public static native void bind() throws ElizaException;

    /** {sizeof, offsets in field order, sizeof(void *)} as the glue's compiler lays out the struct. */
    public static native int[] configLayout();

    public static native int tokenizeSupported();

    public static native int streamSupported();

    public static native long create(byte[] bundleDir) throws ElizaException;

    public static native void destroy(long ctx);

    public static native int[] tokenize(long ctx, byte[] text, boolean addSpecial, boolean parseSpecial)
            throws ElizaException;

    public static native byte[] detokenize(long ctx, int[] tokens, boolean removeSpecial, boolean unparseSpecial)
            throws ElizaException;

    public static native long open(long ctx, int maxTokens, float temperature, float topP, int topK,
            float repeatPenalty, int slotId, int draftMin, int draftMax) throws ElizaException;

    public static native void prefill(long stream, int[] tokens) throws ElizaException;

    /** meta receives {tokens, text bytes, drafted, accepted}; returns 0 (more) or 1 (final). */
    public static native int next(long stream, int[] tokensOut, byte[] textOut, int[] meta) throws ElizaException;

    public static native int cancel(long stream);

    public static native int reset(long stream);

    public static native int resetKeep(long stream, int nKeep);

    public static native void saveSlot(long stream, byte[] path) throws ElizaException;

    public static native void restoreSlot(long stream, byte[] path) throws ElizaException;

    public static native void close(long stream);
}
