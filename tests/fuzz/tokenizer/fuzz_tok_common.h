/* Shared by the tokenizer fuzz targets and their replay tests: a small byte-level tokenizer built in
 * memory with every feature the encoder has (NFC, the M3 split regex, merges, special tokens with
 * lstrip/rstrip/single_word/normalized), so fuzzing needs no files. */
#ifndef FUZZ_TOK_COMMON_H
#define FUZZ_TOK_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_tokenizer.h"

/* GPT-2 byte character of b as UTF-8 into out; returns the length. */
static inline size_t ft_bytechar(unsigned b, char *out)
{
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned cp = b;
    if (!printable) {
        unsigned n = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* tokenizer.json text (malloc'd): 256 byte tokens, merges over common English pairs, added tokens. */
static inline char *ft_tokenizer_json(void)
{
    static const char *const merges[][2] = {{"h", "e"},       {"t", "he"},   {" ", "t"}, {" t", "he"},
                                            {"i", "n"},       {"e", "r"},    {" ", "a"}, {"o", "n"},
                                            {"r", "e"},       {"a", "n"},    {" ", " "}, {"  ", "  "},
                                            {"\xC3", "\xA9"}, {"e", "\xCC"}, {"1", "2"}};
    size_t cap = 1 << 16, o = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    o += (size_t)snprintf(s + o, cap - o,
                          "{\"version\":\"1.0\",\"added_tokens\":["
                          "{\"id\":271,\"content\":\"<|im_end|>\",\"special\":true,\"normalized\":false},"
                          "{\"id\":272,\"content\":\"]<]image[>[\",\"special\":true,\"normalized\":false},"
                          "{\"id\":273,\"content\":\"<mask>\",\"special\":false,\"lstrip\":true,\"rstrip\":"
                          "true,\"single_word\":true},"
                          "{\"id\":274,\"content\":\"caf\\u00e9\",\"special\":false,\"normalized\":true}],"
                          "\"normalizer\":{\"type\":\"NFC\"},"
                          "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                          "\"pattern\":{\"Regex\":"
                          "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
                          "?[^\\\\s\\\\p{L}\\\\p{N}]+"
                          "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":"
                          "\"Isolated\",\"invert\":false},"
                          "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
                          "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (unsigned b = 0; b < 256; b++) {
        char c[4];
        size_t l = ft_bytechar(b, c);
        s[o++] = '"';
        if (c[0] == '"' || c[0] == '\\') s[o++] = '\\';
        memcpy(s + o, c, l);
        o += l;
        o += (size_t)snprintf(s + o, cap - o, "\":%u,", b);
    }
    size_t n_merges = sizeof merges / sizeof merges[0];
    for (size_t i = 0; i < n_merges; i++) {
        s[o++] = '"';
        for (int k = 0; k < 2; k++)
            for (const char *p = merges[i][k]; *p; p++) {
                char c[4];
                size_t l = ft_bytechar((unsigned char)*p, c);
                memcpy(s + o, c, l);
                o += l;
            }
        o += (size_t)snprintf(s + o, cap - o, "\":%zu%s", 256 + i, i + 1 < n_merges ? "," : "},\"merges\":[");
    }
    for (size_t i = 0; i < n_merges; i++) {
        s[o++] = '"';
        for (int k = 0; k < 2; k++) {
            if (k) s[o++] = ' ';
            for (const char *p = merges[i][k]; *p; p++) {
                char c[4];
                size_t l = ft_bytechar((unsigned char)*p, c);
                memcpy(s + o, c, l);
                o += l;
            }
        }
        s[o++] = '"';
        if (i + 1 < n_merges) s[o++] = ',';
    }
    o += (size_t)snprintf(s + o, cap - o, "]}}");
    s[o] = '\0';
    return s;
}

static inline struct gw_tokenizer *ft_tokenizer(void)
{
    char *js = ft_tokenizer_json();
    struct gw_tokenizer *tok = NULL;
    struct mm_err e;
    if (!js || gw_tokenizer_load_mem(js, strlen(js), "fuzz", &tok, &e)) {
        fprintf(stderr, "fuzz tokenizer does not load: %s\n", js ? e.msg : "out of memory");
        abort();
    }
    free(js);
    return tok;
}

#endif
