/* MiniMax-M3 output parser: splits a streamed response into reasoning, content and tool calls
 * (../shared/docs/M3_CHAT.md §4).
 *
 * Two stages, as the reference engines run them: the reasoning splitter sees the whole output and emits
 * reasoning; what it classifies as content goes through the tool-call parser, which emits content and
 * tool calls. Each stage matches markers on text (markers may be split across tokens, and the test
 * tokenizer has no `<mm:think>` token) and holds back only a suffix that could still become a marker.
 * Every decision depends on the bytes alone, never on how they were chunked, so feeding an output whole or
 * byte by byte gives the same events once each kind is concatenated.
 *
 * Tool calls follow vLLM's Rust minimax_m3 parser on well-formed input; where it would fail the whole
 * response on malformed input, this one recovers (documented in docs/design/chat.md): junk between invokes
 * is skipped, a stray closing tag closes the open ancestor it names or is kept as text. */
#include <string.h>

#include "m3_internal.h"
#include "m3_text.h"
#include "m3_toolparse.h"

#define THINK_BEGIN "<mm:think>"
#define THINK_END "</mm:think>"
#define NS "]<]minimax[>["
#define TOOL_CALL_START NS "<tool_call>"
#define TOOL_CALL_END NS "</tool_call>"
#define INVOKE_START NS "<invoke"
#define INVOKE_END NS "</invoke>"
#define LIT(s) (s), (sizeof(s) - 1)

#define MAX_NEST 64     /* element nesting; a deeper open tag is kept as text */
#define MAX_TAG 256     /* bytes of a tag name; a longer `NS<…` is not a tag */
#define MAX_HEADER 1024 /* bytes of an invoke header */

enum mode {
    MODE_TEXT,    /* content, looking for NS<tool_call> */
    MODE_BLOCK,   /* inside a tool block, between invokes */
    MODE_INVOKE,  /* inside an invoke, between arguments */
    MODE_ELEMENT, /* inside an argument (stack not empty) */
    MODE_JUNK     /* inside an invoke after something unparseable: skip to NS</invoke> */
};

struct mmgw_output_parser {
    const struct mmgw_host_api *host;
    json_t *request; /* holds the strings the schemas point into */
    struct m3_schemas *schemas;
    int finished;
    /* stage 1: reasoning */
    int in_reasoning, at_start;
    struct m3_buf hold1;
    /* stage 2: tool calls (only when the request offers tools and tool_choice is not "none") */
    int tools_on;
    int mode;
    struct m3_buf hold2;
    uint32_t tool_index;
    int args_open;
    const struct m3_tool_schema *tool;
    struct m3_elem *stack[MAX_NEST];
    int depth;
    /* the call in progress */
    struct mmgw_out_sink *sink;
    struct mmgw_error *err;
};

/* ---- small matching helpers ---- */

enum match { M_NO, M_PARTIAL, M_FULL };

/* Does s (n bytes) start with lit, or is it a proper prefix of it? */
static enum match match_prefix(const char *s, size_t n, const char *lit, size_t len)
{
    if (n >= len) return memcmp(s, lit, len) == 0 ? M_FULL : M_NO;
    return memcmp(s, lit, n) == 0 ? M_PARTIAL : M_NO;
}

/* Length of the longest suffix of s that is a proper prefix of lit. */
static size_t partial_suffix(const char *s, size_t n, const char *lit, size_t len)
{
    size_t k = n < len - 1 ? n : len - 1;
    for (; k > 0; k--)
        if (memcmp(s + n - k, lit, k) == 0) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *lit, size_t len)
{
    return n >= len ? memmem(s, n, lit, len) : NULL;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* ---- emitting ---- */

static int32_t emit(struct mmgw_output_parser *p, int32_t kind, const char *s, size_t n)
{
    if (n == 0 && (kind == MMGW_OUT_CONTENT || kind == MMGW_OUT_REASONING)) return MMGW_OK;
    int32_t rc = p->sink->emit(p->sink->ctx, kind, (int32_t)p->tool_index, s, n);
    if (rc != MMGW_OK)
        return p->host->set_error(p->err, rc, "m3 output parser: the event sink refused an event");
    return MMGW_OK;
}

static int32_t nomem(struct mmgw_output_parser *p)
{
    return p->host->set_error(p->err, MMGW_E_NOMEM, "m3 output parser: out of memory");
}

static void drop_stack(struct mmgw_output_parser *p)
{
    while (p->depth > 0) m3_elem_free(p->host, p->stack[--p->depth]);
}

static int32_t close_invoke(struct mmgw_output_parser *p)
{
    drop_stack(p);
    int32_t rc =
        p->args_open ? emit(p, MMGW_OUT_TOOL_ARGS, LIT("}")) : emit(p, MMGW_OUT_TOOL_ARGS, LIT("{}"));
    p->tool_index++;
    p->args_open = 0;
    p->tool = NULL;
    p->mode = MODE_BLOCK;
    return rc;
}

/* A top-level argument is complete: one fragment `{"k":v` or `,"k":v`. */
static int32_t emit_argument(struct mmgw_output_parser *p, struct m3_elem *arg)
{
    json_t *value = NULL;
    int32_t rc = m3_convert_argument(p->tool, arg, &value);
    if (rc != MMGW_OK) {
        m3_elem_free(p->host, arg);
        return nomem(p);
    }
    struct m3_buf frag;
    m3_buf_init(&frag, p->host);
    m3_buf_putc(&frag, p->args_open ? ',' : '{');
    m3_fmt_json_string(&frag, arg->name, arg->name_len);
    m3_buf_putc(&frag, ':');
    rc = m3_dump_serde_json(&frag, value, MAX_NEST + 8);
    json_decref(value);
    m3_elem_free(p->host, arg);
    if (frag.oom || rc != MMGW_OK) {
        m3_buf_free(&frag);
        return rc != MMGW_OK ? p->host->set_error(p->err, rc, "m3 output parser: argument nests too deeply")
                             : nomem(p);
    }
    rc = emit(p, MMGW_OUT_TOOL_ARGS, frag.p, frag.len);
    m3_buf_free(&frag);
    p->args_open = 1;
    return rc;
}

/* Close the innermost open element; when it was top-level, emit it. */
static int32_t close_element(struct mmgw_output_parser *p)
{
    struct m3_elem *e = p->stack[--p->depth];
    if (m3_elem_finish(p->host, e) != MMGW_OK) {
        m3_elem_free(p->host, e);
        return nomem(p);
    }
    if (p->depth == 0) {
        p->mode = MODE_INVOKE;
        return emit_argument(p, e);
    }
    return m3_elem_add_kid(p->host, p->stack[p->depth - 1], e) == MMGW_OK ? MMGW_OK : nomem(p);
}

/* ---- tags ---- */

enum tag { TAG_NEED, TAG_NONE, TAG_OPEN, TAG_CLOSE };

/* s starts at a (possibly partial) NS. TAG_NONE: not a tag (NS not followed by `<`, empty or blank name,
 * name too long, or not NS at all). For OPEN/CLOSE, [*name, *name + *len) is the name (without `/`) and
 * *used the tag's length. */
static enum tag parse_tag(const char *s, size_t n, const char **name, size_t *len, size_t *used)
{
    enum match m = match_prefix(s, n, LIT(NS));
    if (m == M_NO) return TAG_NONE;
    size_t ns = sizeof(NS) - 1;
    if (m == M_PARTIAL || n == ns) return TAG_NEED;
    if (s[ns] != '<') return TAG_NONE;
    size_t start = ns + 1, avail = n - start;
    size_t lim = avail < MAX_TAG + 1 ? avail : MAX_TAG + 1;
    const char *gt = memchr(s + start, '>', lim);
    if (!gt) return avail > MAX_TAG ? TAG_NONE : TAG_NEED;
    const char *nm = s + start;
    size_t nl = (size_t)(gt - nm);
    *used = (size_t)(gt - s) + 1;
    if (nl == 0) return TAG_NONE;
    if (nm[0] == '/') {
        *name = nm + 1;
        *len = nl - 1;
        return TAG_CLOSE;
    }
    const char *t = nm;
    size_t tl = nl;
    m3_trim_unicode(&t, &tl);
    if (tl == 0) return TAG_NONE;
    *name = nm;
    *len = nl;
    return TAG_OPEN;
}

enum hdr { HDR_NEED, HDR_FAIL, HDR_OK };

/* `NS<invoke` ws+ `name=` ("x" | 'x' | x) … `>`. */
static enum hdr parse_invoke_header(const char *s, size_t n, const char **name, size_t *len, size_t *used)
{
    if (n > MAX_HEADER) n = MAX_HEADER; /* a header longer than this fails, whatever follows */
    size_t full = n == MAX_HEADER;
    enum match m = match_prefix(s, n, LIT(INVOKE_START));
    if (m == M_NO) return HDR_FAIL;
    if (m == M_PARTIAL) return full ? HDR_FAIL : HDR_NEED;
    size_t i = sizeof(INVOKE_START) - 1, ws = skip_ws(s + i, n - i);
    if (i + ws == n) return full ? HDR_FAIL : HDR_NEED;
    if (ws == 0) return HDR_FAIL;
    i += ws;
    m = match_prefix(s + i, n - i, LIT("name="));
    if (m == M_NO) return HDR_FAIL;
    if (m == M_PARTIAL) return full ? HDR_FAIL : HDR_NEED;
    i += 5;
    if (i == n) return full ? HDR_FAIL : HDR_NEED;
    const char *v = s + i, *gt;
    if ((s[i] == '"' || s[i] == '\'') && i + 1 < n && s[i + 1] != s[i]) {
        const char *close = memchr(s + i + 1, s[i], n - i - 1);
        if (!close) return full ? HDR_FAIL : HDR_NEED;
        gt = memchr(close + 1, '>', (size_t)(s + n - close - 1));
        if (!gt) return full ? HDR_FAIL : HDR_NEED;
        v = s + i + 1;
        *len = (size_t)(close - v);
    } else {
        if (i + 1 == n && (s[i] == '"' || s[i] == '\'')) return full ? HDR_FAIL : HDR_NEED;
        gt = memchr(v, '>', (size_t)(s + n - v));
        if (!gt) return full ? HDR_FAIL : HDR_NEED;
        *len = (size_t)(gt - v);
    }
    m3_trim_unicode(&v, len);
    *name = v;
    *used = (size_t)(gt - s) + 1;
    return HDR_OK;
}

/* ---- stage 2: tool calls on the content stream ---- */

/* Run stage 2 over hold2; consume what was decided. finishing: no more input will come. */
static int32_t run_tools(struct mmgw_output_parser *p, int finishing)
{
    const char *buf = p->hold2.p ? p->hold2.p : "";
    size_t len = p->hold2.len, pos = 0;
    int32_t rc = MMGW_OK;
    while (rc == MMGW_OK) {
        const char *s = buf + pos, *hit;
        size_t n = len - pos, keep, name_len = 0, used = 0;
        const char *name = NULL;
        if (p->mode == MODE_TEXT) {
            if ((hit = find(s, n, LIT(TOOL_CALL_START))) != NULL) {
                rc = emit(p, MMGW_OUT_CONTENT, s, (size_t)(hit - s));
                pos += (size_t)(hit - s) + sizeof(TOOL_CALL_START) - 1;
                p->mode = MODE_BLOCK;
                continue;
            }
            keep = finishing ? 0 : partial_suffix(s, n, LIT(TOOL_CALL_START));
            rc = emit(p, MMGW_OUT_CONTENT, s, n - keep);
            pos += n - keep;
            break;
        }
        if (p->mode == MODE_BLOCK) {
            size_t ws = skip_ws(s, n);
            pos += ws, s += ws, n -= ws;
            if (n == 0) break;
            enum match m = match_prefix(s, n, LIT(TOOL_CALL_END));
            if (m == M_FULL) {
                pos += sizeof(TOOL_CALL_END) - 1;
                p->mode = MODE_TEXT;
                continue;
            }
            enum hdr h = parse_invoke_header(s, n, &name, &name_len, &used);
            if (h == HDR_OK) {
                pos += used;
                p->tool = m3_schemas_find(p->schemas, name, name_len);
                p->args_open = 0;
                p->mode = MODE_INVOKE;
                rc = p->sink->emit(p->sink->ctx, MMGW_OUT_TOOL_NAME, (int32_t)p->tool_index, name, name_len);
                if (rc != MMGW_OK)
                    rc = p->host->set_error(p->err, rc, "m3 output parser: the event sink refused");
                continue;
            }
            if (m == M_PARTIAL || h == HDR_NEED) break;
            /* junk between invokes: skip to the next marker */
            if ((hit = find(s + 1, n - 1, LIT(NS))) != NULL) {
                pos += (size_t)(hit - s);
                continue;
            }
            pos += n - partial_suffix(s + 1, n - 1, LIT(NS));
            break;
        }
        if (p->mode == MODE_INVOKE) {
            size_t ws = skip_ws(s, n);
            pos += ws, s += ws, n -= ws;
            if (n == 0) break;
            enum match m = match_prefix(s, n, LIT(INVOKE_END));
            if (m == M_FULL) {
                pos += sizeof(INVOKE_END) - 1;
                rc = close_invoke(p);
                continue;
            }
            if (m == M_PARTIAL) break;
            enum tag t = parse_tag(s, n, &name, &name_len, &used);
            if (t == TAG_NEED) break;
            if (t == TAG_OPEN) {
                struct m3_elem *e = m3_elem_new(p->host, name, name_len);
                if (!e) return nomem(p);
                p->stack[p->depth++] = e;
                p->mode = MODE_ELEMENT;
                pos += used;
                continue;
            }
            p->mode = MODE_JUNK; /* text or a stray closing tag where an argument should be */
            continue;
        }
        if (p->mode == MODE_JUNK) {
            if ((hit = find(s, n, LIT(INVOKE_END))) != NULL) {
                pos += (size_t)(hit - s) + sizeof(INVOKE_END) - 1;
                rc = close_invoke(p);
                continue;
            }
            pos += n - partial_suffix(s, n, LIT(INVOKE_END));
            break;
        }
        /* MODE_ELEMENT: text up to the next marker belongs to the innermost element */
        struct m3_elem *top = p->stack[p->depth - 1];
        hit = find(s, n, LIT(NS));
        size_t text = hit ? (size_t)(hit - s) : n - partial_suffix(s, n, LIT(NS));
        m3_buf_put(&top->text, s, text);
        if (top->text.oom) return nomem(p);
        pos += text;
        if (!hit) break;
        s += text, n -= text;
        enum tag t = parse_tag(s, n, &name, &name_len, &used);
        if (t == TAG_NEED) break;
        if (t == TAG_CLOSE) {
            int match = -1;
            for (int d = p->depth - 1; d >= 0; d--) {
                if (p->stack[d]->name_len == name_len && memcmp(p->stack[d]->name, name, name_len) == 0) {
                    match = d;
                    break;
                }
            }
            if (match >= 0) {
                /* the innermost element, or an ancestor: close everything down to it */
                pos += used;
                while (rc == MMGW_OK && p->depth > match) rc = close_element(p);
                continue;
            }
        } else if (t == TAG_OPEN && p->depth < MAX_NEST) {
            struct m3_elem *e = m3_elem_new(p->host, name, name_len);
            if (!e) return nomem(p);
            p->stack[p->depth++] = e;
            pos += used;
            continue;
        }
        /* not a tag we can use: the marker is text */
        m3_buf_put(&top->text, LIT(NS));
        if (top->text.oom) return nomem(p);
        pos += sizeof(NS) - 1;
    }
    m3_buf_consume(&p->hold2, pos);
    return rc;
}

static int32_t to_tools(struct mmgw_output_parser *p, const char *s, size_t n)
{
    if (n == 0) return MMGW_OK;
    m3_buf_put(&p->hold2, s, n);
    if (p->hold2.oom) return nomem(p);
    return run_tools(p, 0);
}

/* ---- stage 1: reasoning ---- */

static int32_t run_reasoning(struct mmgw_output_parser *p, int finishing)
{
    const char *buf = p->hold1.p ? p->hold1.p : "";
    size_t len = p->hold1.len, pos = 0;
    int32_t rc = MMGW_OK;
    if (p->at_start && len > 0) {
        /* a response-leading closer is dropped (the prompt may have opened no reasoning) */
        enum match m = match_prefix(buf, len, LIT(THINK_END));
        if (m == M_PARTIAL && !finishing) return MMGW_OK;
        if (m == M_FULL) pos = sizeof(THINK_END) - 1;
        p->at_start = 0;
    }
    while (rc == MMGW_OK) {
        const char *s = buf + pos, *marker = p->in_reasoning ? THINK_END : THINK_BEGIN;
        size_t n = len - pos, mlen = strlen(marker);
        const char *hit = find(s, n, marker, mlen);
        size_t body = hit ? (size_t)(hit - s) : n - (finishing ? 0 : partial_suffix(s, n, marker, mlen));
        rc = p->in_reasoning ? emit(p, MMGW_OUT_REASONING, s, body)
             : p->tools_on   ? to_tools(p, s, body)
                             : emit(p, MMGW_OUT_CONTENT, s, body);
        pos += body;
        if (!hit) break;
        pos += mlen;
        p->in_reasoning = !p->in_reasoning;
    }
    m3_buf_consume(&p->hold1, pos);
    return rc;
}

/* ---- plugin entry points ---- */

/* The parser reads only "tools" and "chat_template_kwargs". A request whose text contains neither key
 * (nor a \u escape, the only way JSON can spell a letter differently) has none of them: it is not parsed,
 * which saves a second parse of every chat request (the host has parsed and validated it already). */
static int may_name_parser_fields(const char *json, size_t len)
{
    return memmem(json, len, "\"tools\"", 7) || memmem(json, len, "\"chat_template_kwargs\"", 22) ||
           memmem(json, len, "\\u", 2);
}

int32_t m3_parser_create(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                         const char *prompt_text, uint64_t prompt_len, struct mmgw_output_parser **out,
                         struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    if (!out) return host->set_error(err, MMGW_E_INVALID, "m3 parser_create: missing output pointer");
    *out = NULL;
    json_t *req = NULL;
    if (request_json && json_len > 0 && may_name_parser_fields(request_json, (size_t)json_len)) {
        json_error_t jerr;
        req = json_loadb(request_json, (size_t)json_len, JSON_ALLOW_NUL, &jerr);
        if (!req)
            return host->set_error(err, MMGW_E_INVALID, "request: invalid JSON at line %d column %d: %s",
                                   jerr.line, jerr.column,
                                   m3_printable(jerr.text, sizeof(jerr.text), jerr.text, strlen(jerr.text)));
    }
    struct mmgw_output_parser *p = host->alloc(sizeof(*p));
    if (!p) {
        json_decref(req);
        return host->set_error(err, MMGW_E_NOMEM, "m3 parser_create: out of memory");
    }
    memset(p, 0, sizeof(*p));
    p->host = host;
    p->request = req;
    m3_buf_init(&p->hold1, host);
    m3_buf_init(&p->hold2, host);
    p->mode = MODE_TEXT;
    if (m3_schemas_build(host, json_object_get(req, "tools"), &p->schemas) != MMGW_OK) {
        m3_parser_destroy(p);
        return host->set_error(err, MMGW_E_NOMEM, "m3 parser_create: out of memory");
    }
    /* Tool calls are parsed only when the client offered tools and did not say "none", as vLLM and SGLang
     * do: a client that sent no tools never gets tool_calls (the markup stays in the content). */
    const json_t *tools = json_object_get(req, "tools");
    const json_t *choice = json_object_get(req, "tool_choice");
    p->tools_on = json_is_array(tools) && json_array_size(tools) > 0 &&
                  !(json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0);
    /* The response starts inside reasoning when thinking is enabled, or when the prompt already opened it. */
    const json_t *mode = json_object_get(json_object_get(req, "chat_template_kwargs"), "thinking_mode");
    int enabled = json_is_string(mode) && strcmp(json_string_value(mode), "enabled") == 0;
    size_t bl = sizeof(THINK_BEGIN) - 1;
    int prompt_opened =
        prompt_text && prompt_len >= bl && memcmp(prompt_text + prompt_len - bl, THINK_BEGIN, bl) == 0;
    p->in_reasoning = enabled || prompt_opened;
    p->at_start = !p->in_reasoning;
    *out = p;
    return MMGW_OK;
}

int32_t m3_parser_feed(struct mmgw_output_parser *p, const char *text, uint64_t len,
                       struct mmgw_out_sink *sink, struct mmgw_error *err)
{
    if (!p || !sink || !sink->emit || (len && !text)) return MMGW_E_INVALID;
    if (p->finished) return p->host->set_error(err, MMGW_E_INVALID, "m3 output parser: feed after finish");
    p->sink = sink;
    p->err = err;
    m3_buf_put(&p->hold1, text, (size_t)len);
    if (p->hold1.oom) return nomem(p);
    return run_reasoning(p, 0);
}

int32_t m3_parser_finish(struct mmgw_output_parser *p, struct mmgw_out_sink *sink, struct mmgw_error *err)
{
    if (!p || !sink || !sink->emit) return MMGW_E_INVALID;
    if (p->finished) return MMGW_OK;
    p->finished = 1;
    p->sink = sink;
    p->err = err;
    int32_t rc = run_reasoning(p, 1);
    if (rc == MMGW_OK) rc = run_tools(p, 1);
    if (rc == MMGW_OK && p->mode != MODE_TEXT && p->mode != MODE_BLOCK) rc = close_invoke(p); /* truncated */
    drop_stack(p);
    m3_buf_free(&p->hold1);
    m3_buf_free(&p->hold2);
    return rc;
}

void m3_parser_destroy(struct mmgw_output_parser *p)
{
    if (!p) return;
    drop_stack(p);
    m3_buf_free(&p->hold1);
    m3_buf_free(&p->hold2);
    m3_schemas_free(p->schemas);
    json_decref(p->request);
    p->host->free(p);
}

/* Every token text the markers above are made of: M3's tokenizer has `<tool_call>` and `</tool_call>` as
 * tokens of their own after the namespace token, so they must survive skip_special_tokens too. */
const char *const *m3_parser_tokens(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    static const char *const tokens[] = {THINK_BEGIN, THINK_END, NS, "<tool_call>", "</tool_call>", NULL};
    return tokens;
}
