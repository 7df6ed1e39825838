/* generate BUNDLE_DIR MAX_TOKENS PROMPT: greedy text from a bundle through the C ABI.
 * Prints "prompt: <id> ..." (the prompt's tokens, BOS first), "tokens: <id> ..." (the
 * generated ones) and "text: <generated text>"; exits 1 with the library's message on any
 * error. */
#include <eliza-inference-ffi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char * what, char * error) {
    fprintf(stderr, "generate: %s: %s\n", what, error ? error : "(no message)");
    eliza_inference_free_string(error);
    return 1;
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s BUNDLE_DIR MAX_TOKENS PROMPT\n", argv[0]);
        return 2;
    }
    char * error = NULL;
    EliInferenceContext * ctx = eliza_inference_create(argv[1], &error);
    if (!ctx) {
        return fail("create", error);
    }
    int * prompt = NULL;
    size_t n_prompt = 0;
    if (eliza_inference_tokenize(ctx, argv[3], strlen(argv[3]), 1, 0, &prompt, &n_prompt, &error) < 0) {
        eliza_inference_destroy(ctx);
        return fail("tokenize", error);
    }
    eliza_llm_stream_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_tokens = atoi(argv[2]);
    cfg.temperature = 0.0f; /* greedy */
    EliLlmStream * stream = eliza_inference_llm_stream_open(ctx, &cfg, &error);
    int rc = 0;
    if (!stream) {
        rc = fail("open", error);
    } else if (eliza_inference_llm_stream_prefill(stream, (const int32_t *) prompt, n_prompt, &error) != 0) {
        rc = fail("prefill", error);
    } else {
        static char text[1 << 16];
        char step_text[4096];
        size_t used = 0;
        printf("prompt:");
        for (size_t i = 0; i < n_prompt; ++i) {
            printf(" %d", prompt[i]);
        }
        printf("\ntokens:");
        for (;;) {
            int32_t ids[64];
            size_t n = 0;
            int step = eliza_inference_llm_stream_next(stream, ids, 64, &n, step_text, sizeof step_text,
                                                       NULL, NULL, &error);
            if (step < 0) {
                printf("\n");
                rc = fail("next", error);
                break;
            }
            for (size_t i = 0; i < n; ++i) {
                printf(" %d", ids[i]);
            }
            size_t len = strlen(step_text);
            if (used + len < sizeof text) {
                memcpy(text + used, step_text, len);
                used += len;
            }
            if (step == 1) {
                text[used] = '\0';
                printf("\ntext: %s\n", text);
                break;
            }
        }
    }
    eliza_inference_llm_stream_close(stream);
    eliza_inference_free_tokens(prompt);
    eliza_inference_destroy(ctx);
    return rc;
}
