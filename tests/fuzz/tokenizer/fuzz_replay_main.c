/* Deterministic replay of a fuzz target for normal CTest runs (and the sanitizer build): hand-picked
 * seeds plus a few thousand pseudo-random mutations of them, in a couple of seconds. Built with
 * -DREPLAY_LOAD for fuzz_tok_load.c, otherwise for fuzz_tok_encode.c. */
#include "fuzz_tok_common.h"
#include "mmgw_test.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return n ? (uint32_t)(g_rng >> 16) % n : 0;
}

/* Mutate buf[0..*n) in place (cap bytes room): byte flips, interesting bytes, cuts, duplications. */
static void mutate(uint8_t *buf, size_t *n, size_t cap)
{
    static const uint8_t interesting[] = {0x00, 0x22, 0x5C, 0x7B, 0x7D, 0x5B, 0x5D, 0x3A, 0x2C, 0x2D,
                                          0x30, 0x39, 0x20, 0x0A, 0x0D, 0x80, 0xBF, 0xC2, 0xE0, 0xED,
                                          0xF0, 0xF4, 0xFF, '<',  '>',  '|',  'e',  '\'', 's'};
    int ops = 1 + (int)rnd(4);
    for (int k = 0; k < ops; k++) {
        switch (rnd(5)) {
        case 0:
            if (*n) buf[rnd((uint32_t)*n)] ^= (uint8_t)(1u << rnd(8));
            break;
        case 1:
            if (*n) buf[rnd((uint32_t)*n)] = interesting[rnd(sizeof interesting)];
            break;
        case 2:
            if (*n) *n = rnd((uint32_t)*n + 1);
            break;
        case 3: { /* duplicate a slice */
            if (!*n) break;
            size_t a = rnd((uint32_t)*n), l = rnd((uint32_t)(*n - a) + 1);
            if (*n + l <= cap) {
                memmove(buf + a + l, buf + a, *n - a);
                *n += l;
            }
            break;
        }
        default: /* delete a slice */
            if (*n) {
                size_t a = rnd((uint32_t)*n), l = rnd((uint32_t)(*n - a) + 1);
                memmove(buf + a, buf + a + l, *n - a - l);
                *n -= l;
            }
        }
    }
}

int main(void)
{
#ifdef REPLAY_LOAD
    char *valid = ft_tokenizer_json();
    static const char *const seeds[] = {
        "",
        "{",
        "[]",
        "null",
        "{\"model\":{}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
        "{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
        "\"decoder\":{\"type\":\"ByteLevel\"}}",
        "{\"model\":{\"vocab\":{\"a\":99999999999},\"merges\":[\"a a\"]}}",
        "{\"model\":{\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[[\"a\",\"a\"]]},\"pre_tokenizer\":{\"type\":"
        "\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},\"added_tokens\":[{\"id\":5,\"content\":\"x\"}]"
        "}",
        "{\"model\":{\"vocab\":{\"\\ud800\":0}}}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    };
    size_t n_seeds = sizeof seeds / sizeof seeds[0] + 1, cap = strlen(valid) * 2 + 64;
    uint8_t *buf = malloc(cap);
    for (size_t s = 0; s < n_seeds; s++) {
        const char *seed = s < n_seeds - 1 ? seeds[s] : valid;
        LLVMFuzzerTestOneInput((const uint8_t *)seed, strlen(seed));
    }
    for (int it = 0; it < 600; it++) {
        size_t n = strlen(valid);
        memcpy(buf, valid, n);
        mutate(buf, &n, cap);
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
    free(valid);
    CHECK(1);
#else
    static const struct {
        const char *s;
        size_t n;
    } seeds[] = {
        {"\0Hello, world! I'll be there; you're not.",
         sizeof("\0Hello, world! I'll be there; you're not.") - 1},
        {"\0<|im_end|>x]<]image[>[]<]image[>[<mask> a <mask>b caf\xC3\xA9 cafe\xCC\x81",
         sizeof("\0<|im_end|>x]<]image[>[]<]image[>[<mask> a <mask>b caf\xC3\xA9 cafe\xCC\x81") - 1},
        {"\2the   the\r\n\r\n\tthe 12345 \xC2\x85 \xE2\x80\x80 \xF0\x9F\x98\x80\xE2\x80\x8D",
         sizeof("\2the   the\r\n\r\n\tthe 12345 \xC2\x85 \xE2\x80\x80 \xF0\x9F\x98\x80\xE2\x80\x8D") - 1},
        {"\0\xC3\x28 invalid \xED\xA0\x80 \xF4\x90\x80\x80",
         sizeof("\0\xC3\x28 invalid \xED\xA0\x80 \xF4\x90\x80\x80") - 1},
        {"\1\x01\x00\x02\x00\xC3\x00\xA9\x00\x10\x01\x0F\x01\x00\x01",
         sizeof("\1\x01\x00\x02\x00\xC3\x00\xA9\x00\x10\x01\x0F\x01\x00\x01") - 1},
        {"\3\xF0\x00\x9F\x00\x98\x00\x80\x00\xFF\x00\x00\x01",
         sizeof("\3\xF0\x00\x9F\x00\x98\x00\x80\x00\xFF\x00\x00\x01") - 1},
        {"\0'S'LL'\xC5\xBF "
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         sizeof("\0'S'LL'\xC5\xBF "
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") -
             1},
    };
    uint8_t buf[512];
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        size_t n = seeds[s].n < sizeof buf ? seeds[s].n : sizeof buf;
        memcpy(buf, seeds[s].s, n);
        LLVMFuzzerTestOneInput(buf, n);
        for (int it = 0; it < 400; it++) {
            size_t m = n;
            memcpy(buf, seeds[s].s, n);
            mutate(buf, &m, sizeof buf);
            LLVMFuzzerTestOneInput(buf, m);
        }
    }
    /* long inputs: the BPE heap path and cache clearing */
    uint8_t *big = malloc(200001);
    big[0] = 0;
    for (size_t i = 1; i < 200001; i++) big[i] = (uint8_t)("abcdefgh  \n"[rnd(11)]);
    LLVMFuzzerTestOneInput(big, 200001);
    memset(big + 1, 'a', 100000);
    LLVMFuzzerTestOneInput(big, 100001);
    free(big);
    CHECK(1);
#endif
    return test_done();
}
