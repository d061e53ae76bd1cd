/* mm_text.h: hex digits, UTF-8 sequence lengths (every lead byte, the boundaries of each range, overlong
 * forms, surrogates, cut sequences) and strict decimal integers. */
#include <limits.h>

#include "mm_text.h"
#include "mmgw_test.h"

static size_t seq(const char *s, size_t n)
{
    return mm_utf8_seq_len((const uint8_t *)s, n);
}

int main(void)
{
    for (int c = -1; c < 256; c++) {
        int want = -1;
        if (c >= '0' && c <= '9') want = c - '0';
        if (c >= 'a' && c <= 'f') want = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') want = c - 'A' + 10;
        CHECK_EQ_INT(mm_hex_digit(c), want);
    }
    CHECK_EQ_INT(mm_hex_digit((char)0xe6), -1); /* a negative char */

    CHECK_EQ_INT(seq("a", 1), 1);
    CHECK_EQ_INT(seq("\x7f", 1), 1);
    CHECK_EQ_INT(seq("\xc2\x80", 2), 2);     /* U+0080 */
    CHECK_EQ_INT(seq("\xdf\xbf", 2), 2);     /* U+07FF */
    CHECK_EQ_INT(seq("\xe0\xa0\x80", 3), 3); /* U+0800 */
    CHECK_EQ_INT(seq("\xed\x9f\xbf", 3), 3); /* U+D7FF */
    CHECK_EQ_INT(seq("\xee\x80\x80", 3), 3); /* U+E000 */
    CHECK_EQ_INT(seq("\xef\xbf\xbf", 3), 3); /* U+FFFF */
    CHECK_EQ_INT(seq("\xf0\x90\x80\x80", 4), 4);
    CHECK_EQ_INT(seq("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
    CHECK_EQ_INT(seq("\x80", 1), 0);             /* a lone continuation byte */
    CHECK_EQ_INT(seq("\xc0\x80", 2), 0);         /* overlong NUL */
    CHECK_EQ_INT(seq("\xc1\xbf", 2), 0);
    CHECK_EQ_INT(seq("\xe0\x9f\xbf", 3), 0);     /* overlong U+07FF */
    CHECK_EQ_INT(seq("\xf0\x8f\xbf\xbf", 4), 0); /* overlong U+FFFF */
    CHECK_EQ_INT(seq("\xed\xa0\x80", 3), 0);     /* U+D800 */
    CHECK_EQ_INT(seq("\xed\xbf\xbf", 3), 0);     /* U+DFFF */
    CHECK_EQ_INT(seq("\xf4\x90\x80\x80", 4), 0); /* U+110000 */
    CHECK_EQ_INT(seq("\xf5\x80\x80\x80", 4), 0);
    CHECK_EQ_INT(seq("\xff", 1), 0);
    CHECK_EQ_INT(seq("\xe2\x82", 2), 0);     /* cut by the end */
    CHECK_EQ_INT(seq("\xe2\x82\xac", 2), 0); /* n says the third byte is not there */
    CHECK_EQ_INT(seq("\xe2\x28\xa1", 3), 0); /* a non-continuation inside */
    CHECK_EQ_INT(seq("\xe2\x82\xac!", 4), 3);

    int64_t v = 42;
    CHECK_EQ_INT(mm_parse_i64("0", 0, 10, &v), 0);
    CHECK_EQ_INT(v, 0);
    CHECK_EQ_INT(mm_parse_i64("-17", -20, 0, &v), 0);
    CHECK_EQ_INT(v, -17);
    CHECK_EQ_INT(mm_parse_i64("+5", 0, 10, &v), 0);
    CHECK_EQ_INT(v, 5);
    CHECK_EQ_INT(mm_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
    CHECK(v == INT64_MAX);
    CHECK_EQ_INT(mm_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
    CHECK(v == INT64_MIN);
    v = 7;
    const char *bad[] = {"",
                         " 5",
                         "5 ",
                         "\t5",
                         "5x",
                         "0x10",
                         "--5",
                         "+",
                         "-",
                         "1e3",
                         "9223372036854775808",
                         "-9223372036854775809",
                         "11",
                         "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(mm_parse_i64(bad[i], i < 12 ? INT64_MIN : 0, i < 12 ? INT64_MAX : 10, &v) == -1 && v == 7,
                  "'%s' accepted", bad[i]);
    CHECK_EQ_INT(mm_parse_i64(NULL, 0, 10, &v), -1);
    CHECK_EQ_INT(mm_parse_i64("10", 0, 10, &v), 0);
    CHECK_EQ_INT(v, 10);
    return test_done();
}
