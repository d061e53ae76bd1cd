/* The chat half through the built plugins, as the gateway loads them: dlopen build/plugins/{m3,qwen2vl}.so,
 * mmgw_plugin_entry, create, then render_chat / parser_* through the function table. Also checks that the
 * template's media markers and the vision half's expand_media agree (marker once in the text, the
 * start/end brackets only from the expansion). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_fixture.h"
#include "mmgw_test.h"

static const struct mmgw_plugin *load(const char *name, void **handle)
{
    const char *build = getenv("MMGW_BUILD");
    char path[1024];
    snprintf(path, sizeof(path), "%s/plugins/%s.so", build ? build : "build", name);
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(*handle != NULL, "dlopen %s: %s", path, dlerror());
    if (!*handle) return NULL;
    mmgw_plugin_entry_fn entry = (mmgw_plugin_entry_fn)dlsym(*handle, MMGW_PLUGIN_ENTRY_SYMBOL);
    CHECK_MSG(entry != NULL, "%s has no %s", path, MMGW_PLUGIN_ENTRY_SYMBOL);
    if (!entry) return NULL;
    const struct mmgw_plugin *p = entry(&fixture_host);
    CHECK(p != NULL);
    if (!p) return NULL;
    CHECK_EQ_INT(p->abi_major, MMGW_PLUGIN_ABI_MAJOR);
    CHECK(p->struct_size >= sizeof(struct mmgw_plugin));
    CHECK_STR(p->name, name);
    return p;
}

/* Collects expand_media segments as one text (runs repeated `count` times). */
static int32_t seg_emit(void *ctx, const struct mmgw_prompt_seg *seg)
{
    struct fixture_text *t = ctx;
    struct mmgw_sink s = fixture_text_sink(t);
    for (uint32_t i = 0; i < seg->count; i++) {
        int32_t rc = s.append(s.ctx, seg->text, seg->text_len);
        if (rc != MMGW_OK) return rc;
    }
    return MMGW_OK;
}

static void expand(const struct mmgw_plugin *p, struct mmgw_plugin_instance *inst, int32_t kind, int64_t t,
                   int64_t h, int64_t w, struct fixture_text *out)
{
    uint32_t frames[4] = {0, 10, 20, 30};
    struct mmgw_media_info info = {.struct_size = sizeof(info),
                                   .kind = kind,
                                   .grid_t = t,
                                   .grid_h = h,
                                   .grid_w = w,
                                   .n_frames = kind == MMGW_MEDIA_VIDEO ? 4 : 1,
                                   .frame_indices = kind == MMGW_MEDIA_VIDEO ? frames : NULL,
                                   .source_fps = 10.0};
    struct mmgw_seg_sink sink = {.ctx = out, .emit = seg_emit};
    struct mmgw_error err = {0};
    memset(out, 0, sizeof(*out));
    int32_t rc = p->expand_media(inst, &info, &sink, &err);
    CHECK_MSG(rc == MMGW_OK, "expand_media: %d %s", rc, err.msg);
}

static void test_m3(void)
{
    void *h;
    const struct mmgw_plugin *p = load("m3", &h);
    if (!p) return;
    struct mmgw_plugin_instance *inst = NULL;
    struct mmgw_error err = {0};
    int32_t rc = p->create(&fixture_host, NULL, 0, &inst, &err);
    CHECK_MSG(rc == MMGW_OK && inst, "m3 create: %d %s", rc, err.msg);
    if (!inst) {
        dlclose(h);
        return;
    }
    CHECK_STR(p->stop_tokens(inst)[0], "[e~[");
    CHECK(p->bos_token(inst) == NULL);
    CHECK_STR(p->media_marker(inst, MMGW_MEDIA_IMAGE), "]<]image[>[");
    CHECK_STR(p->media_marker(inst, MMGW_MEDIA_VIDEO), "]<]video[>[");

    /* the worked example, through the .so */
    const char *src = getenv("MMGW_SOURCE");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/unit/chat/data/m3_worked_example.json", src ? src : ".");
    char *json = fixture_read_file(path, NULL);
    snprintf(path, sizeof(path), "%s/tests/unit/chat/data/m3_worked_example.prompt", src ? src : ".");
    char *want = fixture_read_file(path, NULL);
    CHECK(json && want);
    if (json && want) {
        struct fixture_text text = {0};
        struct mmgw_sink sink = fixture_text_sink(&text);
        uint32_t order[4], n = 0;
        rc = p->render_chat(inst, json, strlen(json), &sink, order, 4, &n, &err);
        CHECK_MSG(rc == MMGW_OK, "render_chat: %d %s", rc, err.msg);
        CHECK(rc == MMGW_OK && strcmp(text.p, want) == 0);
        CHECK_EQ_INT(n, 1);
        /* one marker in the text; the brackets come only from the expansion */
        CHECK(rc == MMGW_OK && strstr(text.p, "]<]start of image[>[") == NULL);
        struct fixture_text seg;
        expand(p, inst, MMGW_MEDIA_IMAGE, 1, 4, 6, &seg);
        CHECK_STR(seg.p,
                  "]<]start of image[>[]<]image[>[]<]image[>[]<]image[>[]<]image[>[]<]image[>[]<]image[>["
                  "]<]end of image[>[");
        fixture_text_free(&seg);

        /* the parser sees the rendered prompt and the request's tools */
        struct mmgw_output_parser *parser = NULL;
        rc = p->parser_create(inst, json, strlen(json), text.p, text.len, &parser, &err);
        CHECK_MSG(rc == MMGW_OK && parser, "parser_create: %d %s", rc, err.msg);
        if (parser) {
            struct fixture_events ev = {0};
            struct mmgw_out_sink out = fixture_event_sink(&ev);
            const char *gen =
                "<mm:think>It is 18 C.</mm:think>It is mild. ]<]minimax[>[<tool_call>\n]<]minimax[>["
                "<invoke name=\"get_weather\">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>["
                "<days>3]<]minimax[>[</days>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>";
            size_t gen_len = strlen(gen);
            for (size_t i = 0; i < gen_len && rc == MMGW_OK; i += 2) /* two bytes at a time, like tokens */
                rc = p->parser_feed(parser, gen + i, gen_len - i < 2 ? gen_len - i : 2, &out, &err);
            CHECK(rc == MMGW_OK);
            CHECK(p->parser_finish(parser, &out, &err) == MMGW_OK);
            p->parser_destroy(parser);
            CHECK_STR(ev.reasoning.p, "It is 18 C.");
            CHECK_STR(ev.content.p, "It is mild. ");
            CHECK_EQ_INT(ev.n_tools, 1);
            CHECK_STR(ev.tool_name[0].p, "get_weather");
            CHECK_STR(ev.tool_args[0].p, "{\"city\":\"Paris\",\"days\":3}");
            fixture_events_free(&ev);
        }
        fixture_text_free(&text);
    }
    free(json);
    free(want);
    p->destroy(inst);
    CHECK_EQ_INT(fixture_live_allocs, 0);
    dlclose(h);
}

static void test_qwen2vl(void)
{
    void *h;
    const struct mmgw_plugin *p = load("qwen2vl", &h);
    if (!p) return;
    struct mmgw_plugin_instance *inst = NULL;
    struct mmgw_error err = {0};
    int32_t rc = p->create(&fixture_host, NULL, 0, &inst, &err);
    CHECK_MSG(rc == MMGW_OK && inst, "qwen2vl create: %d %s", rc, err.msg);
    if (!inst) {
        dlclose(h);
        return;
    }
    CHECK_STR(p->stop_tokens(inst)[0], "<|im_end|>");
    const char *json =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":0},{\"type\":"
        "\"text\",\"text\":\"What is this?\"}]}]}";
    struct fixture_text text = {0};
    struct mmgw_sink sink = fixture_text_sink(&text);
    uint32_t order[2], n = 0;
    rc = p->render_chat(inst, json, strlen(json), &sink, order, 2, &n, &err);
    CHECK_MSG(rc == MMGW_OK, "render_chat: %d %s", rc, err.msg);
    const char *marker = p->media_marker(inst, MMGW_MEDIA_IMAGE);
    CHECK_STR(marker, "<|image_pad|>");
    /* Replace the marker by the expansion: the result must be the HF template's text after the processor
     * expanded <|image_pad|> into 4 pads (grid 1x4x4, merge 2). */
    struct fixture_text seg;
    expand(p, inst, MMGW_MEDIA_IMAGE, 1, 4, 4, &seg);
    char *at = (rc == MMGW_OK && marker) ? strstr(text.p, marker) : NULL;
    CHECK(at != NULL);
    if (at && seg.p) {
        char full[1024];
        snprintf(full, sizeof(full), "%.*s%s%s", (int)(at - text.p), text.p, seg.p, at + strlen(marker));
        CHECK_STR(full, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                        "<|vision_start|><|image_pad|><|image_pad|><|image_pad|><|image_pad|><|vision_end|>"
                        "What is this?<|im_end|>\n<|im_start|>assistant\n");
    }
    fixture_text_free(&seg);
    fixture_text_free(&text);
    struct mmgw_output_parser *parser = (struct mmgw_output_parser *)&err;
    CHECK(p->parser_create(inst, json, strlen(json), "", 0, &parser, &err) == MMGW_OK);
    CHECK(parser == NULL);
    p->destroy(inst);
    CHECK_EQ_INT(fixture_live_allocs, 0);
    dlclose(h);
}

int main(void)
{
    test_m3();
    test_qwen2vl();
    return test_done();
}
