/* Deterministic replay of the chat fuzz targets in every build: the seed corpus, then fixed-seed mutations
 * of each seed (structural ones for requests, marker splices for outputs). The harness aborts on a broken
 * invariant, which fails this test. Usage: test_chat_fuzz_replay CORPUS_DIR */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_json_edit.h"

#include "chat_fixture.h"
#include "chat_fuzz.h"

static unsigned rng_state = 20240601;

static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return n ? (rng_state >> 8) % n : 0;
}

static json_t *random_value(void)
{
    switch (rnd(14)) {
    case 0:
        return json_string("");
    case 1:
        return json_string("</mm:think>x<mm:think>y");
    case 2:
        return json_string("]<]image[>[ caf\xc3\xa9 \xe2\x98\x83");
    case 3:
        return json_integer((json_int_t)rnd(1000) - 500);
    case 4:
        return json_real(rnd(2) ? 1e-5 : 123456789.125);
    case 5:
        return json_true();
    case 6:
        return json_null();
    case 7:
        return json_object();
    case 8:
        return json_array();
    case 9:
        return json_pack("{s:s, s:i}", "type", rnd(2) ? "image" : "video", "mmgw_media", (int)rnd(80) - 4);
    case 10:
        return json_pack("{s:s, s:s}", "type", "text", "text", "t");
    case 11:
        return json_pack("{s:s, s:[{s:{s:s, s:s}}]}", "role", "assistant", "tool_calls", "function", "name",
                         "f", "arguments", "{\"a\":[1,{\"b\":2}]}");
    case 12:
        return json_pack("{s:s, s:s}", "role", rnd(2) ? "tool" : "wizard", "content", "c");
    default:
        return json_pack("[s, {s:s}]", "s", "type", "image");
    }
}

static void mutate_json(json_t *root)
{
    struct fz_json_slot slots[512];
    const size_t n = fz_json_slots(root, slots, 512);
    if (n == 0) return;
    const struct fz_json_slot *s = &slots[rnd((unsigned)n)];
    fz_json_edit(s, rnd(4), random_value); /* after the slot's draw: the replay's sequence is fixed */
}

static void replay_render(const char *seed, size_t len)
{
    chat_fuzz_render((const uint8_t *)seed, len);
    json_t *base = json_loadb(seed, len, 0, NULL);
    for (int i = 0; i < 300 && base; i++) {
        json_t *copy = json_deep_copy(base);
        for (unsigned k = 1 + rnd(3); k > 0; k--) mutate_json(copy);
        char *text = json_dumps(copy, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text) chat_fuzz_render((const uint8_t *)text, strlen(text));
        free(text);
        json_decref(copy);
    }
    json_decref(base);
    char *buf = malloc(len + 1);
    for (int i = 0; i < 100 && buf; i++) {
        memcpy(buf, seed, len);
        size_t cut = rnd((unsigned)len + 1);
        if (i % 2 && len) buf[rnd((unsigned)len)] ^= (char)(1 + rnd(255));
        chat_fuzz_render((const uint8_t *)buf, i % 2 ? len : cut);
    }
    free(buf);
}

static void replay_output(const char *seed, size_t len)
{
    static const char *const pieces[] = {"<mm:think>",
                                         "</mm:think>",
                                         "]<]minimax[>[",
                                         "]<]minimax[>[<tool_call>",
                                         "]<]minimax[>[</invoke>",
                                         "]<]minimax[>[<k>",
                                         "]<]minimax[>[</k>",
                                         "<",
                                         ">",
                                         "\"",
                                         "null",
                                         "\xc3\xa9",
                                         "\xff",
                                         "1e400",
                                         "]<]minimax[>[<item>"};
    chat_fuzz_output((const uint8_t *)seed, len);
    char *buf = malloc(len + 64);
    for (int i = 0; i < 300 && buf && len; i++) {
        size_t n = len;
        memcpy(buf, seed, len);
        buf[0] = (char)rnd(256);
        for (unsigned k = 1 + rnd(4); k > 0; k--) {
            unsigned op = rnd(3);
            size_t at = 1 + rnd((unsigned)n);
            if (op == 0 && n > 2) { /* delete a range */
                size_t del = 1 + rnd(12);
                if (at + del > n) del = n - at;
                memmove(buf + at, buf + at + del, n - at - del);
                n -= del;
            } else if (op == 1) { /* splice a marker piece */
                const char *p = pieces[rnd(sizeof(pieces) / sizeof(pieces[0]))];
                size_t pl = strlen(p);
                if (n + pl > len + 63) continue;
                if (at > n) at = n;
                memmove(buf + at + pl, buf + at, n - at);
                memcpy(buf + at, p, pl);
                n += pl;
            } else if (at < n) {
                buf[at] = (char)rnd(256);
            }
        }
        chat_fuzz_output((const uint8_t *)buf, n);
    }
    free(buf);
}

static int replay_dir(const char *dir, void (*fn)(const char *, size_t))
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        size_t len = 0;
        char *data = fixture_read_file(path, &len);
        if (!data) continue;
        fn(data, len);
        free(data);
        count++;
    }
    closedir(d);
    return count;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s/render", argv[1]);
    int n_render = replay_dir(dir, replay_render);
    snprintf(dir, sizeof(dir), "%s/output", argv[1]);
    int n_output = replay_dir(dir, replay_output);
    if (n_render <= 0 || n_output <= 0) {
        fprintf(stderr, "FAILED: no seed corpus under %s (render %d, output %d)\n", argv[1], n_render,
                n_output);
        return 1;
    }
    printf("ok: replayed %d request seeds and %d output seeds with mutations\n", n_render, n_output);
    return 0;
}
