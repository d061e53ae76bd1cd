/* Test fixture for the chat tests (see chat_fixture.h). */
#include "chat_fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long fixture_live_allocs;
long fixture_fail_after = -1;

static void *fx_alloc(uint64_t size)
{
    if (fixture_fail_after == 0) return NULL;
    if (fixture_fail_after > 0) fixture_fail_after--;
    void *p = malloc(size ? (size_t)size : 1);
    if (p) fixture_live_allocs++;
    return p;
}

static void fx_free(void *p)
{
    if (p) fixture_live_allocs--;
    free(p);
}

static void fx_log(int32_t level, const char *plugin, const char *msg)
{
    fprintf(stderr, "[%d] %s: %s\n", (int)level, plugin, msg);
}

static int32_t fx_set_error(struct mmgw_error *err, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int32_t fx_set_error(struct mmgw_error *err, int32_t code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

static uint64_t fx_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const struct mmgw_host_api fixture_host = {
    .struct_size = sizeof(struct mmgw_host_api),
    .abi_major = MMGW_PLUGIN_ABI_MAJOR,
    .abi_minor = MMGW_PLUGIN_ABI_MINOR,
    .alloc = fx_alloc,
    .free = fx_free,
    .log = fx_log,
    .set_error = fx_set_error,
    .now_ns = fx_now,
};

static int text_put(struct fixture_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) return MMGW_E_NOMEM;
        t->p = p;
        t->cap = cap;
    }
    if (n) memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
    return MMGW_OK;
}

static int32_t text_append(void *ctx, const char *data, uint64_t len)
{
    return text_put(ctx, data, (size_t)len);
}

struct mmgw_sink fixture_text_sink(struct fixture_text *t)
{
    text_put(t, "", 0);
    return (struct mmgw_sink){.ctx = t, .append = text_append};
}

void fixture_text_free(struct fixture_text *t)
{
    free(t->p);
    memset(t, 0, sizeof(*t));
}

static int32_t event_emit(void *ctx, int32_t kind, int32_t idx, const char *text, uint64_t len)
{
    struct fixture_events *e = ctx;
    e->n_events++;
    switch (kind) {
    case MMGW_OUT_CONTENT:
        return text_put(&e->content, text, (size_t)len);
    case MMGW_OUT_REASONING:
        return text_put(&e->reasoning, text, (size_t)len);
    case MMGW_OUT_TOOL_NAME:
        if (idx < 0 || idx >= FIXTURE_MAX_TOOLS) return MMGW_E_TOO_LARGE;
        if (e->name_seen[idx] || idx != e->n_tools) e->bad_order = 1;
        e->name_seen[idx] = 1;
        if (idx + 1 > e->n_tools) e->n_tools = idx + 1;
        return text_put(&e->tool_name[idx], text, (size_t)len);
    case MMGW_OUT_TOOL_ARGS:
        if (idx < 0 || idx >= FIXTURE_MAX_TOOLS) return MMGW_E_TOO_LARGE;
        if (!e->name_seen[idx] || idx != e->n_tools - 1) e->bad_order = 1;
        e->n_args_events++;
        return text_put(&e->tool_args[idx], text, (size_t)len);
    default:
        e->bad_order = 1;
        return MMGW_E_INVALID;
    }
}

struct mmgw_out_sink fixture_event_sink(struct fixture_events *e)
{
    return (struct mmgw_out_sink){.ctx = e, .emit = event_emit};
}

void fixture_events_free(struct fixture_events *e)
{
    fixture_text_free(&e->content);
    fixture_text_free(&e->reasoning);
    for (int i = 0; i < FIXTURE_MAX_TOOLS; i++) {
        fixture_text_free(&e->tool_name[i]);
        fixture_text_free(&e->tool_args[i]);
    }
    memset(e, 0, sizeof(*e));
}

static int text_eq(const struct fixture_text *a, const struct fixture_text *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

int fixture_events_equal(const struct fixture_events *a, const struct fixture_events *b)
{
    if (a->n_tools != b->n_tools || !text_eq(&a->content, &b->content) ||
        !text_eq(&a->reasoning, &b->reasoning))
        return 0;
    for (int i = 0; i < a->n_tools; i++)
        if (!text_eq(&a->tool_name[i], &b->tool_name[i]) || !text_eq(&a->tool_args[i], &b->tool_args[i]))
            return 0;
    return 1;
}

void fixture_events_dump(const char *label, const struct fixture_events *e)
{
    fprintf(stderr, "%s: content='%s' reasoning='%s' tools=%d\n", label, e->content.p ? e->content.p : "",
            e->reasoning.p ? e->reasoning.p : "", e->n_tools);
    for (int i = 0; i < e->n_tools; i++)
        fprintf(stderr, "  tool %d: name='%s' args='%s'\n", i, e->tool_name[i].p ? e->tool_name[i].p : "",
                e->tool_args[i].p ? e->tool_args[i].p : "");
}

char *fixture_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 8192;
            char *p = realloc(buf, cap + 1);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}
