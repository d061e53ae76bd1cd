/* Loading tokenizer.json: malformed or unsupported documents fail with the right status and a one-line
 * message naming the field; nothing is returned on failure; files that do not exist or are not files
 * fail with MM_IO. The fast vocab/merges reader and the jansson path agree. */
#include <unistd.h>

#include "mmgw_test.h"
#include "tok_test_util.h"

static int32_t load(const char *json, char *msg, size_t msg_cap)
{
    struct gw_tokenizer *tok = (struct gw_tokenizer *)(uintptr_t)1; /* must be reset to NULL on failure */
    struct mm_err e;
    mm_err_clear(&e);
    int32_t rc = gw_tokenizer_load_mem(json, strlen(json), "t.json", &tok, &e);
    if (rc) {
        CHECK_MSG(tok == NULL, "tokenizer returned on failure");
        CHECK_MSG(e.code == rc && e.msg[0] && !strchr(e.msg, '\n'), "no one-line message for %d", rc);
    } else {
        gw_tokenizer_free(tok);
    }
    snprintf(msg, msg_cap, "%s", rc ? e.msg : "");
    return rc;
}

#define EXPECT(json, code, needle)                                                                           \
    do {                                                                                                     \
        char m__[600];                                                                                       \
        int32_t rc__ = load(json, m__, sizeof m__);                                                          \
        CHECK_MSG(rc__ == (code), "%s: rc %d want %d (%s)", #needle, rc__, (int)(code), m__);                \
        CHECK_MSG(!*(needle) || strstr(m__, needle), "message '%s' lacks '%s'", m__, needle);                \
    } while (0)

#define BL "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"}"

int main(void)
{
    EXPECT("", MM_FORMAT, "t.json");
    EXPECT("{", MM_FORMAT, "t.json");
    EXPECT("[]", MM_FORMAT, "not an object");
    EXPECT("null", MM_FORMAT, "");
    EXPECT("{}", MM_FORMAT, "model");
    EXPECT("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}," BL "}", MM_UNSUPPORTED, "WordPiece");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":[]}," BL "}", MM_FORMAT, "model.vocab");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}," BL "}", MM_TOO_LARGE, "model.vocab['a']");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999}}," BL "}", MM_TOO_LARGE,
           "out of range");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5}}," BL "}", MM_FORMAT, "not an integer");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"}}," BL "}", MM_FORMAT, "model.vocab");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}," BL "}",
           MM_FORMAT, "model.merges[0]: token 'c' not in vocab");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}," BL "}",
           MM_FORMAT, "merged token 'ab' not in vocab");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a a\"]}," BL "}", MM_FORMAT,
           "model.merges[0]");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}," BL "}", MM_FORMAT,
           "model.merges");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":{}}," BL "}", MM_FORMAT,
           "model.merges");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"dropout\":0.1}," BL "}", MM_UNSUPPORTED,
           "dropout");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"unk_token\":\"a\"}," BL "}", MM_UNSUPPORTED,
           "unk_token");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"continuing_subword_prefix\":\"##\"}," BL "}",
           MM_UNSUPPORTED, "continuing_subword_prefix");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"normalizer\":{\"type\":\"Lowercase\"}," BL
           "}",
           MM_UNSUPPORTED, "Lowercase");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
           "\"decoder\":{\"type\":\"WordPiece\"}}",
           MM_UNSUPPORTED, "WordPiece");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}",
           MM_UNSUPPORTED, "decoder");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":[{\"id\":1}]," BL "}",
           MM_FORMAT, "added_tokens[0].content");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":{}," BL "}", MM_FORMAT,
           "added_tokens");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"post_processor\":{\"type\":"
           "\"TemplateProcessing\","
           "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":{}}," BL "}",
           MM_FORMAT, "post_processor.single[0]");
    EXPECT(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":"
        "{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
        MM_INVALID, "pre_tokenizer Split");
    EXPECT(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":"
        "{\"Regex\":\"a\"},\"behavior\":\"Sideways\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
        MM_FORMAT, "behavior");
    /* strings: invalid escapes and lone surrogates are malformed JSON in either reader */
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0}}," BL "}", MM_FORMAT, "");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\q\":0}}," BL "}", MM_FORMAT, "");
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}," BL ",\"x\":[1,2}", MM_FORMAT, "t.json");
    /* a minimal valid document, with escapes in keys and merges in pair form */
    EXPECT("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u0061\":0,\"b\":1,\"ab\":2,\"\\\"\":3},"
           "\"merges\":[[\"a\",\"b\"]]}," BL "}",
           MM_OK, "");

    /* escapes decode to the same tokens in the fast reader as in jansson: "\u0120" is "Ġ" */
    struct gw_tokenizer *tok = NULL;
    struct mm_err e;
    const char *doc = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u0120\":0,\"x\":1,\"\\u0120x\":2},"
                      "\"merges\":[\"\\u0120 x\"]}," BL "}";
    CHECK(gw_tokenizer_load_mem(doc, strlen(doc), "t", &tok, &e) == MM_OK);
    if (tok) {
        uint32_t id;
        CHECK(gw_tokenizer_token_to_id(tok, "\xC4\xA0x", 3, &id) == MM_OK && id == 2);
        CHECK(tt_encode_is(tok, " x", 2, 0, TT_IDS(2)));
        gw_tokenizer_free(tok);
    }

    /* files */
    CHECK_EQ_INT(gw_tokenizer_load_file("/nonexistent/tokenizer.json", &tok, &e), MM_IO);
    CHECK(strstr(e.msg, "/nonexistent/tokenizer.json") != NULL);
    CHECK_EQ_INT(gw_tokenizer_load_file("/tmp", &tok, &e), MM_IO);
    char path[] = "/tmp/mmgw_tok_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    char *js = tt_json(NULL, 0, NULL);
    CHECK(write(fd, js, strlen(js)) == (ssize_t)strlen(js));
    close(fd);
    CHECK(gw_tokenizer_load_file(path, &tok, &e) == MM_OK && gw_tokenizer_vocab_size(tok) == 256);
    gw_tokenizer_free(tok);
    /* truncated at every 97th byte: always an error, never a crash */
    size_t n = strlen(js);
    for (size_t cut = 0; cut < n; cut += 97) {
        struct gw_tokenizer *t2 = NULL;
        CHECK(gw_tokenizer_load_mem(js, cut, "cut", &t2, &e) != MM_OK && t2 == NULL);
    }
    free(js);
    unlink(path);
    gw_tokenizer_free(NULL);
    return test_done();
}
