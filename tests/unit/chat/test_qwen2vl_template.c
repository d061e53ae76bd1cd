/* Qwen2-VL chat template (ChatML, Qwen/Qwen2-VL-7B-Instruct chat_template.json): default system prompt,
 * media markers (the bare pad token: the vision half's expansion adds <|vision_start|>/<|vision_end|>),
 * add_vision_id labels, stop tokens, refusals. Expected texts are written by hand from the template. */
#include <stdio.h>
#include <string.h>

#include "chat_fixture.h"
#include "mmgw_test.h"
#include "qwen2vl_internal.h"

/* The convention agreed with the vision half (docs/progress/preprocess.md): bare pad markers. */
const char *qwen2vl_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    (void)inst;
    return kind == MMGW_MEDIA_IMAGE ? "<|image_pad|>" : kind == MMGW_MEDIA_VIDEO ? "<|video_pad|>" : NULL;
}

static struct mmgw_plugin_instance inst = {.host = &fixture_host};

#define SYS "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"

static int32_t render(const char *json, struct fixture_text *t, uint32_t *media, uint32_t cap, uint32_t *n,
                      struct mmgw_error *err)
{
    memset(t, 0, sizeof(*t));
    struct mmgw_sink sink = fixture_text_sink(t);
    int32_t rc = qwen2vl_render_chat(&inst, json, strlen(json), &sink, media, cap, n, err);
    CHECK_MSG(fixture_live_allocs == 0, "leaked %ld allocations", fixture_live_allocs);
    return rc;
}

static void expect(const char *json, const char *want)
{
    struct fixture_text t;
    uint32_t media[8], n = 0;
    struct mmgw_error err = {0};
    int32_t rc = render(json, &t, media, 8, &n, &err);
    CHECK_MSG(rc == MMGW_OK, "rc %d (%s)", rc, err.msg);
    CHECK_MSG(rc == MMGW_OK && strcmp(t.p, want) == 0, "for %s\n got: '%s'\nwant: '%s'", json, t.p, want);
    fixture_text_free(&t);
}

static void expect_error(const char *json, const char *msg_part)
{
    struct fixture_text t;
    uint32_t media[1], n = 5;
    struct mmgw_error err = {0};
    int32_t rc = render(json, &t, media, 1, &n, &err);
    CHECK_MSG(rc == MMGW_E_INVALID || rc == MMGW_E_TOO_LARGE, "rc %d for %s", rc, json);
    CHECK_MSG(strstr(err.msg, msg_part) != NULL, "message '%s' lacks '%s'", err.msg, msg_part);
    CHECK_EQ_INT(t.len, 0);
    CHECK_EQ_INT(n, 0);
    fixture_text_free(&t);
}

static void test_templates(void)
{
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
           SYS "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect("{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
           "brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
           "{\"role\":\"assistant\",\"content\":\"Hello\"},{\"role\":\"user\",\"content\":\"Bye\"}],"
           "\"add_generation_prompt\":false}",
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
           "Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
    /* a system message that is not first is rendered where it is, after the default one */
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"s\"}]}",
           SYS "<|im_start|>user\na<|im_end|>\n<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\n");
    /* an assistant turn with null content (tool calls only) renders empty */
    expect("{\"messages\":[{\"role\":\"assistant\",\"content\":null}]}",
           SYS "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");

    struct fixture_text t;
    uint32_t media[8], n = 0;
    struct mmgw_error err = {0};
    int32_t rc =
        render("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":1},"
               "{\"type\":\"text\",\"text\":\"Describe this image.\"},{\"type\":\"video\",\"mmgw_media\":0},"
               "{\"type\":\"input_audio\"}]}]}",
               &t, media, 8, &n, &err);
    CHECK(rc == MMGW_OK);
    CHECK_STR(t.p, SYS "<|im_start|>user\n<|image_pad|>Describe this image.<|video_pad|><|im_end|>\n"
                       "<|im_start|>assistant\n");
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(media[0], 1);
    CHECK_EQ_INT(media[1], 0);
    fixture_text_free(&t);

    /* add_vision_id numbers pictures and videos separately, across messages */
    expect("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":0},{\"type\":"
           "\"video\","
           "\"mmgw_media\":1}]},{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":2}]}],"
           "\"chat_template_kwargs\":{\"add_vision_id\":true}}",
           SYS
           "<|im_start|>user\nPicture 1: <|image_pad|>Video 1: <|video_pad|><|im_end|>\n<|im_start|>user\n"
           "Picture 2: <|image_pad|><|im_end|>\n<|im_start|>assistant\n");
}

static void test_errors(void)
{
    expect_error("{\"messages\":\"x\"}", "messages");
    expect_error("{\"messages\":[{\"content\":\"x\"}]}", "role");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[\"bare\"]}]}", "content[0]");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", "text");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}", "mmgw_media");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":0},"
                 "{\"type\":\"image\",\"mmgw_media\":1}]}]}",
                 "media");
    expect_error("{\"messages\":", "invalid JSON");
}

static void test_tokens_and_parser(void)
{
    const char *const *stops = qwen2vl_stop_tokens(&inst);
    CHECK_STR(stops[0], "<|im_end|>");
    CHECK_STR(stops[1], "<|endoftext|>");
    CHECK(stops[2] == NULL);
    CHECK(qwen2vl_bos_token(&inst) == NULL);
    struct mmgw_output_parser *p = (struct mmgw_output_parser *)&inst;
    struct mmgw_error err = {0};
    CHECK_EQ_INT(qwen2vl_parser_create(&inst, "{}", 2, "", 0, &p, &err), MMGW_OK);
    CHECK(p == NULL); /* no parser: the host passes text through */
}

int main(void)
{
    test_templates();
    test_errors();
    test_tokens_and_parser();
    return test_done();
}
