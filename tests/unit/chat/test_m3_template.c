/* M3 chat template (render_chat): the worked example of ../shared/docs/M3_CHAT.md §3 byte for byte, every
 * exact fragment §3 lists, the role and mode rules of §2, number spellings, media order, and refusals. The
 * expected texts are written out by hand from the spec, never taken from the code under test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_fixture.h"
#include "m3_internal.h"
#include "mmgw_test.h"

#define NS "]<]minimax[>["

/* The vision half (m3_vision.c) owns the markers; these are the spec's strings (M3_CHAT.md §2 step 4). */
const char *m3_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    (void)inst;
    return kind == MMGW_MEDIA_IMAGE ? "]<]image[>[" : kind == MMGW_MEDIA_VIDEO ? "]<]video[>[" : NULL;
}

static struct mmgw_plugin_instance inst = {.host = &fixture_host};

#define SYS_HEAD                                                                                             \
    "]~!b[]~b]system\nYour model version is MiniMax-M3, developed by MiniMax. Knowledge cutoff: January "    \
    "2026. "                                                                                                 \
    "Founded in early 2022, MiniMax is a global AI foundation model company committed to advancing the "     \
    "frontiers of AI towards AGI."
#define THINK_INTRO                                                                                          \
    "\n\n<thinking_instructions>\nYou have a thinking capability that allows you to reason step by step "    \
    "before responding. When thinking is enabled, wrap your reasoning in <mm:think></mm:think> tags before " \
    "your response. When thinking is disabled, begin your response directly after the </mm:think> prefix. "  \
    "When thinking is adaptive, decide on your own whether to think for the current turn.\n"
#define MODE_ADAPTIVE                                                                                        \
    "Current thinking mode: adaptive. You are encouraged to think for complex decision-making, multi-step "  \
    "reasoning, or when analyzing function/tool results.\n"
#define MODE_ENABLED                                                                                         \
    "Current thinking mode: enabled. You MUST think step by step before every response, including after "    \
    "receiving function/tool results.\n"
#define MODE_DISABLED "Current thinking mode: disabled. Do not output any thinking process.\n"
#define SYS_END "</thinking_instructions>[e~[\n"
#define SYS_ADAPTIVE SYS_HEAD THINK_INTRO MODE_ADAPTIVE SYS_END
#define DEV_DEFAULT "]~b]developer\nYou are a helpful assistant.[e~[\n"

struct result {
    int32_t rc;
    struct fixture_text text;
    uint32_t media[16];
    uint32_t n_media;
    struct mmgw_error err;
};

static void render(const char *json, struct result *r)
{
    memset(r, 0, sizeof(*r));
    struct mmgw_sink sink = fixture_text_sink(&r->text);
    r->n_media = 99;
    r->rc = m3_render_chat(&inst, json, strlen(json), &sink, r->media, 16, &r->n_media, &r->err);
    CHECK_MSG(fixture_live_allocs == 0, "leaked %ld allocations rendering %.80s", fixture_live_allocs, json);
}

static void expect_text(const char *json, const char *want)
{
    struct result r;
    render(json, &r);
    CHECK_MSG(r.rc == MMGW_OK, "rc %d (%s) for %s", r.rc, r.err.msg, json);
    CHECK_MSG(r.rc == MMGW_OK && strcmp(r.text.p, want) == 0, "for %s\n got: '%s'\nwant: '%s'", json,
              r.text.p, want);
    fixture_text_free(&r.text);
}

/* The rendered text must contain `want`. */
static void expect_fragment(const char *json, const char *want)
{
    struct result r;
    render(json, &r);
    CHECK_MSG(r.rc == MMGW_OK, "rc %d (%s) for %s", r.rc, r.err.msg, json);
    CHECK_MSG(r.rc == MMGW_OK && strstr(r.text.p, want) != NULL, "for %s\n got: '%s'\nmissing: '%s'", json,
              r.text.p, want);
    fixture_text_free(&r.text);
}

static void expect_error(const char *json, int32_t code, const char *msg_part)
{
    struct result r;
    render(json, &r);
    CHECK_MSG(r.rc == code, "rc %d, want %d (%s) for %s", r.rc, code, r.err.msg, json);
    CHECK_MSG(strstr(r.err.msg, msg_part) != NULL, "message '%s' lacks '%s'", r.err.msg, msg_part);
    CHECK_MSG(strchr(r.err.msg, '\n') == NULL, "message is not one line: '%s'", r.err.msg);
    CHECK_MSG(r.text.len == 0, "wrote %zu bytes on error", r.text.len);
    CHECK_EQ_INT(r.n_media, 0);
    fixture_text_free(&r.text);
}

static void test_worked_example(void)
{
    const char *src = getenv("MMGW_SOURCE");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/unit/chat/data/m3_worked_example.json", src ? src : ".");
    char *json = fixture_read_file(path, NULL);
    snprintf(path, sizeof(path), "%s/tests/unit/chat/data/m3_worked_example.prompt", src ? src : ".");
    size_t want_len = 0;
    char *want = fixture_read_file(path, &want_len);
    CHECK_MSG(json && want, "test data missing under %s", path);
    if (!json || !want) return;
    CHECK_EQ_INT(want_len, 2205); /* the spec's count */
    struct result r;
    render(json, &r);
    CHECK_MSG(r.rc == MMGW_OK, "rc %d: %s", r.rc, r.err.msg);
    CHECK_EQ_INT(r.text.len, 2205);
    CHECK_MSG(r.text.p && strcmp(r.text.p, want) == 0, "worked example differs:\n got: '%s'", r.text.p);
    if (r.text.p && strcmp(r.text.p, want) != 0) {
        size_t i = 0;
        while (r.text.p[i] && r.text.p[i] == want[i]) i++;
        fprintf(stderr, "first difference at byte %zu: got '%.40s' want '%.40s'\n", i, r.text.p + i,
                want + i);
    }
    CHECK_EQ_INT(r.n_media, 1);
    CHECK_EQ_INT(r.media[0], 0);
    fixture_text_free(&r.text);

    /* The same conversation with arguments given as an object renders the same. */
    const char *obj_args = strstr(json, "\"arguments\": ");
    CHECK(obj_args != NULL);

    /* thinking_mode changes the mode line and the generation prompt tail (§3) */
    char *enabled = malloc(strlen(json) + 64), *disabled = malloc(strlen(json) + 64);
    char *close = strrchr(json, '}');
    size_t head = (size_t)(close - json);
    sprintf(enabled, "%.*s, \"chat_template_kwargs\": {\"thinking_mode\": \"enabled\"}}", (int)head, json);
    sprintf(disabled, "%.*s, \"chat_template_kwargs\": {\"thinking_mode\": \"disabled\"}}", (int)head, json);
    render(enabled, &r);
    CHECK(r.rc == MMGW_OK);
    CHECK(r.text.len > 20 && strcmp(r.text.p + r.text.len - 17, "]~b]ai\n<mm:think>") == 0);
    CHECK(strstr(r.text.p, THINK_INTRO MODE_ENABLED SYS_END) != NULL);
    fixture_text_free(&r.text);
    render(disabled, &r);
    CHECK(r.rc == MMGW_OK);
    CHECK(r.text.len > 20 && strcmp(r.text.p + r.text.len - 18, "]~b]ai\n</mm:think>") == 0);
    CHECK(strstr(r.text.p, THINK_INTRO MODE_DISABLED SYS_END) != NULL);
    fixture_text_free(&r.text);
    free(enabled);
    free(disabled);
    free(json);
    free(want);
}

static void test_spec_fragments(void)
{
    /* an assistant turn with no reasoning */
    expect_fragment(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":"
        "\"Hello!\"}]}",
        "]~b]user\nHi[e~[\n]~b]ai\n</mm:think>Hello![e~[\n");
    /* reasoning taken from the content */
    expect_fragment("{\"messages\":[{\"role\":\"assistant\",\"content\":\"<mm:think>\\nr1\\n</"
                    "mm:think>\\n\\nvisible\"}]}",
                    "]~b]ai\n<mm:think>r1</mm:think>visible[e~[\n");
    /* two tool results in one run */
    expect_fragment(
        "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":"
        "\"f\",\"arguments\":{}}}]},{\"role\":\"tool\",\"content\":\"R1\"},{\"role\":\"tool\",\"content\":"
        "\"R2\"}]}",
        "]~b]tool\n<response>R1</response>\n<response>R2</response>[e~[\n");
    /* nested arguments, booleans, nulls skipped */
    expect_fragment(
        "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":"
        "\"f\",\"arguments\":\"{\\\"a\\\":true,\\\"d\\\":[1,\\\"x\\\"],\\\"e\\\":{\\\"k\\\":\\\"v\\\","
        "\\\"n\\\":null},\\\"c\\\":null}\"}}]}]}",
        NS "<invoke name=\"f\">" NS "<a>true" NS "</a>" NS "<d>" NS "<item>1" NS "</item>" NS "<item>x" NS
           "</item>" NS "</d>" NS "<e>" NS "<k>v" NS "</k>" NS "</e>" NS "</invoke>\n");
    /* an empty object renders as nothing */
    expect_fragment("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"g\","
                    "\"arguments\":\"{}\"}}]}]}",
                    "]~b]ai\n</mm:think>" NS "<tool_call>\n" NS "<invoke name=\"g\">" NS "</invoke>\n" NS
                    "</tool_call>[e~[\n");
}

static void test_whole_prompts(void)
{
    /* no messages at all: the two header blocks and the generation prompt */
    expect_text("{\"messages\":[]}", SYS_ADAPTIVE DEV_DEFAULT "]~b]ai\n");
    expect_text("{\"messages\":[],\"add_generation_prompt\":false}", SYS_ADAPTIVE DEV_DEFAULT);
    /* a root message replaces the identity; a system message after it is the developer text */
    expect_text(
        "{\"messages\":[{\"role\":\"root\",\"content\":\"I am root.\"},{\"role\":\"system\",\"content\":"
        "\"Dev text.\"},{\"role\":\"user\",\"content\":\"u\"}]}",
        "]~!b[]~b]system\nI am root." THINK_INTRO MODE_ADAPTIVE SYS_END
        "]~b]developer\nDev text.[e~[\n]~b]user\nu[e~[\n]~b]ai\n");
    /* later system/developer messages are dropped; model_identity fills an absent developer text */
    expect_text(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"gone\"},"
        "{\"role\":\"developer\",\"content\":\"gone too\"},{\"role\":\"user\",\"content\":\"b\"}],"
        "\"chat_template_kwargs\":{\"model_identity\":\"You are Bob.\"}}",
        SYS_ADAPTIVE "]~b]developer\nYou are Bob.[e~[\n]~b]user\na[e~[\n]~b]user\nb[e~[\n]~b]ai\n");
    /* an empty developer text falls back to the default; an unknown mode prints no mode line, no tail */
    expect_text("{\"messages\":[{\"role\":\"developer\",\"content\":\"\"}],\"chat_template_kwargs\":"
                "{\"thinking_mode\":\"sometimes\"}}",
                SYS_HEAD THINK_INTRO SYS_END DEV_DEFAULT "]~b]ai\n");
    expect_text("{\"messages\":[],\"chat_template_kwargs\":{\"thinking_mode\":\"adaptive\"}}",
                SYS_ADAPTIVE DEV_DEFAULT "]~b]ai\n");
    /* empty tools list: no tools section */
    expect_text("{\"messages\":[],\"tools\":[]}", SYS_ADAPTIVE DEV_DEFAULT "]~b]ai\n");
    /* a tool run closes before a following user turn; a tool message may follow a user turn that follows
     * the call (the template tracks the last assistant turn only) */
    expect_fragment(
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":{\"x\":"
        "\"1\"}}]},{\"role\":\"tool\",\"content\":\"A\"},{\"role\":\"user\",\"content\":\"q\"},"
        "{\"role\":\"tool\",\"content\":\"B\"}]}",
        NS "<invoke name=\"f\">" NS "<x>1" NS "</x>" NS "</invoke>\n" NS
           "</tool_call>[e~[\n]~b]tool\n<response>A</response>[e~[\n]~b]user\nq[e~[\n]~b]tool\n<response>"
           "B</response>[e~[\n]~b]ai\n");
    /* reasoning_content is used as is and wins over a split of the content */
    expect_fragment("{\"messages\":[{\"role\":\"assistant\",\"reasoning_content\":\"\\nR\\n\",\"content\":"
                    "\"a</mm:think>b\"}]}",
                    "]~b]ai\n<mm:think>\nR\n</mm:think>a</mm:think>b[e~[\n");
    /* an empty reasoning_content gives a bare closer; <think> is not recognised */
    expect_fragment("{\"messages\":[{\"role\":\"assistant\",\"reasoning_content\":\"\",\"content\":\"<think>"
                    "x</think>y\"}]}",
                    "]~b]ai\n</mm:think><think>x</think>y[e~[\n");
    /* split at the first closer for reasoning, after the last for content; the last opener starts it */
    expect_fragment(
        "{\"messages\":[{\"role\":\"assistant\",\"content\":\"p<mm:think>q<mm:think>\\nr\\n</mm:think>mid"
        "</mm:think>\\ntail\\n\"}]}",
        "]~b]ai\n<mm:think>r</mm:think>tail[e~[\n");
    /* a closer with nothing before it: empty reasoning, bare closer */
    expect_fragment("{\"messages\":[{\"role\":\"assistant\",\"content\":\"\\n</mm:think>\\nonly\"}]}",
                    "]~b]ai\n</mm:think>only[e~[\n");
}

static void test_parts_and_media(void)
{
    struct result r;
    /* user parts join with no separator; unknown parts dropped; bare strings kept */
    render("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"A\"},{\"type\":"
           "\"video\","
           "\"mmgw_media\":3},\"B\",{\"type\":\"input_audio\",\"x\":1},{\"type\":\"image\",\"mmgw_media\":1},"
           "{\"type\":\"text\",\"text\":\"C\"}]}]}",
           &r);
    CHECK(r.rc == MMGW_OK);
    CHECK(r.rc == MMGW_OK && strstr(r.text.p, "]~b]user\nA]<]video[>[B]<]image[>[C[e~[\n") != NULL);
    CHECK_EQ_INT(r.n_media, 2);
    CHECK_EQ_INT(r.media[0], 3);
    CHECK_EQ_INT(r.media[1], 1);
    fixture_text_free(&r.text);

    /* media in dropped messages and in dropped parts of a split assistant turn are not counted:
     * [IMG8]<mm:think>r</mm:think>[IMG7]</mm:think>c[IMG6] keeps reasoning "r" and content "c[IMG6]" */
    render(
        "{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"image\",\"mmgw_media\":0},\"dev\"]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":1}]},"
        "{\"role\":\"system\",\"content\":[{\"type\":\"image\",\"mmgw_media\":2}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"image\",\"mmgw_media\":8},\"<mm:think>r</"
        "mm:think>\","
        "{\"type\":\"image\",\"mmgw_media\":7},\"</mm:think>c\",{\"type\":\"image\",\"mmgw_media\":6}],"
        "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]},"
        "{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"T\"},{\"type\":\"image\",\"mmgw_"
        "media\":4},"
        "{\"output\":\"O\"},\"S\"]}]}",
        &r);
    CHECK_MSG(r.rc == MMGW_OK, "%s", r.err.msg);
    CHECK(r.rc == MMGW_OK && strstr(r.text.p, "]~b]developer\n]<]image[>[dev[e~[\n") != NULL);
    CHECK(r.rc == MMGW_OK &&
          strstr(r.text.p, "]~b]ai\n<mm:think>r</mm:think>c]<]image[>[" NS "<tool_call>") != NULL);
    CHECK(r.rc == MMGW_OK && strstr(r.text.p, "]~b]tool\n<response>T]<]image[>[OS</response>[e~[\n") != NULL);
    uint32_t want[] = {0, 1, 6, 4};
    CHECK_EQ_INT(r.n_media, 4);
    for (int i = 0; i < 4 && i < (int)r.n_media; i++) CHECK_EQ_INT(r.media[i], want[i]);
    fixture_text_free(&r.text);

    /* the media list must fit media_cap */
    struct fixture_text t = {0};
    struct mmgw_sink sink = fixture_text_sink(&t);
    uint32_t order[1], n = 7;
    struct mmgw_error err = {0};
    const char *two = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mmgw_media\":0},"
                      "{\"type\":\"image\",\"mmgw_media\":1}]}]}";
    CHECK_EQ_INT(m3_render_chat(&inst, two, strlen(two), &sink, order, 1, &n, &err), MMGW_E_TOO_LARGE);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(t.len, 0);
    fixture_text_free(&t);
    CHECK_EQ_INT(fixture_live_allocs, 0);
}

static void test_values(void)
{
    /* Python str() of numbers, strings raw (not escaped), unicode kept */
    expect_fragment(
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"n\","
        "\"arguments\":{\"i\":2,\"f\":1.5,\"big\":1e5,\"small\":0.00001,\"huge\":1e16,\"neg\":-0.0,"
        "\"tenth\":0.1,\"third\":0.3333333333333333,\"fix\":1e15,\"e4\":0.0001,\"m\":-12345678901234567,"
        "\"s\":\"<a & \\\"b\\\">\",\"u\":\"caf\\u00e9 \\u2603\",\"f2\":2.0,\"t\":false}}}]}]}",
        NS "<i>2" NS "</i>" NS "<f>1.5" NS "</f>" NS "<big>100000.0" NS "</big>" NS "<small>1e-05" NS
           "</small>" NS "<huge>1e+16" NS "</huge>" NS "<neg>-0.0" NS "</neg>" NS "<tenth>0.1" NS
           "</tenth>" NS "<third>0.3333333333333333" NS "</third>" NS "<fix>1000000000000000.0" NS "</fix>" NS
           "<e4>0.0001" NS "</e4>" NS "<m>-12345678901234567" NS "</m>" NS "<s><a & \"b\">" NS "</s>" NS
           "<u>caf\xc3\xa9 \xe2\x98\x83" NS "</u>" NS "<f2>2.0" NS "</f2>" NS "<t>false" NS "</t>");
    /* arrays: null items are empty, nested arrays and objects recurse */
    expect_fragment("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"a\","
                    "\"arguments\":{\"l\":[null,[1,{\"k\":null,\"z\":[]}],{}]}}}]}]}",
                    NS "<l>" NS "<item>" NS "</item>" NS "<item>" NS "<item>1" NS "</item>" NS "<item>" NS
                       "<z>" NS "</z>" NS "</item>" NS "</item>" NS "<item>" NS "</item>" NS "</l>");
    /* tojson of a tool: ", " and ": " separators, key order kept, non-ASCII kept, escapes as json.dumps */
    expect_fragment(
        "{\"messages\":[],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"t\",\"z\":1,\"a\":"
        "[0.5,1e-7,true,null,12],\"d\":\"Temp\\u00e9rature \\\"q\\\" \\\\ \\n\\t\\u0001\\u007f\",\"e\":{},"
        "\"f\":[]}}]}",
        "<tools>\n<tool>{\"name\": \"t\", \"z\": 1, \"a\": [0.5, 1e-07, true, null, 12], \"d\": "
        "\"Temp\xc3\xa9rature \\\"q\\\" \\\\ \\n\\t\\u0001\x7f\", \"e\": {}, \"f\": []}</tool>\n</tools>\n\n"
        "To call tools, wrap all invocations in a single " NS "<tool_call>" NS "</tool_call> block.");
    /* a tool call given at the top level (no "function" member) and a text part with a number */
    expect_fragment("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":7},{\"type\":"
                    "\"text\",\"text\":true},{\"type\":\"text\"}]},{\"role\":\"assistant\",\"tool_calls\":["
                    "{\"name\":\"top\",\"arguments\":\"{\\\"q\\\": \\\"x\\\"}\"}]}]}",
                    "]~b]user\n7True[e~[\n]~b]ai\n</mm:think>" NS "<tool_call>\n" NS
                    "<invoke name=\"top\">" NS "<q>x" NS "</q>" NS "</invoke>\n");
}

static void test_errors(void)
{
    expect_error("{\"messages\":{}}", MMGW_E_INVALID, "messages");
    expect_error("[1,2]", MMGW_E_INVALID, "JSON object");
    expect_error("{\"messages\":[", MMGW_E_INVALID, "invalid JSON");
    expect_error("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", MMGW_E_INVALID,
                 "unknown role 'wizard'");
    expect_error("{\"messages\":[{\"content\":\"x\"}]}", MMGW_E_INVALID, "messages[0]: role");
    /* request text quoted into a message never breaks it over lines (expect_error checks for '\n') */
    expect_error("{\"messages\":[{\"role\":\"a\\nb\"}]}", MMGW_E_INVALID, "unknown role 'a?b'");
    expect_error("{\"messages\":\"\\q\n\"}", MMGW_E_INVALID, "invalid JSON");
    expect_error("{\"messages\":[\"hi\"]}", MMGW_E_INVALID, "messages[0]");
    expect_error("{\"messages\":[{\"role\":\"tool\",\"content\":\"r\"}]}", MMGW_E_INVALID, "no preceding");
    expect_error(
        "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"r\"}]}",
        MMGW_E_INVALID, "messages[1]");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
                 "\"arguments\":\"[1,2]\"}}]}]}",
                 MMGW_E_INVALID, "arguments must be a JSON object");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
                 "\"arguments\":\"{oops\"}}]}]}",
                 MMGW_E_INVALID, "not valid JSON");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]}",
                 MMGW_E_INVALID, "arguments must be a JSON object");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":3,"
                 "\"arguments\":{}}}]}]}",
                 MMGW_E_INVALID, "name must be a string");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{\"a\":1}}]}", MMGW_E_INVALID,
                 "tool_calls must be an array");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},3]}]}",
                 MMGW_E_INVALID, "content[1] must be an object");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":{\"type\":\"text\"}}]}", MMGW_E_INVALID,
                 "content must be a string");
    expect_error(
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"image_url\":\"x\"}]}]}",
        MMGW_E_INVALID, "mmgw_media");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\",\"mmgw_media\":-1}]}]}",
                 MMGW_E_INVALID, "content[0]");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":[1]}]}]}",
                 MMGW_E_INVALID, "text must be a string");
    expect_error("{\"messages\":[],\"tools\":{\"f\":1}}", MMGW_E_INVALID, "tools");
    expect_error("{\"messages\":[],\"tools\":[{\"type\":\"function\"}]}", MMGW_E_INVALID, "tools[0]");
    expect_error("{\"messages\":[],\"chat_template_kwargs\":[1]}", MMGW_E_INVALID, "chat_template_kwargs");
    expect_error("{\"messages\":[],\"chat_template_kwargs\":{\"model_identity\":{\"a\":1}}}", MMGW_E_INVALID,
                 "model_identity");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]},"
                 "{\"role\":\"tool\",\"content\":null}]}",
                 MMGW_E_INVALID, "arguments");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":{}}]},"
                 "{\"role\":\"tool\",\"content\":null}]}",
                 MMGW_E_INVALID, "tool message's content");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":{}}]},"
                 "{\"role\":\"tool\",\"content\":[{\"type\":\"audio\"}]}]}",
                 MMGW_E_INVALID, "needs output or text");
    /* deeply nested arguments are refused, not recursed into without bound */
    char deep[8192];
    int n = 0;
    n += sprintf(
        deep + n,
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":{\"a\":");
    for (int i = 0; i < 600; i++) deep[n++] = '[';
    for (int i = 0; i < 600; i++) deep[n++] = ']';
    n += sprintf(deep + n, "}}]}]}");
    expect_error(deep, MMGW_E_INVALID, "nest");
}

/* Every allocation failure is reported as NOMEM (or absorbed), never a crash or a leak. */
static void test_out_of_memory(void)
{
    const char *src = getenv("MMGW_SOURCE");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/unit/chat/data/m3_worked_example.json", src ? src : ".");
    char *json = fixture_read_file(path, NULL);
    if (!json) return;
    int saw_nomem = 0;
    for (long k = 0; k < 40; k++) {
        struct result r;
        fixture_fail_after = k;
        render(json, &r);
        fixture_fail_after = -1;
        CHECK_MSG(r.rc == MMGW_OK || r.rc == MMGW_E_NOMEM, "fail_after %ld: rc %d", k, r.rc);
        saw_nomem |= r.rc == MMGW_E_NOMEM;
        fixture_text_free(&r.text);
    }
    CHECK(saw_nomem);
    free(json);
}

static void test_tokens(void)
{
    const char *const *stops = m3_stop_tokens(&inst);
    CHECK_STR(stops[0], "[e~[");
    CHECK(stops[1] == NULL);
    CHECK(m3_bos_token(&inst) == NULL);
}

int main(void)
{
    test_worked_example();
    test_spec_fragments();
    test_whole_prompts();
    test_parts_and_media();
    test_values();
    test_errors();
    test_out_of_memory();
    test_tokens();
    return test_done();
}
