/* libFuzzer target: tokenizer.json loading. Any input either loads or fails with a status and a
 * message; a loaded tokenizer must then encode and decode without trouble. */
#include "fuzz_tok_common.h"
#include "mm_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        mm_log_set_level(MM_LOG_ERROR);
        quiet = 1;
    }
    struct gw_tokenizer *tok = NULL;
    struct mm_err e;
    mm_err_clear(&e);
    int32_t rc = gw_tokenizer_load_mem((const char *)data, size, "fuzz.json", &tok, &e);
    if (rc != MM_OK) {
        if (tok || e.code != rc || e.msg[0] == '\0') {
            fprintf(stderr, "fuzz_tok_load: failure without a proper error (rc %d, msg '%s')\n", rc, e.msg);
            abort();
        }
        return 0;
    }
    static const char *const texts[] = {"Hello, world! It's 2026.", "  \r\n\t x\xC2\x85y",
                                        "caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
                                        ""};
    struct gw_tok_ids ids = {0};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        gw_tokenizer_encode(tok, texts[i], strlen(texts[i]), i & 1 ? GW_TOK_ADD_SPECIAL : 0, &ids, &e);
    uint32_t vs = gw_tokenizer_vocab_size(tok);
    for (uint32_t id = 0; id < vs && id < 4096; id++) gw_tok_ids_append(&ids, &id, 1);
    struct mm_buf out;
    mm_buf_init(&out, 0);
    gw_tokenizer_decode(tok, ids.ids, ids.n, 0, &out, &e);
    mm_buf_free(&out);
    gw_tok_ids_free(&ids);
    gw_tokenizer_free(tok);
    return 0;
}
