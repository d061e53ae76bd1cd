/* libFuzzer target: encode arbitrary bytes and decode arbitrary ids with a feature-complete tokenizer.
 * Checks, beyond "no crash": invalid UTF-8 is refused with MM_INVALID and valid text is accepted;
 * encoding is deterministic (the per-thread cache never changes a result); ASCII text without
 * whitespace-stripping tokens round-trips; streamed decoding equals whole decoding and never emits a
 * partial character. First input byte: mode bits (bit 0 decode ids, bit 1 flag). */
#include "fuzz_tok_common.h"
#include "mm_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gw_tokenizer *g_tok;

/* Well-formed UTF-8 per RFC 3629 (independent of the library's scanner). */
static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        size_t l;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b < 0x80)
            l = 1;
        else if (b >= 0xC2 && b <= 0xDF)
            l = 2;
        else if (b == 0xE0)
            l = 3, lo = 0xA0;
        else if (b == 0xED)
            l = 3, hi = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF)
            l = 3;
        else if (b == 0xF0)
            l = 4, lo = 0x90;
        else if (b == 0xF4)
            l = 4, hi = 0x8F;
        else if (b >= 0xF1 && b <= 0xF3)
            l = 4;
        else
            return 0;
        if (i + l > n) return 0;
        for (size_t k = 1; k < l; k++) {
            uint8_t c = s[i + k];
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
        }
        i += l;
    }
    return 1;
}

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_tok_encode: property violated: %s\n", what);
        abort();
    }
}

static void decode_ids(const uint8_t *data, size_t size, uint32_t flags)
{
    size_t n = size / 2;
    uint32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) return;
    uint32_t limit = gw_tokenizer_vocab_size(g_tok) + 8;
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)(data[2 * i] | data[2 * i + 1] << 8) % limit;
    struct mm_buf whole, acc;
    struct mm_err e;
    mm_buf_init(&whole, 0);
    mm_buf_init(&acc, 0);
    check(gw_tokenizer_decode(g_tok, ids, n, flags, &whole, &e) == MM_OK, "decode failed");
    check(utf8_ok((const uint8_t *)whole.data, whole.len), "decoded text is not UTF-8");
    struct gw_tok_stream st;
    gw_tok_stream_init(&st, g_tok, flags);
    for (size_t i = 0; i < n; i++) {
        size_t before = acc.len;
        check(gw_tok_stream_push(&st, ids[i], &acc, &e) == MM_OK, "stream push failed");
        /* acc.data is NULL until the first byte arrives: no pointer arithmetic on it before that */
        check(acc.len == before || utf8_ok((const uint8_t *)acc.data + before, acc.len - before),
              "stream delta splits a character");
    }
    check(gw_tok_stream_finish(&st, &acc, &e) == MM_OK, "stream finish failed");
    check(acc.len == whole.len && (acc.len == 0 || memcmp(acc.data, whole.data, acc.len) == 0),
          "streamed text differs from decoded text");
    mm_buf_free(&whole);
    mm_buf_free(&acc);
    free(ids);
}

static void encode_text(const uint8_t *data, size_t size, uint32_t flags)
{
    struct gw_tok_ids a = {0}, b = {0};
    struct mm_err e;
    int32_t rc = gw_tokenizer_encode(g_tok, (const char *)data, size, flags, &a, &e);
    if (!utf8_ok(data, size)) {
        check(rc == MM_INVALID, "invalid UTF-8 accepted");
        check(a.n == 0, "ids appended on error");
        gw_tok_ids_free(&a);
        return;
    }
    check(rc == MM_OK, "valid UTF-8 refused");
    check(gw_tokenizer_encode(g_tok, (const char *)data, size, flags, &b, &e) == MM_OK,
          "second encode failed");
    check(a.n == b.n && (a.n == 0 || memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0),
          "encode not deterministic");
    int ascii = 1;
    for (size_t i = 0; i < size; i++) ascii &= data[i] < 0x80;
    if (ascii && !memmem(data, size, "<mask>", 6)) {
        struct mm_buf t;
        mm_buf_init(&t, 0);
        check(gw_tokenizer_decode(g_tok, a.ids, a.n, 0, &t, &e) == MM_OK, "decode failed");
        check(t.len == size && (size == 0 || memcmp(t.data, data, size) == 0),
              "ASCII text does not round-trip");
        mm_buf_free(&t);
    }
    gw_tok_ids_free(&a);
    gw_tok_ids_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok) {
        mm_log_set_level(MM_LOG_ERROR);
        g_tok = ft_tokenizer();
    }
    if (size == 0) return 0;
    uint8_t mode = data[0];
    if (mode & 1)
        decode_ids(data + 1, size - 1, (mode & 2) ? GW_TOK_SKIP_SPECIAL : 0);
    else
        encode_text(data + 1, size - 1, (mode & 2) ? GW_TOK_ADD_SPECIAL : 0);
    return 0;
}
