/* Fuzz harness of the M3 chat half (see chat_fuzz.h). */
#include "chat_fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat_fixture.h"
#include "m3_internal.h"

/* The vision half owns the markers; the spec's strings stand in here. */
const char *m3_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    (void)inst;
    return kind == MMGW_MEDIA_IMAGE ? "]<]image[>[" : kind == MMGW_MEDIA_VIDEO ? "]<]video[>[" : NULL;
}

static struct mmgw_plugin_instance inst = {.host = &fixture_host};

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "chat fuzz invariant broken: " __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                                                 \
        abort();                                                                                             \
    } while (0)

void chat_fuzz_render(const uint8_t *data, size_t size)
{
    struct fixture_text text = {0};
    struct mmgw_sink sink = fixture_text_sink(&text);
    uint32_t order[64], n = 12345;
    struct mmgw_error err = {0};
    int32_t rc = m3_render_chat(&inst, (const char *)data, size, &sink, order, 64, &n, &err);
    if (fixture_live_allocs != 0) FAIL("render leaked %ld allocations", fixture_live_allocs);
    if (rc == MMGW_OK) {
        static const char head[] = "]~!b[]~b]system\n";
        if (text.len < sizeof(head) - 1 || memcmp(text.p, head, sizeof(head) - 1) != 0) FAIL("prompt head");
        if (n > 64) FAIL("n_media %u over the cap", n);
        size_t markers = 0;
        for (const char *p = text.p; (p = strstr(p, "]<]")) != NULL; p++) markers++;
        if (markers < n) FAIL("%u media recorded, %zu markers in the text", n, markers);
    } else {
        if (rc != MMGW_E_INVALID && rc != MMGW_E_TOO_LARGE && rc != MMGW_E_NOMEM) FAIL("render rc %d", rc);
        if (text.len != 0 || n != 0) FAIL("output written on error %d", rc);
        if (err.msg[0] == '\0' || strchr(err.msg, '\n')) FAIL("error message '%s'", err.msg);
    }
    fixture_text_free(&text);
}

static const char *tools_req =
    "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},\"n\":{\"type\":\"number\"},"
    "\"b\":"
    "{\"type\":\"boolean\"},\"o\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}},"
    "\"additionalProperties\":{\"type\":\"number\"}},\"a\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"object\"}},"
    "\"u\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"integer\"},{\"type\":\"array\"}]},\"e\":{\"enum\":["
    "null]},"
    "\"x\":{}}}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";

static int32_t parse(const char *req, const char *prompt, const uint8_t *out, size_t n, int how,
                     unsigned seed, struct fixture_events *ev)
{
    struct mmgw_output_parser *p = NULL;
    struct mmgw_error err = {0};
    struct mmgw_out_sink sink = fixture_event_sink(ev);
    int32_t rc = m3_parser_create(&inst, req, strlen(req), prompt, strlen(prompt), &p, &err);
    if (rc != MMGW_OK || !p) FAIL("parser_create rc %d: %s", rc, err.msg);
    size_t i = 0;
    while (rc == MMGW_OK && i < n) {
        size_t step = n - i;
        if (how == 1) {
            seed = seed * 1103515245u + 12345u;
            step = 1 + (seed >> 16) % 13;
        } else if (how == 2) {
            step = 1;
        }
        if (step > n - i) step = n - i;
        rc = m3_parser_feed(p, (const char *)out + i, step, &sink, &err);
        i += step;
    }
    if (rc == MMGW_OK) rc = m3_parser_finish(p, &sink, &err);
    m3_parser_destroy(p);
    if (fixture_live_allocs != 0) FAIL("parser leaked %ld allocations", fixture_live_allocs);
    return rc;
}

void chat_fuzz_output(const uint8_t *data, size_t size)
{
    if (size == 0) return;
    uint8_t flags = data[0];
    char req[2048];
    snprintf(req, sizeof(req), "%s%s}", tools_req,
             (flags & 1) ? ",\"chat_template_kwargs\":{\"thinking_mode\":\"enabled\"}" : "");
    const char *prompt = (flags & 2) ? "]~b]ai\n<mm:think>" : "]~b]ai\n";
    const uint8_t *out = data + 1;
    size_t n = size - 1;
    struct fixture_events whole = {0}, chunked = {0}, bytes = {0};
    if (parse(req, prompt, out, n, 0, 0, &whole) != MMGW_OK) FAIL("whole parse failed");
    if (whole.bad_order) FAIL("events out of protocol order");
    for (int t = 0; t < whole.n_tools; t++) {
        /* jansson refuses NUL in object keys, which JSON allows: check a copy with \u0000 made \u0001 */
        size_t len = whole.tool_args[t].len;
        char *copy = malloc(len + 1);
        if (!copy) FAIL("out of memory");
        memcpy(copy, whole.tool_args[t].p ? whole.tool_args[t].p : "", len);
        copy[len] = '\0';
        for (char *z = copy; (z = strstr(z, "\\u0000")) != NULL; z += 6) z[5] = '1';
        json_error_t jerr;
        json_t *v = json_loadb(copy, len, 0, &jerr);
        if (!json_is_object(v))
            FAIL("tool %d arguments are not a JSON object (%s): '%s'", t, jerr.text, copy);
        json_decref(v);
        free(copy);
    }
    if (parse(req, prompt, out, n, 1, flags >> 2, &chunked) != MMGW_OK) FAIL("chunked parse failed");
    if (!fixture_events_equal(&whole, &chunked)) {
        fixture_events_dump("whole", &whole);
        fixture_events_dump("chunked", &chunked);
        FAIL("chunked events differ");
    }
    if (n <= 4096) {
        if (parse(req, prompt, out, n, 2, 0, &bytes) != MMGW_OK) FAIL("byte-wise parse failed");
        if (!fixture_events_equal(&whole, &bytes)) FAIL("byte-by-byte events differ");
    }
    fixture_events_free(&whole);
    fixture_events_free(&chunked);
    fixture_events_free(&bytes);
}
