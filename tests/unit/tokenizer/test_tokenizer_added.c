/* Added and special tokens: HF's own AddedVocabulary test cases (expected splits taken from
 * tokenizers/src/tokenizer/added_vocabulary.rs, with the input already lower-cased because we do not
 * support the Lowercase normalizer), HF's id assignment, normalized vs raw matching, the API listing. */
#include "mmgw_test.h"
#include "tok_test_util.h"

/* Append the byte ids of a string (a tokenizer without merges encodes text as its bytes). */
static size_t bytes_ids(uint32_t *out, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) out[i] = (unsigned char)s[i];
    return n;
}

struct seq {
    uint32_t v[256];
    size_t n;
};
static void seq_text(struct seq *q, const char *s)
{
    q->n += bytes_ids(q->v + q->n, s);
}
static void seq_id(struct seq *q, uint32_t id)
{
    q->v[q->n++] = id;
}

int main(void)
{
    struct gw_tokenizer *tok;
    struct seq q;

    /* options_use_cases: my (lstrip+rstrip), name, ony (single_word) are normalized; [CLS] [SEP] special */
    tok = tt_load(NULL, 0,
                  "{\"added_tokens\": ["
                  "{\"id\": 256, \"content\": \"my\", \"lstrip\": true, \"rstrip\": true, \"normalized\": "
                  "true, \"special\": false},"
                  "{\"id\": 257, \"content\": \"name\", \"normalized\": true, \"special\": false},"
                  "{\"id\": 258, \"content\": \"ony\", \"single_word\": true, \"normalized\": true, "
                  "\"special\": false},"
                  "{\"id\": 259, \"content\": \"[CLS]\", \"normalized\": false, \"special\": true},"
                  "{\"id\": 260, \"content\": \"[SEP]\", \"normalized\": false, \"special\": true}]}");
    q.n = 0;
    seq_id(&q, 259);
    seq_id(&q, 256);
    seq_id(&q, 257);
    seq_text(&q, " is anthony ");
    seq_id(&q, 260);
    const char *in1 = "[CLS] my name is anthony [SEP]";
    CHECK(tt_encode_is(tok, in1, strlen(in1), 0, q.v, q.n));
    /* the API view of the same tokens */
    CHECK_EQ_INT(gw_tokenizer_added_count(tok), 5);
    struct gw_tok_added_info info;
    CHECK(gw_tokenizer_added_get(tok, 0, &info) == MM_OK && info.id == 256 &&
          strcmp(info.content, "my") == 0 && info.lstrip && info.rstrip && !info.special);
    CHECK(gw_tokenizer_added_get(tok, 4, &info) == MM_OK && info.id == 260 && info.special &&
          !info.normalized);
    CHECK(gw_tokenizer_added_get(tok, 5, &info) == MM_NOT_FOUND);
    uint32_t id = 0;
    CHECK(gw_tokenizer_token_to_id(tok, "[SEP]", 5, &id) == MM_OK && id == 260);
    CHECK(gw_tokenizer_token_to_id(tok, "[SEP", 4, &id) == MM_NOT_FOUND);
    size_t len = 0;
    const char *t = gw_tokenizer_id_to_token(tok, 259, &len);
    CHECK(t && len == 5 && memcmp(t, "[CLS]", 5) == 0);
    CHECK(gw_tokenizer_id_to_token(tok, 261, &len) == NULL);
    gw_tokenizer_free(tok);

    /* test_single_word_is_correct */
    tok = tt_load(NULL, 0,
                  "{\"added_tokens\": [{\"id\": 256, \"content\": \"<mask>\", \"single_word\": true, "
                  "\"special\": false}]}");
    q.n = 0;
    seq_id(&q, 256);
    seq_text(&q, " my name ");
    seq_id(&q, 256);
    seq_text(&q, " a<mask> <mask>ony ");
    seq_id(&q, 256);
    const char *in2 = "<mask> my name <mask> a<mask> <mask>ony <mask>";
    CHECK(tt_encode_is(tok, in2, strlen(in2), 0, q.v, q.n));
    /* test_single_word_is_unicode_correct: punctuation is not a word, a combining mark is */
    q.n = 0;
    seq_id(&q, 256);
    seq_text(&q, ", ");
    seq_id(&q, 256);
    seq_text(&q, "- \xE2\x97\x8C\xCC\xB0<mask>");
    const char *in3 = "<mask>, <mask>- \xE2\x97\x8C\xCC\xB0<mask>";
    CHECK(tt_encode_is(tok, in3, strlen(in3), 0, q.v, q.n));
    gw_tokenizer_free(tok);

    /* test_lstrip_unicode_space: whitespace is Unicode White_Space (TAB, U+2000) */
    tok = tt_load(
        NULL, 0,
        "{\"added_tokens\": [{\"id\": 256, \"content\": \"<mask>\", \"lstrip\": true, \"rstrip\": true,"
        " \"single_word\": true, \"special\": false}]}");
    q.n = 0;
    seq_text(&q, "hi");
    seq_id(&q, 256);
    seq_text(&q, "there");
    seq_id(&q, 256);
    seq_id(&q, 256);
    const char *in4 = "hi <mask> there\t<mask>\t<mask>\xE2\x80\x80";
    CHECK(tt_encode_is(tok, in4, strlen(in4), 0, q.v, q.n));
    gw_tokenizer_free(tok);

    /* Leftmost-longest: "<a>" and "<a>b" both added; the longer wins at the same start, and the
     * earlier start wins over a longer later match. Adjacent tokens and text. */
    tok = tt_load(
        NULL, 0,
        "{\"added_tokens\": [{\"id\": 256, \"content\": \"<a>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 257, \"content\": \"<a>b\", \"special\": true, \"normalized\": false},"
        "{\"id\": 258, \"content\": \"a>bc\", \"special\": true, \"normalized\": false}]}");
    CHECK(tt_encode_is(tok, "x<a>bc<a><a>", 12, 0, TT_IDS('x', 257, 'c', 256, 256)));
    CHECK(tt_encode_is(tok, "<a", 2, 0, TT_IDS('<', 'a')));
    CHECK(tt_encode_is(tok, "a>bc", 4, 0, TT_IDS(258)));
    gw_tokenizer_free(tok);

    /* HF id assignment: ids in the file are not trusted. A token already in the vocab keeps its vocab
     * id; new tokens get vocab size, then the largest added id + 1 (the gap at 300 closes). */
    tok = tt_load(
        NULL, 0,
        "{\"added_tokens\": [{\"id\": 300, \"content\": \"<x>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 5, \"content\": \"A\", \"special\": true, \"normalized\": false},"
        "{\"id\": 310, \"content\": \"<y>\", \"special\": false, \"normalized\": false}]}");
    CHECK(gw_tokenizer_token_to_id(tok, "<x>", 3, &id) == MM_OK && id == 256);
    CHECK(gw_tokenizer_token_to_id(tok, "A", 1, &id) == MM_OK && id == 'A');
    CHECK(gw_tokenizer_token_to_id(tok, "<y>", 3, &id) == MM_OK && id == 257);
    CHECK_EQ_INT(gw_tokenizer_vocab_size(tok), 258);
    CHECK(gw_tokenizer_is_special(tok, 'A')); /* the byte token "A" is now special */
    CHECK(tt_encode_is(tok, "BAB<y>", 6, 0, TT_IDS('B', 'A', 'B', 257)));
    gw_tokenizer_free(tok);

    /* normalized tokens are matched on NFC text; raw ones on the original text */
    tok = tt_load(
        NULL, 0,
        "{\"normalizer\": {\"type\": \"NFC\"}, \"added_tokens\": ["
        "{\"id\": 256, \"content\": \"caf\xC3\xA9\", \"special\": false, \"normalized\": true},"
        "{\"id\": 257, \"content\": \"r\xC3\xA9sum\xC3\xA9\", \"special\": true, \"normalized\": false}]}");
    /* "cafe" + U+0301 composes to "café" before matching */
    CHECK(tt_encode_is(tok, "cafe\xCC\x81!", 7, 0, TT_IDS(256, '!')));
    /* "résumé" decomposed: no raw match; NFC composes the text, whose bytes are encoded */
    CHECK(tt_encode_is(tok, "re\xCC\x81sume\xCC\x81", 10, 0,
                       TT_IDS('r', 0xC3, 0xA9, 's', 'u', 'm', 0xC3, 0xA9)));
    CHECK(tt_encode_is(tok, "r\xC3\xA9sum\xC3\xA9", 8, 0, TT_IDS(257)));
    /* each piece is normalized on its own: a combining mark after a special token stays alone */
    CHECK(tt_encode_is(tok, "r\xC3\xA9sum\xC3\xA9\xCC\x81", 10, 0, TT_IDS(257, 0xCC, 0x81)));
    gw_tokenizer_free(tok);

    /* redefinition: the last flags win (here rstrip is switched on) */
    tok = tt_load(
        NULL, 0,
        "{\"added_tokens\": [{\"id\": 256, \"content\": \"<t>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 256, \"content\": \"<t>\", \"special\": true, \"normalized\": false, \"rstrip\": true}]}");
    CHECK(tt_encode_is(tok, "<t>  x", 6, 0, TT_IDS(256, 'x')));
    CHECK_EQ_INT(gw_tokenizer_added_count(tok), 1);
    gw_tokenizer_free(tok);

    /* post_processor TemplateProcessing: only with GW_TOK_ADD_SPECIAL */
    tok = tt_load(
        NULL, 0,
        "{\"added_tokens\": [{\"id\": 256, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 257, \"content\": \"</s>\", \"special\": true, \"normalized\": false}],"
        "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
        "{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": "
        "0}},"
        "{\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], \"pair\": [],"
        "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [256], \"tokens\": [\"<s>\"]},"
        "\"</s>\": {\"id\": \"</s>\", \"ids\": [257], \"tokens\": [\"</s>\"]}}}}");
    CHECK(tt_encode_is(tok, "hi", 2, 0, TT_IDS('h', 'i')));
    CHECK(tt_encode_is(tok, "hi", 2, GW_TOK_ADD_SPECIAL, TT_IDS(256, 'h', 'i', 257)));
    CHECK(tt_encode_is(tok, "", 0, GW_TOK_ADD_SPECIAL, TT_IDS(256, 257)));
    /* encode appends */
    struct gw_tok_ids ids = {0};
    struct mm_err e;
    CHECK(gw_tokenizer_encode(tok, "a", 1, 0, &ids, &e) == MM_OK);
    CHECK(gw_tokenizer_encode(tok, "<s>b", 4, 0, &ids, &e) == MM_OK);
    CHECK(ids.n == 3 && ids.ids[0] == 'a' && ids.ids[1] == 256 && ids.ids[2] == 'b');
    gw_tok_ids_free(&ids);
    gw_tokenizer_free(tok);
    return test_done();
}
