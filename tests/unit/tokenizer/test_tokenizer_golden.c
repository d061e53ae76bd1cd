/* Golden agreement with HF tokenizers: every string of testdata/tokenizer/goldens.json encodes to the
 * recorded ids, the ids decode to the recorded text, and the incremental decoder fed one id at a time
 * produces the same text and never emits half a UTF-8 character. */
#include <jansson.h>

#include "gw_tokenizer.h"
#include "mmgw_test.h"

/* 1 when s[0..n) is well-formed UTF-8 (checked independently of the tokenizer's own scanner). */
static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

int main(void)
{
    const char *dir = test_require_data();
    char path[1024];
    struct mm_err e;
    struct gw_tokenizer *tok = NULL;
    snprintf(path, sizeof path, "%s/m3-tiny-a/tokenizer.json", dir);
    int32_t rc = gw_tokenizer_load_file(path, &tok, &e);
    CHECK_MSG(rc == MM_OK, "%s", e.msg);
    if (rc) return test_done();
    CHECK_EQ_INT(gw_tokenizer_vocab_size(tok), 8199);

    snprintf(path, sizeof path, "%s/tokenizer/goldens.json", dir);
    json_error_t je;
    json_t *g = json_load_file(path, 0, &je);
    CHECK_MSG(g && json_is_array(g), "%s: %s", path, je.text);
    size_t i;
    json_t *c;
    json_array_foreach(g, i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t text_len = json_string_length(json_object_get(c, "text"));
        const char *decoded = json_string_value(json_object_get(c, "decoded"));
        json_t *jids = json_object_get(c, "ids");
        size_t n = json_array_size(jids);
        uint32_t *want = calloc(n + 1, sizeof *want);
        for (size_t k = 0; k < n; k++) want[k] = (uint32_t)json_integer_value(json_array_get(jids, k));

        struct gw_tok_ids ids = {0};
        rc = gw_tokenizer_encode(tok, text, text_len, 0, &ids, &e);
        CHECK_MSG(rc == MM_OK, "case %zu: %s", i, e.msg);
        int same = ids.n == n && (n == 0 || memcmp(ids.ids, want, n * sizeof *want) == 0);
        CHECK_MSG(same, "case %zu '%.40s': %zu ids, want %zu", i, text, ids.n, n);
        if (!same)
            for (size_t k = 0; k < ids.n || k < n; k++)
                fprintf(stderr, "  [%zu] got %ld want %ld\n", k, k < ids.n ? (long)ids.ids[k] : -1L,
                        k < n ? (long)want[k] : -1L);

        struct mm_buf out;
        mm_buf_init(&out, 0);
        rc = gw_tokenizer_decode(tok, want, n, 0, &out, &e);
        CHECK_MSG(rc == MM_OK && out.len == strlen(decoded) && memcmp(out.data, decoded, out.len) == 0,
                  "case %zu: decode '%s' want '%s'", i, out.data ? out.data : "", decoded);

        /* streaming, one id at a time */
        struct mm_buf acc;
        mm_buf_init(&acc, 0);
        struct gw_tok_stream st;
        gw_tok_stream_init(&st, tok, 0);
        for (size_t k = 0; k < n; k++) {
            struct mm_buf d;
            mm_buf_init(&d, 0);
            CHECK(gw_tok_stream_push(&st, want[k], &d, &e) == MM_OK);
            CHECK_MSG(utf8_ok((unsigned char *)d.data, d.len), "case %zu: delta %zu not UTF-8", i, k);
            mm_buf_append(&acc, d.data ? d.data : "", d.len);
            mm_buf_free(&d);
        }
        CHECK(gw_tok_stream_finish(&st, &acc, &e) == MM_OK);
        CHECK_MSG(acc.len == strlen(decoded) && (acc.len == 0 || memcmp(acc.data, decoded, acc.len) == 0),
                  "case %zu: streamed text differs", i);
        mm_buf_free(&acc);
        mm_buf_free(&out);
        gw_tok_ids_free(&ids);
        free(want);
    }
    json_decref(g);
    gw_tokenizer_free(tok);
    return test_done();
}
