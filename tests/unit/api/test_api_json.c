/* The hand-written JSON writers: escapes, invalid UTF-8 (every output must be valid JSON and UTF-8), numbers.
 */
#include <stdint.h>

#include "gw_api_json.h"
#include "mmgw_test.h"

static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

static void str_case(const char *in, size_t n, const char *want)
{
    struct mm_buf b;
    mm_buf_init(&b, 0);
    CHECK(gw_json_str(&b, in, n) == 0);
    CHECK_MSG(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0, "got %s want %s", b.data, want);
    mm_buf_free(&b);
}

/* Characters of a JSON string literal as a JSON parser reads it: an escape is one, a UTF-8 sequence one. */
static size_t json_literal_chars(const char *s, size_t n)
{
    size_t chars = 0;
    for (size_t i = 1; i + 1 < n; chars++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\')
            i += s[i + 1] == 'u' ? 6 : 2;
        else
            i += c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    }
    return chars;
}

int main(void)
{
    /* gw_json_str_chars counts what gw_json_str writes (logprobs' text_offset is built on it) */
    CHECK(gw_json_str_chars("", 0) == 0);
    CHECK(gw_json_str_chars("a\x80"
                            "b",
                            3) == 3);
    CHECK(gw_json_str_chars("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9) == 3);
    CHECK(gw_json_str_chars("\xe2\x82", 2) == 2);
    CHECK(gw_json_str_chars("x\n\"", 3) == 3);
    str_case("plain", 5, "\"plain\"");
    str_case("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    str_case("\n\r\t\b\f\x01\x1f", 7, "\"\\n\\r\\t\\b\\f\\u0001\\u001f\"");
    str_case("nul\0x", 5, "\"nul\\u0000x\"");
    str_case("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    /* invalid bytes: a lone continuation, a truncated sequence, an overlong form, a surrogate, 0xff */
    str_case("a\x80"
             "b",
             3,
             "\"a\xef\xbf\xbd"
             "b\"");
    str_case("\xe2\x82", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    str_case("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    str_case("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    str_case("\xff", 1, "\"\xef\xbf\xbd\"");
    /* every byte string becomes valid UTF-8 inside quotes */
    uint64_t s = 7;
    for (int t = 0; t < 2000; t++) {
        unsigned char in[32];
        for (size_t i = 0; i < sizeof in; i++) {
            s = s * 6364136223846793005ull + 1;
            in[i] = (unsigned char)(s >> 57 | (t & 1 ? 0x80 : 0));
        }
        struct mm_buf b;
        mm_buf_init(&b, 0);
        CHECK(gw_json_str(&b, (const char *)in, sizeof in) == 0);
        CHECK(valid_utf8((const unsigned char *)b.data, b.len) && b.data[0] == '"' &&
              b.data[b.len - 1] == '"');
        CHECK_MSG(gw_json_str_chars((const char *)in, sizeof in) == json_literal_chars(b.data, b.len),
                  "chars %zu, literal %zu", gw_json_str_chars((const char *)in, sizeof in),
                  json_literal_chars(b.data, b.len));
        mm_buf_free(&b);
    }
    struct mm_buf b;
    mm_buf_init(&b, 0);
    CHECK(gw_json_num(&b, -0.5) == 0 && gw_json_num(&b, 1.0 / 0.0) == 0 && gw_json_num(&b, -5) == 0 &&
          mm_buf_append(&b, " ", 1) == 0 && gw_json_num(&b, 0.1f) == 0);
    CHECK_STR(b.data, "-0.5-9999.0-5.0 0.100000001");
    mm_buf_free(&b);
    return test_done();
}
