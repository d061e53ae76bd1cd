/* M3 output parser: reasoning split, tool-call extraction and schema typing (../shared/docs/M3_CHAT.md §4,
 * vLLM's minimax_m3 parsers), streaming hold-back, and the invariant that any chunking of an output gives
 * the same events as feeding it whole. Expected values are written by hand from the spec and from vLLM's
 * own test expectations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat_fixture.h"
#include "m3_internal.h"
#include "mmgw_test.h"

#define NS "]<]minimax[>["
#define TC NS "<tool_call>\n"
#define TCE NS "</tool_call>"
#define INV(name) NS "<invoke name=\"" name "\">"
#define INVE NS "</invoke>\n"
#define EL(k, v) NS "<" k ">" v NS "</" k ">"

static struct mmgw_plugin_instance inst = {.host = &fixture_host};

static const char *tools_req =
    "{\"model\":\"m3\",\"messages\":[],\"tools\":["
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"create_order\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"user_id\":{\"type\":\"integer\"},\"urgent\":{\"type\":\"boolean\"},\"note\":{\"type\":"
    "\"string\"},\"shipping\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":"
    "{\"type\":\"integer\"}}},\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":"
    "{\"type\":\"string\"},\"qty\":{\"type\":\"integer\"}}}},\"metadata\":{\"type\":\"object\","
    "\"additionalProperties\":{\"type\":\"integer\"}},\"duplicate_demo\":{\"type\":\"object\",\"properties\":"
    "{\"tag\":{\"type\":\"string\"}}},\"schema_mismatch_array\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"integer\"}}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"calculate_area\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"shape\":{\"type\":\"string\"},\"dimensions\":{\"type\":\"object\"},\"precision\":"
    "{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"convert\",\"parameters\":{\"type\":\"object\","
    "\"properties\":"
    "{\"whole\":{\"type\":\"number\"},\"flag\":{\"type\":\"boolean\"},\"payload\":{\"type\":\"object\"},"
    "\"items\":"
    "{\"type\":\"array\"},\"int\":{\"type\":\"integer\"},\"nul\":{\"type\":\"null\"},\"s\":{\"type\":"
    "\"string\"},"
    "\"any\":{},\"choice\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]},\"sfirst\":{\"type\":"
    "[\"string\",\"integer\"]},\"ifirst\":{\"type\":[\"integer\",\"string\"]},\"mode\":{\"enum\":[null,"
    "\"auto\"]},"
    "\"color\":{\"enum\":[\"red\"]},\"meta\":{\"type\":\"object\",\"additionalProperties\":{\"type\":"
    "\"integer\"}},"
    "\"nums\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}},\"alias\":{\"type\":\"Float64\"},"
    "\"uint\":{\"type\":\"unsigned_int\"},\"nothing\":{\"type\":\"mystery\"}}}}}"
    "]}";

enum split { WHOLE, BYTES, TWO, RANDOM };

/* Feed `out` in the given chunking; record events into ev. Returns the first non-OK code. */
static int32_t run(const char *req, const char *prompt, const char *out, size_t n, enum split how, size_t at,
                   unsigned seed, struct fixture_events *ev)
{
    struct mmgw_output_parser *p = NULL;
    struct mmgw_error err = {0};
    struct mmgw_out_sink sink = fixture_event_sink(ev);
    int32_t rc =
        m3_parser_create(&inst, req, req ? strlen(req) : 0, prompt, prompt ? strlen(prompt) : 0, &p, &err);
    if (rc != MMGW_OK) return rc;
    CHECK(p != NULL);
    size_t i = 0;
    while (rc == MMGW_OK && i < n) {
        size_t step = n - i;
        if (how == BYTES) step = 1;
        if (how == TWO) step = i < at ? at - i : n - i;
        if (how == RANDOM) {
            seed = seed * 1103515245u + 12345u;
            step = 1 + (seed >> 16) % 9;
            if (step > n - i) step = n - i;
        }
        rc = m3_parser_feed(p, out + i, step, &sink, &err);
        i += step;
    }
    if (rc == MMGW_OK) rc = m3_parser_finish(p, &sink, &err);
    m3_parser_destroy(p);
    CHECK_MSG(fixture_live_allocs == 0, "leaked %ld allocations", fixture_live_allocs);
    return rc;
}

/* Every tool's arguments must be one JSON object. */
static void check_args_json(const struct fixture_events *ev, const char *out)
{
    for (int t = 0; t < ev->n_tools; t++) {
        json_error_t jerr;
        json_t *v = json_loadb(ev->tool_args[t].p ? ev->tool_args[t].p : "", ev->tool_args[t].len,
                               JSON_ALLOW_NUL, &jerr);
        CHECK_MSG(v && json_is_object(v), "tool %d args '%s' are not a JSON object (%s) for output '%s'", t,
                  ev->tool_args[t].p, jerr.text, out);
        json_decref(v);
    }
    CHECK_MSG(!ev->bad_order, "events out of order for '%s'", out);
}

/* The output parsed whole, byte by byte, at every split point and in random chunks gives the same events. */
static void check_chunkings(const char *req, const char *prompt, const char *out,
                            struct fixture_events *whole)
{
    size_t n = strlen(out);
    memset(whole, 0, sizeof(*whole));
    CHECK(run(req, prompt, out, n, WHOLE, 0, 0, whole) == MMGW_OK);
    check_args_json(whole, out);
    struct fixture_events ev = {0};
    CHECK(run(req, prompt, out, n, BYTES, 0, 0, &ev) == MMGW_OK);
    CHECK_MSG(fixture_events_equal(whole, &ev), "byte-by-byte differs for '%s'", out);
    if (!fixture_events_equal(whole, &ev)) {
        fixture_events_dump("whole", whole);
        fixture_events_dump("bytes", &ev);
    }
    fixture_events_free(&ev);
    for (size_t at = 1; at < n; at++) {
        memset(&ev, 0, sizeof(ev));
        CHECK(run(req, prompt, out, n, TWO, at, 0, &ev) == MMGW_OK);
        int same = fixture_events_equal(whole, &ev);
        CHECK_MSG(same, "split at %zu differs for '%s'", at, out);
        fixture_events_free(&ev);
        if (!same) break;
    }
    for (unsigned seed = 1; seed < 6; seed++) {
        memset(&ev, 0, sizeof(ev));
        CHECK(run(req, prompt, out, n, RANDOM, 0, seed, &ev) == MMGW_OK);
        CHECK_MSG(fixture_events_equal(whole, &ev), "random chunks (seed %u) differ for '%s'", seed, out);
        fixture_events_free(&ev);
    }
}

struct want {
    const char *content, *reasoning;
    int n_tools;
    const char *name[4], *args[4];
};

static void expect(const char *req, const char *prompt, const char *out, struct want w)
{
    struct fixture_events ev;
    check_chunkings(req, prompt, out, &ev);
    const char *content = ev.content.p ? ev.content.p : "", *reasoning = ev.reasoning.p ? ev.reasoning.p : "";
    CHECK_MSG(strcmp(content, w.content ? w.content : "") == 0, "content '%s' want '%s' for '%s'", content,
              w.content ? w.content : "", out);
    CHECK_MSG(strcmp(reasoning, w.reasoning ? w.reasoning : "") == 0, "reasoning '%s' want '%s' for '%s'",
              reasoning, w.reasoning ? w.reasoning : "", out);
    CHECK_MSG(ev.n_tools == w.n_tools, "%d tools, want %d for '%s'", ev.n_tools, w.n_tools, out);
    for (int t = 0; t < w.n_tools && t < ev.n_tools; t++) {
        CHECK_MSG(ev.tool_name[t].p && strcmp(ev.tool_name[t].p, w.name[t]) == 0,
                  "tool %d name '%s' want '%s'", t, ev.tool_name[t].p, w.name[t]);
        CHECK_MSG(ev.tool_args[t].p && strcmp(ev.tool_args[t].p, w.args[t]) == 0,
                  "tool %d args\n '%s'\nwant '%s'", t, ev.tool_args[t].p, w.args[t]);
    }
    fixture_events_free(&ev);
}

static const char *enabled_req = "{\"messages\":[],\"chat_template_kwargs\":{\"thinking_mode\":\"enabled\"}}";

static void test_reasoning(void)
{
    expect(NULL, NULL, "Hello, world!", (struct want){.content = "Hello, world!"});
    expect(NULL, NULL, "<mm:think>R</mm:think>answer", (struct want){.content = "answer", .reasoning = "R"});
    /* a bare leading closer (the model chose not to think) is dropped */
    expect(NULL, NULL, "</mm:think>answer", (struct want){.content = "answer"});
    expect(NULL, NULL, "</mm:think></mm:think>x", (struct want){.content = "</mm:think>x"});
    /* later stray closers stay; later pairs are reasoning */
    expect(NULL, NULL, "a</mm:think>b", (struct want){.content = "a</mm:think>b"});
    expect(NULL, NULL, "x<mm:think>y</mm:think>z<mm:think>w</mm:think>",
           (struct want){.content = "xz", .reasoning = "yw"});
    expect(NULL, NULL, " </mm:think>a", (struct want){.content = " </mm:think>a"});
    /* thinking enabled: the response starts inside reasoning */
    expect(enabled_req, NULL, "R</mm:think>answer", (struct want){.content = "answer", .reasoning = "R"});
    expect(enabled_req, NULL, "</mm:think>answer", (struct want){.content = "answer"});
    expect(enabled_req, NULL, "truncated thought", (struct want){.reasoning = "truncated thought"});
    /* or the prompt already opened it */
    expect("{\"messages\":[]}", "]~b]ai\n<mm:think>", "R</mm:think>A",
           (struct want){.content = "A", .reasoning = "R"});
    expect("{\"messages\":[]}", "]~b]ai\n</mm:think>", "R</mm:think>A",
           (struct want){.content = "R</mm:think>A"});
    /* an unclosed reasoning at the end is all reasoning; partial markers at the end are text */
    expect(NULL, NULL, "<mm:think>never closed </mm:th", (struct want){.reasoning = "never closed </mm:th"});
    expect(NULL, NULL, "ends with <mm:thi", (struct want){.content = "ends with <mm:thi"});
    expect(NULL, NULL, "</mm:th", (struct want){.content = "</mm:th"});
    expect(NULL, NULL, "", (struct want){0});
    /* unicode passes through untouched */
    expect(NULL, NULL, "<mm:think>日本語</mm:think>héllo ☃ \xf0\x9f\x98\x80",
           (struct want){.content = "héllo ☃ \xf0\x9f\x98\x80", .reasoning = "日本語"});
}

static void test_hold_back(void)
{
    /* text that could still become a marker is held back, and released once it cannot */
    struct mmgw_output_parser *p = NULL;
    struct mmgw_error err = {0};
    struct fixture_events ev = {0};
    struct mmgw_out_sink sink = fixture_event_sink(&ev);
    CHECK(m3_parser_create(&inst, tools_req, strlen(tools_req), NULL, 0, &p, &err) == MMGW_OK);
    CHECK(m3_parser_feed(p, "</mm", 4, &sink, &err) == MMGW_OK);
    CHECK_EQ_INT(ev.n_events, 0);
    CHECK(m3_parser_feed(p, ":think>abc]<]mini", 17, &sink, &err) == MMGW_OK);
    CHECK_STR(ev.content.p, "abc");
    CHECK(m3_parser_feed(p, "max[>[ x <mm", 12, &sink, &err) == MMGW_OK);
    CHECK_STR(ev.content.p, "abc]<]minimax[>[ x ");
    CHECK(m3_parser_feed(p, ":think>r</mm:", 13, &sink, &err) == MMGW_OK);
    CHECK_STR(ev.reasoning.p, "r");
    CHECK(m3_parser_feed(p, "think>" TC INV("get_weather"), strlen("think>" TC INV("get_weather")), &sink,
                         &err) == MMGW_OK);
    CHECK_EQ_INT(ev.n_tools, 1); /* the name goes out at the invoke header */
    CHECK_STR(ev.tool_name[0].p, "get_weather");
    CHECK_EQ_INT(ev.tool_args[0].len, 0);
    CHECK(m3_parser_feed(p, EL("city", "Paris"), strlen(EL("city", "Paris")), &sink, &err) == MMGW_OK);
    CHECK_STR(ev.tool_args[0].p, "{\"city\":\"Paris\"");
    CHECK(m3_parser_feed(p, EL("days", "3") INVE, strlen(EL("days", "3") INVE), &sink, &err) == MMGW_OK);
    CHECK_STR(ev.tool_args[0].p, "{\"city\":\"Paris\",\"days\":3}");
    CHECK_EQ_INT(ev.n_args_events, 3); /* one per argument, then the closing brace */
    CHECK(m3_parser_finish(p, &sink, &err) == MMGW_OK);
    CHECK(m3_parser_feed(p, "x", 1, &sink, &err) == MMGW_E_INVALID); /* nothing after finish */
    m3_parser_destroy(p);
    fixture_events_free(&ev);
    CHECK_EQ_INT(fixture_live_allocs, 0);
}

/* Tool calls are only parsed when the request offers tools and tool_choice is not "none" (vLLM, SGLang):
 * otherwise the markup is plain content and no call is reported. */
static void test_tools_offered(void)
{
    const char *out = "<mm:think>r</mm:think>Hi " TC INV("get_weather") EL("city", "Oslo") INVE TCE;
    const char *as_text = "Hi " TC INV("get_weather") EL("city", "Oslo") INVE TCE;
    expect(NULL, NULL, out, (struct want){.content = as_text, .reasoning = "r"});
    expect("{\"messages\":[],\"tools\":[]}", NULL, out, (struct want){.content = as_text, .reasoning = "r"});
    expect("{\"messages\":[],\"tools\":null}", NULL, out,
           (struct want){.content = as_text, .reasoning = "r"});
    char req[4096];
    snprintf(req, sizeof req, "%.*s,\"tool_choice\":\"none\"}", (int)strlen(tools_req) - 1, tools_req);
    expect(req, NULL, out, (struct want){.content = as_text, .reasoning = "r"});
    snprintf(req, sizeof req, "%.*s,\"tool_choice\":\"auto\"}", (int)strlen(tools_req) - 1, tools_req);
    expect(req, NULL, out,
           (struct want){.content = "Hi ",
                         .reasoning = "r",
                         .n_tools = 1,
                         .name = {"get_weather"},
                         .args = {"{\"city\":\"Oslo\"}"}});
}

static void test_tool_calls(void)
{
    expect(tools_req, NULL,
           "Let me check. " TC INV("get_weather") EL("city", "Seattle") EL("days", "5") INVE TCE,
           (struct want){.content = "Let me check. ",
                         .n_tools = 1,
                         .name = {"get_weather"},
                         .args = {"{\"city\":\"Seattle\",\"days\":5}"}});
    /* several invokes, text after the block is content, and a second block continues the numbering */
    expect(tools_req, NULL,
           "<mm:think>need two</mm:think>" TC INV("get_weather") EL("city", "Seattle") INVE INV("get_weather")
               EL("city", "NYC") INVE TCE " Between. " TC INV("get_weather") INVE TCE " Done.",
           (struct want){.content = " Between.  Done.",
                         .reasoning = "need two",
                         .n_tools = 3,
                         .name = {"get_weather", "get_weather", "get_weather"},
                         .args = {"{\"city\":\"Seattle\"}", "{\"city\":\"NYC\"}", "{}"}});
    /* vLLM's nested example, typed by the schema (keys in the order the model wrote them) */
    expect(tools_req, NULL,
           TC INV("create_order") EL("user_id", "42") EL("urgent", "true")
               EL("note", "Please leave at front desk.")
                   EL("shipping", EL("city", "Singapore") EL("zip", "018956"))
                       EL("items", EL("item", EL("sku", "book-001") EL("qty", "2"))
                                       EL("item", EL("sku", "pen-007") EL("qty", "5")))
                           EL("metadata", EL("score", "42") EL("rank", "7"))
                               EL("duplicate_demo", EL("tag", "a") EL("tag", "b"))
                                   EL("schema_mismatch_array", EL("x", "1") EL("x", "2"))
                                       EL("unknown_struct", EL("a", "1") EL("a", "2")) INVE TCE,
           (struct want){
               .n_tools = 1,
               .name = {"create_order"},
               .args = {"{\"user_id\":42,\"urgent\":true,\"note\":\"Please leave at front desk.\","
                        "\"shipping\":{\"city\":\"Singapore\",\"zip\":18956},\"items\":[{\"sku\":"
                        "\"book-001\",\"qty\":2},{\"sku\":\"pen-007\",\"qty\":5}],\"metadata\":{\"score\":"
                        "42,\"rank\":7},\"duplicate_demo\":{\"tag\":[\"a\",\"b\"]},"
                        "\"schema_mismatch_array\":[1,2],\"unknown_struct\":{\"a\":[\"1\",\"2\"]}}"}});
    /* junk inside an invoke drops the rest of it, keeping what was parsed */
    expect(tools_req, NULL,
           TC INV("get_weather") EL("city", "Seattle") "I need to use the city above." EL("days", "5")
               INVE TCE,
           (struct want){.n_tools = 1, .name = {"get_weather"}, .args = {"{\"city\":\"Seattle\"}"}});
    /* multi-line leaves keep their newlines; objects parse from JSON text */
    expect(
        tools_req, NULL,
        TC INV("calculate_area") EL("shape", "\nrectangle\n") EL("dimensions", "{\"width\":10,\"height\":20}")
            EL("precision", "2") INVE TCE,
        (struct want){.n_tools = 1,
                      .name = {"calculate_area"},
                      .args = {"{\"shape\":\"\\nrectangle\\n\",\"dimensions\":{\"width\":10,\"height\":20},"
                               "\"precision\":2}"}});
    /* whitespace between tags is allowed; names quoted with ' or bare, trimmed */
    expect(tools_req, NULL,
           TC "\n  " NS "<invoke   name='get_weather'>\n" EL(
               "city", "A") "\n" INVE "  " NS "<invoke name= get_weather >" EL("days", "1") INVE "\n" TCE,
           (struct want){.n_tools = 2,
                         .name = {"get_weather", "get_weather"},
                         .args = {"{\"city\":\"A\"}", "{\"days\":1}"}});
    /* an unknown tool: every leaf is a string, "null" is null, structures are objects */
    expect(tools_req, NULL,
           TC INV("mystery") EL("n", "42") EL("z", "null") EL("o", EL("k", "v")) EL("u", "é\"\\\t") INVE TCE,
           (struct want){.n_tools = 1,
                         .name = {"mystery"},
                         .args = {"{\"n\":\"42\",\"z\":null,\"o\":{\"k\":\"v\"},\"u\":\"é\\\"\\\\\\t\"}"}});
    /* a marker that does not open a tool block is content */
    expect(tools_req, NULL, NS "<tool_cal> and " NS, (struct want){.content = NS "<tool_cal> and " NS});
}

static void test_truncated_and_junk(void)
{
    /* an open invoke is closed at the end of the stream, a half-written argument dropped */
    expect(tools_req, NULL, TC INV("get_weather") EL("city", "Rome") NS "<days>3" NS "</da",
           (struct want){.n_tools = 1, .name = {"get_weather"}, .args = {"{\"city\":\"Rome\"}"}});
    expect(tools_req, NULL, "pre " TC INV("get_weather"),
           (struct want){.content = "pre ", .n_tools = 1, .name = {"get_weather"}, .args = {"{}"}});
    expect(tools_req, NULL, "pre " TC NS "<invo", (struct want){.content = "pre "});
    expect(tools_req, NULL, "pre " TC, (struct want){.content = "pre "});
    /* junk between invokes is skipped */
    expect(
        tools_req, NULL,
        TC "some words " INV("get_weather") EL("days", "2") INVE "more" NS "<bogus>" TCE "after",
        (struct want){.content = "after", .n_tools = 1, .name = {"get_weather"}, .args = {"{\"days\":2}"}});
    /* an invoke header without a name, and one too long to be a header, are skipped with their bodies */
    expect(tools_req, NULL, TC NS "<invoke>" EL("a", "1") INVE TCE "x", (struct want){.content = "x"});
    /* a stray closing tag closes the open ancestor it names; an unknown one is text */
    expect(
        tools_req, NULL, TC INV("t") NS "<a>" NS "<b>x" NS "</a>" NS "<c>y" NS "</q>z" NS "</c>" INVE TCE,
        (struct want){.n_tools = 1, .name = {"t"}, .args = {"{\"a\":{\"b\":\"x\"},\"c\":\"y" NS "</q>z\"}"}});
    /* mixed text is kept under $text, renamed while the name is taken */
    expect(tools_req, NULL,
           TC INV("t") NS "<o>hello " EL("k", "1") " world" NS "</o>" NS "<p>t" EL("$text", "1") NS
           "</p>" INVE TCE,
           (struct want){
               .n_tools = 1,
               .name = {"t"},
               .args = {"{\"o\":{\"k\":\"1\",\"$text\":\"hello  world\"},\"p\":{\"$text\":\"1\",\"$$text\":"
                        "\"t\"}}"}});
    /* a closing tag at argument level sends the rest of the invoke to junk */
    expect(tools_req, NULL, TC INV("t") EL("a", "1") NS "</a>" EL("b", "2") INVE TCE,
           (struct want){.n_tools = 1, .name = {"t"}, .args = {"{\"a\":\"1\"}"}});
    /* an empty or blank tag name is text inside an argument */
    expect(tools_req, NULL, TC INV("t") NS "<a>1" NS "<>2" NS "< >3" NS "</a>" INVE TCE,
           (struct want){.n_tools = 1, .name = {"t"}, .args = {"{\"a\":\"1" NS "<>2" NS "< >3\"}"}});
}

static void test_types(void)
{
    expect(tools_req, NULL,
           TC INV("convert") EL("whole", "5.0") EL("flag", "true") EL("payload", "{\"nested\":true}")
               EL("items", "[1,2]") EL("int", "-7") EL("nul", "NULL") EL("s", "null") EL("any", "5.5")
                   EL("choice", "42") EL("sfirst", "42") EL("ifirst", "42") EL("mode", "null")
                       EL("color", "null") EL("meta", EL("a", "1") EL("b", "x"))
                           EL("nums", EL("item", "1") EL("item", "2.50")) EL("alias", "7.5") EL("uint", "7")
                               EL("nothing", "42") INVE TCE,
           (struct want){
               .n_tools = 1,
               .name = {"convert"},
               .args = {"{\"whole\":5.0,\"flag\":true,\"payload\":{\"nested\":true},\"items\":[1,2],"
                        "\"int\":-7,\"nul\":null,\"s\":\"null\",\"any\":5.5,\"choice\":42,\"sfirst\":"
                        "\"42\",\"ifirst\":42,\"mode\":null,\"color\":\"null\",\"meta\":{\"a\":1,\"b\":"
                        "\"x\"},\"nums\":[1,2.5],\"alias\":7.5,\"uint\":7,\"nothing\":\"42\"}"}});
    /* number spellings follow serde_json (vLLM's parameters.rs tests): 5. -> 5.0, +1 -> 1, +1.0 -> 1.0 */
    expect(tools_req, NULL,
           TC INV("convert") EL("whole", "5.") EL("whole", "+1") EL("whole", "+1.0") EL("whole", " 7 ")
               EL("whole", "1E5") EL("whole", "1e-7") EL("whole", "-0") EL("whole", "1e400") EL("whole", ".5")
                   EL("whole", "0x10") EL("whole", "1e16") EL("whole", "0.0001") INVE TCE,
           (struct want){.n_tools = 1,
                         .name = {"convert"},
                         .args = {"{\"whole\":5.0,\"whole\":1,\"whole\":1.0,\"whole\":7,\"whole\":100000.0,"
                                  "\"whole\":1e-7,\"whole\":-0.0,\"whole\":\"1e400\",\"whole\":0.5,\"whole\":"
                                  "\"0x10\",\"whole\":1e16,\"whole\":0.0001}"}});
    /* integers are not trimmed; booleans are (any case, 1/0); empty object/array text; failures are strings
     */
    expect(tools_req, NULL,
           TC INV("convert") EL("int", " 7") EL("int", "+7") EL("int", "99999999999999999999")
               EL("flag", " TRUE ") EL("flag", "0") EL("flag", "yes") EL("payload", "") EL("items", "")
                   EL("payload", "not json") EL("any", "") EL("any", "plain text")
                       EL("any", "[1, {\"a\": null}]") EL("any", "False") INVE TCE,
           (struct want){.n_tools = 1,
                         .name = {"convert"},
                         .args = {"{\"int\":\" 7\",\"int\":7,\"int\":\"99999999999999999999\",\"flag\":true,"
                                  "\"flag\":false,\"flag\":\"yes\",\"payload\":{},\"items\":[],\"payload\":"
                                  "\"not json\",\"any\":\"\",\"any\":\"plain text\",\"any\":[1,{\"a\":null}],"
                                  "\"any\":false}"}});
}

/* Random outputs built from marker pieces: the chunking invariant and valid JSON arguments, every time. */
static void test_random_outputs(void)
{
    static const char *const pieces[] = {"<mm:think>",
                                         "</mm:think>",
                                         NS,
                                         NS "<tool_call>",
                                         "\n",
                                         NS "</tool_call>",
                                         NS "<invoke name=\"",
                                         "get_weather",
                                         "convert",
                                         "\">",
                                         NS "</invoke>",
                                         NS "<city>",
                                         NS "</city>",
                                         NS "<days>",
                                         NS "</days>",
                                         NS "<item>",
                                         NS "</item>",
                                         NS "<meta>",
                                         NS "</meta>",
                                         "42",
                                         "null",
                                         "true",
                                         " ",
                                         "é",
                                         "x",
                                         "<",
                                         ">",
                                         "\"",
                                         "{\"a\":1}",
                                         "[",
                                         "]",
                                         "</",
                                         "]<]mini",
                                         "max[>[",
                                         "<mm:th",
                                         NS "<",
                                         NS "</"};
    unsigned seed = 12345;
    char out[512];
    int failures_before = test_failures__;
    for (int iter = 0; iter < 400; iter++) {
        size_t n = 0;
        seed = seed * 1103515245u + 12345u;
        int parts = 1 + (int)((seed >> 16) % 24);
        for (int k = 0; k < parts; k++) {
            seed = seed * 1103515245u + 12345u;
            const char *piece = pieces[(seed >> 16) % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t len = strlen(piece);
            if (n + len >= sizeof(out)) break;
            memcpy(out + n, piece, len);
            n += len;
        }
        out[n] = '\0';
        struct fixture_events ev;
        check_chunkings(iter % 3 ? tools_req : enabled_req, NULL, out, &ev);
        fixture_events_free(&ev);
        if (test_failures__ > failures_before) {
            fprintf(stderr, "failing random output: '%s'\n", out);
            return;
        }
    }
}

static void test_errors_and_memory(void)
{
    struct mmgw_output_parser *p = (struct mmgw_output_parser *)&inst;
    struct mmgw_error err = {0};
    CHECK_EQ_INT(m3_parser_create(&inst, "{\"tools\":", 9, NULL, 0, &p, &err), MMGW_E_INVALID);
    CHECK(p == NULL);
    CHECK(strstr(err.msg, "invalid JSON") != NULL);
    /* a sink that refuses stops the parser with that code */
    const char *out = "<mm:think>r</mm:think>text";
    for (long k = 0; k < 30; k++) {
        struct fixture_events ev = {0};
        fixture_fail_after = k;
        int32_t rc = run(tools_req, NULL, out, strlen(out), WHOLE, 0, 0, &ev);
        fixture_fail_after = -1;
        CHECK_MSG(rc == MMGW_OK || rc == MMGW_E_NOMEM, "fail_after %ld: rc %d", k, rc);
        fixture_events_free(&ev);
    }
    const char *calls =
        TC INV("create_order") EL("shipping", EL("city", "S") EL("zip", "1")) EL("user_id", "1") INVE TCE;
    int saw_nomem = 0;
    for (long k = 0; k < 60; k++) {
        struct fixture_events ev = {0};
        fixture_fail_after = k;
        int32_t rc = run(tools_req, NULL, calls, strlen(calls), BYTES, 0, 0, &ev);
        fixture_fail_after = -1;
        CHECK_MSG(rc == MMGW_OK || rc == MMGW_E_NOMEM, "fail_after %ld: rc %d", k, rc);
        saw_nomem |= rc == MMGW_E_NOMEM;
        fixture_events_free(&ev);
    }
    CHECK(saw_nomem);
}

int main(void)
{
    test_reasoning();
    test_hold_back();
    test_tool_calls();
    test_tools_offered();
    test_truncated_and_junk();
    test_types();
    test_random_outputs();
    test_errors_and_memory();
    return test_done();
}
