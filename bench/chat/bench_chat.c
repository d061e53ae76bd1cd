/* Throughput of the M3 chat half on one core: render_chat of a multi-turn request, and the streaming output
 * parser on a long output fed in 4-byte pieces (about one token each), with baselines from the same run:
 * jansson parsing the same request (render_chat must parse it too), and memmem scanning the same output for
 * one marker (the least any text-matching parser must do). Usage: bench_chat [iterations] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "chat_fixture.h"
#include "m3_internal.h"

const char *m3_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    (void)inst;
    return kind == MMGW_MEDIA_IMAGE ? "]<]image[>[" : "]<]video[>[";
}

static struct mmgw_plugin_instance inst = {.host = &fixture_host};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t discard(void *ctx, int32_t kind, int32_t idx, const char *text, uint64_t len)
{
    (void)kind, (void)idx, (void)text;
    *(uint64_t *)ctx += len;
    return MMGW_OK;
}

static int32_t sink_count(void *ctx, const char *data, uint64_t len)
{
    (void)data;
    *(uint64_t *)ctx += len;
    return MMGW_OK;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    /* a 40-turn conversation with tools, tool calls and media */
    struct fixture_text req = {0};
    struct mmgw_sink rs = fixture_text_sink(&req);
    const char *head =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
        "\"Get the weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
        "\"string\"},\"days\":{\"type\":\"integer\"}}}}}],\"messages\":[{\"role\":\"system\","
        "\"content\":\"You are a helpful assistant that checks the weather.\"}";
    rs.append(rs.ctx, head, strlen(head));
    for (int i = 0; i < 40; i++) {
        char turn[1024];
        snprintf(
            turn, sizeof(turn),
            ",{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is the weather in city "
            "number "
            "%d this week? Please be thorough.\"},{\"type\":\"image\",\"mmgw_media\":%d}]},"
            "{\"role\":\"assistant\",\"reasoning_content\":\"The user asks about city %d.\",\"content\":\"\","
            "\"tool_calls\":[{\"id\":\"c%d\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
            "\"arguments\":\"{\\\"city\\\":\\\"City %d\\\",\\\"days\\\":7}\"}}]},{\"role\":\"tool\","
            "\"content\":\"{\\\"temp_c\\\": %d, \\\"sky\\\": \\\"clear\\\"}\"}",
            i, i, i, i, i, 10 + i);
        rs.append(rs.ctx, turn, strlen(turn));
    }
    rs.append(rs.ctx, "]}", 2);

    uint32_t order[64], n;
    struct mmgw_error err;
    uint64_t out_bytes = 0;
    struct mmgw_sink out = {.ctx = &out_bytes, .append = sink_count};
    /* rounds alternate the two measurements; the best round of each counts (the machine is shared) */
    double t_json = 1e30, t_render = 1e30, t0;
    for (int round = 0; round < 5; round++) {
        t0 = now();
        for (int i = 0; i < iters; i++) {
            json_t *v = json_loadb(req.p, req.len, 0, NULL);
            json_decref(v);
        }
        double t = now() - t0;
        if (t < t_json) t_json = t;
        out_bytes = 0;
        t0 = now();
        for (int i = 0; i < iters; i++)
            if (m3_render_chat(&inst, req.p, req.len, &out, order, 64, &n, &err) != MMGW_OK) {
                fprintf(stderr, "render failed: %s\n", err.msg);
                return 1;
            }
        t = now() - t0;
        if (t < t_render) t_render = t;
    }
    printf("render_chat: request %zu bytes -> prompt %llu bytes, %d iterations\n", req.len,
           (unsigned long long)(out_bytes / (uint64_t)iters), iters);
    printf("  baseline json_loadb only: %8.1f us/request\n", t_json / iters * 1e6);
    printf("  render_chat:              %8.1f us/request (%.2fx the parse alone)\n", t_render / iters * 1e6,
           t_render / t_json);

    /* a long output: reasoning, prose, then tool calls, repeated */
    struct fixture_text gen = {0};
    struct mmgw_sink gs = fixture_text_sink(&gen);
    const char *unit =
        "<mm:think>The user wants the forecast; I should call the tool for each city and then "
        "summarise.</mm:think>Here is what I found so far, city by city, with details. "
        "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">]<]minimax[>[<city>Paris"
        "]<]minimax[>[</city>]<]minimax[>[<days>7]<]minimax[>[</days>]<]minimax[>[</invoke>\n"
        "]<]minimax[>[</tool_call> ";
    while (gen.len < (1u << 20)) gs.append(gs.ctx, unit, strlen(unit));
    int reps = iters / 400 > 0 ? iters / 400 : 1;
    size_t hits = 0;
    double t_scan = 1e30, t_parse = 1e30;
    uint64_t emitted = 0;
    struct mmgw_out_sink es = {.ctx = &emitted, .emit = discard};
    for (int round = 0; round < 5; round++) {
        t0 = now();
        for (int r = 0; r < reps; r++)
            for (size_t i = 0; i + 4 <= gen.len; i += 4) /* same 4-byte stepping, one memmem each */
                hits += memmem(gen.p + i, 4, "]<]", 3) != NULL;
        double t = now() - t0;
        if (t < t_scan) t_scan = t;
        t0 = now();
        for (int r = 0; r < reps; r++) {
            struct mmgw_output_parser *p;
            m3_parser_create(&inst, req.p, req.len, NULL, 0, &p, &err);
            for (size_t i = 0; i < gen.len; i += 4)
                m3_parser_feed(p, gen.p + i, gen.len - i < 4 ? gen.len - i : 4, &es, &err);
            m3_parser_finish(p, &es, &err);
            m3_parser_destroy(p);
        }
        t = now() - t0;
        if (t < t_parse) t_parse = t;
    }
    double mb = (double)gen.len * reps / 1e6;
    printf("output parser: %.1f MB of output in 4-byte feeds, %d repetitions (%zu scan hits)\n", mb, reps,
           hits);
    printf("  baseline memmem per feed: %8.1f MB/s\n", mb / t_scan);
    printf("  m3 parser:                %8.1f MB/s (%.1f M feeds/s)\n", mb / t_parse, mb / 4 / t_parse);
    fixture_text_free(&req);
    fixture_text_free(&gen);
    return 0;
}
