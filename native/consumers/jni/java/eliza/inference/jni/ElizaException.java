package eliza.inference.jni;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * A failure of the library as the glue reports it: the function, its status (when the
 * function returns one; _create and _open return a handle instead) and the message's bytes
 * exactly as the library wrote them, so the caller decodes them strictly.
 */
public final class ElizaException extends Exception {
    private static final long serialVersionUID = 1L;

    public final String function;
    public final int status;
    public final boolean hasStatus;
    public final byte[] messageBytes;

    public ElizaException(String function, int status, boolean hasStatus, byte[] messageBytes) {
        super(function + (hasStatus ? " returned " + status : " failed") + ": " + lenient(messageBytes));
        this.function = function;
        this.status = status;
        this.hasStatus = hasStatus;
        this.messageBytes = messageBytes;
    }

    /** The message decoded strictly as UTF-8, or null when it is not valid UTF-8 (or absent). */
    public String strictMessage() {
        return messageBytes == null ? null : strictUtf8(messageBytes);
    }

    /** bytes as UTF-8, refusing malformed input (a replacement character would hide a defect). */
    public static String strictUtf8(byte[] bytes) {
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes))
                    .toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    private static String lenient(byte[] bytes) {
        return bytes == null ? "(no message)" : new String(bytes, StandardCharsets.UTF_8);
    }
}
