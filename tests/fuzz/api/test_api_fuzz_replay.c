/* Deterministic replay of the API fuzz target in every build: each seed of the corpus, then fixed-seed
 * mutations of it: structural ones (a value of the JSON replaced by one of a list of awkward values, removed
 * or duplicated) and byte edits. The harness aborts on a broken invariant, which fails this test; a
 * sanitizer build (MMGW_SANITIZE) also reports leaks and memory errors.
 * Usage: test_api_fuzz_replay CORPUS_DIR [ROUNDS] */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_json_edit.h"

#include "api_fuzz.h"

static unsigned rng_state = 20250301;

static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return n ? (rng_state >> 8) % n : 0;
}

static json_t *random_value(void)
{
    static const char *const strs[] = {"",
                                       "auto",
                                       "none",
                                       "required",
                                       "text",
                                       "image_url",
                                       "video_url",
                                       "input_audio",
                                       "user",
                                       "tool",
                                       "assistant",
                                       "system",
                                       "data:image/png;base64,iVBORw0KGgo=",
                                       "data:,a%zz",
                                       "data:image/png;base64,@@@",
                                       "https://example.invalid/a.png",
                                       "file:///etc/passwd",
                                       "ftp://x/y",
                                       "]<]image[>[",
                                       "]<]video[>[",
                                       "]~b]ai\n[e~[",
                                       "caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80",
                                       "m3",
                                       "m3-tight",
                                       "nope"};
    switch (rnd(16)) {
    case 0:
        return json_string(strs[rnd(sizeof strs / sizeof strs[0])]);
    case 1:
        return json_integer((json_int_t)rnd(300) - 100);
    case 2:
        return json_integer(rnd(2) ? INT64_MAX : INT64_MIN);
    case 3:
        return json_integer(rnd(2) ? 2147483647 : 2147483648LL);
    case 4:
        return json_real(rnd(2) ? 1e308 : -0.0);
    case 5:
        return json_real(rnd(2) ? 0.5 : 2.0000001);
    case 6:
        return rnd(2) ? json_true() : json_false();
    case 7:
        return json_null();
    case 8:
        return json_object();
    case 9:
        return json_array();
    case 10:
        return json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url",
                         rnd(2) ? "data:image/png;base64,AAAA" : "http://127.0.0.1/x.png");
    case 11:
        return json_pack("{s:s, s:s}", "type", rnd(2) ? "video" : "image", rnd(2) ? "video" : "image",
                         "data:;base64,AAECAwQF");
    case 12:
        return json_pack("{s:s, s:s}", "role", rnd(2) ? "user" : "tool", "content", "c");
    case 13:
        return json_pack("[{s:s, s:{s:s}}]", "type", "function", "function", "name", "f");
    case 14: {
        json_t *deep = json_array();
        for (unsigned i = rnd(60); i > 0; i--) {
            json_t *o = json_array();
            json_array_append_new(o, deep);
            deep = o;
        }
        return deep;
    }
    default:
        return json_pack("{s:b}", "include_usage", rnd(2));
    }
}

static void mutate_json(json_t *root)
{
    static const char *const keys[] = {"n",
                                       "max_tokens",
                                       "stop",
                                       "stop_token_ids",
                                       "logprobs",
                                       "tools",
                                       "tool_choice",
                                       "response_format",
                                       "stream",
                                       "prompt",
                                       "messages",
                                       "multi_modal_data",
                                       "top_logprobs",
                                       "seed",
                                       "stream_options",
                                       "model"};
    struct fz_json_slot slots[512];
    const size_t n = fz_json_slots(root, slots, 512);
    if (n == 0 || rnd(4) == 0) { /* a top-level field the API reads */
        if (json_is_object(root))
            json_object_set_new(root, keys[rnd(sizeof keys / sizeof keys[0])], random_value());
        return;
    }
    const struct fz_json_slot *s = &slots[rnd((unsigned)n)];
    fz_json_edit(s, rnd(4), random_value); /* after the slot's draw: the replay's sequence is fixed */
}

static void replay(const char *seed, size_t len, int rounds)
{
    api_fuzz_body((const uint8_t *)seed, len);
    json_t *base = json_loadb(seed, len, 0, NULL);
    for (int i = 0; i < rounds && base; i++) {
        json_t *copy = json_deep_copy(base);
        for (unsigned k = 1 + rnd(3); k > 0; k--) mutate_json(copy);
        char *text = json_dumps(copy, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text) api_fuzz_body((const uint8_t *)text, strlen(text));
        free(text);
        json_decref(copy);
    }
    json_decref(base);
    char *buf = malloc(len + 1);
    for (int i = 0; i < rounds / 3 && buf; i++) {
        memcpy(buf, seed, len);
        size_t n = i % 3 == 0 ? rnd((unsigned)len + 1) : len; /* truncated, or a few bytes changed */
        for (unsigned k = i % 3 == 0 ? 0 : 1 + rnd(3); k > 0 && len; k--)
            buf[rnd((unsigned)len)] = i % 3 == 1 ? (char)(1 + rnd(255)) : "{}[]\",:\\0e-9"[rnd(12)];
        api_fuzz_body((const uint8_t *)buf, n);
    }
    free(buf);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) != NULL)
            *len = fread(b, 1, (size_t)n, f);
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [ROUNDS]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 150;
    struct dirent **names = NULL;
    int n = scandir(argv[1], &names, NULL, alphasort); /* sorted: the same mutations on every machine */
    if (n < 0) {
        fprintf(stderr, "FAILED: cannot open %s\n", argv[1]);
        return 1;
    }
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[1], names[i]->d_name);
            size_t len = 0;
            char *data = read_file(path, &len);
            if (data) {
                replay(data, len, rounds);
                free(data);
                count++;
            }
        }
        free(names[i]);
    }
    free(names);
    if (count == 0) {
        fprintf(stderr, "FAILED: no seed corpus under %s\n", argv[1]);
        return 1;
    }
    printf("ok: replayed %d request seeds with %d structural mutations each\n", count, rounds);
    return 0;
}
