/* MiniMax-M3 chat template: renders an OpenAI chat request into M3's prompt text, byte for byte as the
 * checkpoint's Jinja template does under HF semantics (../shared/docs/M3_CHAT.md §2-§3). Also the stop and
 * BOS tokens.
 *
 * The template is hand-translated rather than interpreted: it is small and fixed, and a Jinja engine in C
 * would be far more code to trust. Each block below names the template step it mirrors. Where the template
 * would print a Python repr (a dict as content, say) or raise, we return MMGW_E_INVALID with the field's
 * path instead. */
#include <string.h>

#include "m3_internal.h"
#include "m3_text.h"

#define NS "]<]minimax[>["
#define THINK_BEGIN "<mm:think>"
#define THINK_END "</mm:think>"
#define MAX_DEPTH 256 /* nesting of values we render; deeper requests are refused, not recursed */

static const char identity_default[] = "Your model version is MiniMax-M3, developed by MiniMax. Knowledge "
                                       "cutoff: January 2026. Founded in early "
                                       "2022, MiniMax is a global AI foundation model company committed to "
                                       "advancing the frontiers of AI towards "
                                       "AGI.";

static const char thinking_intro[] =
    "\n\n<thinking_instructions>\n"
    "You have a thinking capability that allows you to reason step by step before responding. When thinking "
    "is enabled, wrap your reasoning in " THINK_BEGIN THINK_END
    " tags before your response. When thinking is "
    "disabled, begin your response directly after the " THINK_END
    " prefix. When thinking is adaptive, decide "
    "on your own whether to think for the current turn.\n";

static const char mode_enabled[] = "Current thinking mode: enabled. You MUST think step by step before every "
                                   "response, including after receiving function/tool results.\n";
static const char mode_disabled[] = "Current thinking mode: disabled. Do not output any thinking process.\n";
static const char mode_adaptive[] =
    "Current thinking mode: adaptive. You are encouraged to think for complex "
    "decision-making, multi-step reasoning, or when analyzing function/tool "
    "results.\n";

static const char tools_preamble[] =
    "\n\n# Tools\nYou may call one or more tools to assist with the user "
    "query.\nHere are the tools available in JSONSchema format:\n\n<tools>\n";

static const char tools_howto[] =
    "</tools>\n\n"
    "To call tools, wrap all invocations in a single " NS "<tool_call>" NS "</tool_call> block. Parameter "
    "values containing nested objects or arrays are recursively expanded into XML elements. Example:\n"
    "\n" NS "<tool_call>\n" NS "<invoke name=\"tool-name-1\">" NS "<param-1>value-1" NS "</param-1>" NS
    "<param-2>" NS "<item>" NS "<key-a>val-a" NS "</key-a>" NS "<key-b>val-b" NS "</key-b>" NS "</item>" NS
    "</param-2>" NS "</invoke>\n" NS "<invoke name=\"tool-name-2\">" NS "<param-1>value-1" NS "</param-1>" NS
    "</invoke>\n" NS "</tool_call>";

/* A media part written into the output: where its marker starts, so that a split of assistant content can
 * tell which markers survive, and the request's media index K. */
struct media_ref {
    size_t off;
    uint32_t k;
};

struct render {
    const struct mmgw_plugin_instance *inst;
    const struct mmgw_host_api *host;
    struct mmgw_error *err;
    struct m3_buf out;
    struct media_ref *media;
    size_t n_media, cap_media;
    char path[160]; /* the message being rendered, for error messages ("messages[3]") */
};

static int32_t fail(struct render *r, int32_t code, const char *what)
{
    return r->host->set_error(r->err, code, "%s: %s", r->path, what);
}

static int32_t oom(struct render *r)
{
    return r->host->set_error(r->err, MMGW_E_NOMEM, "rendering the chat template: out of memory");
}

static int32_t add_media(struct render *r, size_t off, uint32_t k)
{
    if (r->n_media == r->cap_media) {
        size_t cap = r->cap_media ? r->cap_media * 2 : 8;
        struct media_ref *m = r->host->alloc(cap * sizeof(*m));
        if (!m) return oom(r);
        if (r->n_media) memcpy(m, r->media, r->n_media * sizeof(*m));
        r->host->free(r->media);
        r->media = m;
        r->cap_media = cap;
    }
    r->media[r->n_media].off = off;
    r->media[r->n_media].k = k;
    r->n_media++;
    return MMGW_OK;
}

static int str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && json_string_length(v) == strlen(s) &&
           memcmp(json_string_value(v), s, strlen(s)) == 0;
}

static const char *role_of(const json_t *msg)
{
    return json_string_value(json_object_get(msg, "role"));
}

static int role_is(const json_t *msg, const char *role)
{
    const char *r = role_of(msg);
    return r && strcmp(r, role) == 0;
}

/* A media part: write the plugin's marker and record K. */
static int32_t put_media(struct render *r, const json_t *part, int32_t kind, size_t idx)
{
    json_t *k = json_object_get(part, "mmgw_media");
    if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > (json_int_t)UINT32_MAX) {
        char what[96];
        snprintf(what, sizeof(what), "content[%zu]: media part without a valid mmgw_media index", idx);
        return fail(r, MMGW_E_INVALID, what);
    }
    const char *marker = m3_media_marker(r->inst, kind);
    if (!marker)
        return r->host->set_error(r->err, MMGW_E_ERROR, "m3: no media marker for kind %d", (int)kind);
    int32_t rc = add_media(r, r->out.len, (uint32_t)json_integer_value(k));
    if (rc != MMGW_OK) return rc;
    m3_buf_puts(&r->out, marker);
    return MMGW_OK;
}

/* Jinja `{{ v }}` of a part's scalar field. */
static int32_t put_scalar(struct render *r, const json_t *v, size_t idx, const char *field)
{
    if (!v) return MMGW_OK; /* undefined prints nothing */
    if (m3_put_py_str(&r->out, v) == MMGW_OK) return MMGW_OK;
    char what[96];
    snprintf(what, sizeof(what), "content[%zu].%s must be a string", idx, field);
    return fail(r, MMGW_E_INVALID, what);
}

/* The template's visible_text(content): strings as they are; in a part list text parts give their text,
 * image/video parts their markers, bare strings themselves, and other parts nothing. */
static int32_t put_visible_text(struct render *r, const json_t *content)
{
    if (!content || json_is_null(content)) return MMGW_OK;
    if (json_is_string(content)) {
        m3_buf_put(&r->out, json_string_value(content), json_string_length(content));
        return MMGW_OK;
    }
    if (!json_is_array(content))
        return fail(r, MMGW_E_INVALID, "content must be a string, an array of parts or null");
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *part = json_array_get(content, i);
        int32_t rc = MMGW_OK;
        if (json_is_string(part)) {
            m3_buf_put(&r->out, json_string_value(part), json_string_length(part));
        } else if (!json_is_object(part)) {
            char what[80];
            snprintf(what, sizeof(what), "content[%zu] must be an object or a string", i);
            return fail(r, MMGW_E_INVALID, what);
        } else {
            json_t *type = json_object_get(part, "type");
            if (str_eq(type, "text"))
                rc = put_scalar(r, json_object_get(part, "text"), i, "text");
            else if (str_eq(type, "image"))
                rc = put_media(r, part, MMGW_MEDIA_IMAGE, i);
            else if (str_eq(type, "video"))
                rc = put_media(r, part, MMGW_MEDIA_VIDEO, i);
        }
        if (rc != MMGW_OK) return rc;
    }
    return MMGW_OK;
}

/* The template's to_xml(val): objects and arrays as nested NS-prefixed tags, null members skipped. */
static int32_t put_xml_value(struct render *r, const json_t *v, int depth)
{
    if (depth <= 0) return fail(r, MMGW_E_INVALID, "tool call arguments nest too deeply");
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        size_t key_len;
        json_t *val;
        json_object_keylen_foreach((json_t *)v, key, key_len, val)
        {
            if (json_is_null(val)) continue;
            m3_buf_puts(&r->out, NS "<");
            m3_buf_put(&r->out, key, key_len);
            m3_buf_putc(&r->out, '>');
            int32_t rc = put_xml_value(r, val, depth - 1);
            if (rc != MMGW_OK) return rc;
            m3_buf_puts(&r->out, NS "</");
            m3_buf_put(&r->out, key, key_len);
            m3_buf_putc(&r->out, '>');
        }
        return MMGW_OK;
    }
    case JSON_ARRAY:
        for (size_t i = 0; i < json_array_size(v); i++) {
            m3_buf_puts(&r->out, NS "<item>");
            int32_t rc = put_xml_value(r, json_array_get(v, i), depth - 1);
            if (rc != MMGW_OK) return rc;
            m3_buf_puts(&r->out, NS "</item>");
        }
        return MMGW_OK;
    case JSON_NULL:
        return MMGW_OK;
    case JSON_TRUE:
        m3_buf_puts(&r->out, "true"); /* `val | tojson` */
        return MMGW_OK;
    case JSON_FALSE:
        m3_buf_puts(&r->out, "false");
        return MMGW_OK;
    default:
        return m3_put_py_str(&r->out, v) == MMGW_OK ? MMGW_OK : fail(r, MMGW_E_ERROR, "unexpected value");
    }
}

/* One entry of an assistant's tool_calls. Sets *name to the function name (for the tool turns after). */
static int32_t put_tool_call(struct render *r, const json_t *call, size_t idx, const json_t **name_out)
{
    char what[256];
    if (!json_is_object(call)) {
        snprintf(what, sizeof(what), "tool_calls[%zu] must be an object", idx);
        return fail(r, MMGW_E_INVALID, what);
    }
    const json_t *fn = json_object_get(call, "function");
    if (m3_json_truthy(fn)) {
        if (!json_is_object(fn)) {
            snprintf(what, sizeof(what), "tool_calls[%zu].function must be an object", idx);
            return fail(r, MMGW_E_INVALID, what);
        }
    } else {
        fn = call; /* the template accepts {name, arguments} at the top level too */
    }
    const json_t *name = json_object_get(fn, "name");
    if (!json_is_string(name)) {
        snprintf(what, sizeof(what), "tool_calls[%zu].function.name must be a string", idx);
        return fail(r, MMGW_E_INVALID, what);
    }
    json_t *args = json_object_get(fn, "arguments"), *decoded = NULL;
    if (json_is_string(args)) {
        /* OpenAI sends arguments as JSON text; vLLM decodes it before templating. */
        json_error_t jerr;
        decoded = json_loadb(json_string_value(args), json_string_length(args),
                             JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!decoded) {
            char why[64];
            snprintf(what, sizeof(what), "tool_calls[%zu].function.arguments is not valid JSON: %s", idx,
                     m3_printable(why, sizeof(why), jerr.text, strlen(jerr.text)));
            return fail(r, MMGW_E_INVALID, what);
        }
        args = decoded;
    }
    if (!json_is_object(args)) {
        json_decref(decoded);
        snprintf(what, sizeof(what), "tool_calls[%zu].function.arguments must be a JSON object", idx);
        return fail(r, MMGW_E_INVALID, what);
    }
    m3_buf_puts(&r->out, NS "<invoke name=\"");
    m3_buf_put(&r->out, json_string_value(name), json_string_length(name));
    m3_buf_puts(&r->out, "\">");
    int32_t rc = put_xml_value(r, args, MAX_DEPTH); /* top level: NS<k>v NS</k>, nulls skipped */
    json_decref(decoded);
    if (rc != MMGW_OK) return rc;
    m3_buf_puts(&r->out, NS "</invoke>\n");
    *name_out = name;
    return MMGW_OK;
}

static int is_newline_strip(char c)
{
    return c == '\n';
}

/* Python's s.strip('\n') on [*a, *b). */
static void strip_newlines(const char *s, size_t *a, size_t *b)
{
    while (*a < *b && is_newline_strip(s[*a])) (*a)++;
    while (*b > *a && is_newline_strip(s[*b - 1])) (*b)--;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0 || n < m) return NULL;
    return memmem(hay, n, needle, m);
}

static const char *find_last(const char *hay, size_t n, const char *needle, size_t m)
{
    const char *last = NULL, *p = hay;
    while ((p = find_bytes(p, n - (size_t)(p - hay), needle, m)) != NULL) {
        last = p;
        p++;
    }
    return last;
}

/* Keep only the media of this turn (index >= first) whose marker lies in one of the kept ranges. */
static void filter_media(struct render *r, size_t first, size_t base, size_t ra, size_t rb, size_t ca,
                         size_t cb)
{
    size_t w = first;
    for (size_t i = first; i < r->n_media; i++) {
        size_t off = r->media[i].off - base;
        if ((off >= ra && off < rb) || (off >= ca && off < cb)) r->media[w++] = r->media[i];
    }
    r->n_media = w;
}

/* Step 5: an assistant turn. */
static int32_t put_assistant(struct render *r, const json_t *msg, int *has_tool_call)
{
    m3_buf_puts(&r->out, "]~b]ai\n");
    size_t start = r->out.len, first_media = r->n_media;
    int32_t rc = put_visible_text(r, json_object_get(msg, "content"));
    if (rc != MMGW_OK) return rc;
    if (r->out.oom) return oom(r);

    /* Take the visible text out of the buffer, then write thinking part + content in its place. */
    size_t n = r->out.len - start;
    char *text = r->host->alloc(n + 1);
    if (!text) return oom(r);
    memcpy(text, r->out.p + start, n);
    m3_buf_truncate(&r->out, start);

    const json_t *rc_json = json_object_get(msg, "reasoning_content");
    const char *reasoning = "";
    size_t ra = 0, rb = 0, ca = 0, cb = n;
    const char *end = NULL;
    if (json_is_string(rc_json)) {
        reasoning = json_string_value(rc_json);
        rb = json_string_length(rc_json);
    } else if ((end = find_bytes(text, n, THINK_END, strlen(THINK_END))) != NULL) {
        /* reasoning = content.split(END)[0].strip('\n').split(BEGIN)[-1].strip('\n')
         * content   = content.split(END)[-1].strip('\n') */
        ra = 0;
        rb = (size_t)(end - text);
        strip_newlines(text, &ra, &rb);
        const char *begin = find_last(text + ra, rb - ra, THINK_BEGIN, strlen(THINK_BEGIN));
        if (begin) ra = (size_t)(begin - text) + strlen(THINK_BEGIN);
        strip_newlines(text, &ra, &rb);
        const char *last_end = find_last(text, n, THINK_END, strlen(THINK_END));
        ca = (size_t)(last_end - text) + strlen(THINK_END);
        cb = n;
        strip_newlines(text, &ca, &cb);
        reasoning = text + ra;
        filter_media(r, first_media, start, ra, rb, ca, cb);
    }
    size_t reasoning_len = rb - ra;
    if (reasoning_len > 0) {
        m3_buf_puts(&r->out, THINK_BEGIN);
        m3_buf_put(&r->out, reasoning, reasoning_len);
        m3_buf_puts(&r->out, THINK_END);
    } else {
        m3_buf_puts(&r->out, THINK_END);
    }
    m3_buf_put(&r->out, text + ca, cb - ca);
    r->host->free(text);

    const json_t *calls = json_object_get(msg, "tool_calls");
    *has_tool_call = 0;
    if (m3_json_truthy(calls)) {
        if (!json_is_array(calls)) return fail(r, MMGW_E_INVALID, "tool_calls must be an array");
        m3_buf_puts(&r->out, NS "<tool_call>\n");
        for (size_t i = 0; i < json_array_size(calls); i++) {
            const json_t *name = NULL;
            rc = put_tool_call(r, json_array_get(calls, i), i, &name);
            if (rc != MMGW_OK) return rc;
        }
        m3_buf_puts(&r->out, NS "</tool_call>");
        *has_tool_call = 1;
    }
    m3_buf_puts(&r->out, "[e~[\n");
    return MMGW_OK;
}

/* Step 7: one tool message inside a run of them. */
static int32_t put_tool_response(struct render *r, const json_t *msg)
{
    const json_t *content = json_object_get(msg, "content");
    m3_buf_puts(&r->out, "\n<response>");
    if (json_is_string(content)) {
        m3_buf_put(&r->out, json_string_value(content), json_string_length(content));
    } else if (json_is_array(content)) {
        for (size_t i = 0; i < json_array_size(content); i++) {
            const json_t *part = json_array_get(content, i);
            int32_t rc = MMGW_OK;
            if (json_is_string(part)) {
                m3_buf_put(&r->out, json_string_value(part), json_string_length(part));
                continue;
            }
            char what[96];
            if (!json_is_object(part)) {
                snprintf(what, sizeof(what), "content[%zu] must be an object or a string", i);
                return fail(r, MMGW_E_INVALID, what);
            }
            const json_t *type = json_object_get(part, "type"), *output = json_object_get(part, "output");
            if (str_eq(type, "image"))
                rc = put_media(r, part, MMGW_MEDIA_IMAGE, i);
            else if (str_eq(type, "video"))
                rc = put_media(r, part, MMGW_MEDIA_VIDEO, i);
            else if (output)
                rc = put_scalar(r, output, i, "output");
            else if (str_eq(type, "text") && json_object_get(part, "text"))
                rc = put_scalar(r, json_object_get(part, "text"), i, "text");
            else {
                /* The template would print the part's Python repr here; nobody wants that in a prompt. */
                snprintf(what, sizeof(what), "content[%zu]: a tool result part needs output or text", i);
                return fail(r, MMGW_E_INVALID, what);
            }
            if (rc != MMGW_OK) return rc;
        }
    } else {
        return fail(r, MMGW_E_INVALID, "a tool message's content must be a string or an array of parts");
    }
    m3_buf_puts(&r->out, "</response>");
    return MMGW_OK;
}

static int32_t check_messages(struct render *r, const json_t *messages)
{
    static const char *const roles[] = {"root", "system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        snprintf(r->path, sizeof(r->path), "messages[%zu]", i);
        if (!json_is_object(m)) return fail(r, MMGW_E_INVALID, "a message must be an object");
        const char *role = role_of(m);
        if (!role) return fail(r, MMGW_E_INVALID, "role must be a string");
        int known = 0;
        for (size_t j = 0; j < sizeof(roles) / sizeof(roles[0]); j++) known |= strcmp(role, roles[j]) == 0;
        if (!known) {
            char what[120];
            char shown[41];
            snprintf(what, sizeof(what), "unknown role '%s'",
                     m3_printable(shown, sizeof(shown), role, strlen(role)));
            return fail(r, MMGW_E_INVALID, what);
        }
    }
    return MMGW_OK;
}

static int32_t render(struct render *r, const json_t *req)
{
    snprintf(r->path, sizeof(r->path), "request");
    if (!json_is_object(req)) return fail(r, MMGW_E_INVALID, "the body must be a JSON object");
    const json_t *messages = json_object_get(req, "messages");
    snprintf(r->path, sizeof(r->path), "messages");
    if (!json_is_array(messages)) return fail(r, MMGW_E_INVALID, "must be an array");
    int32_t rc = check_messages(r, messages);
    if (rc != MMGW_OK) return rc;

    const json_t *kwargs = json_object_get(req, "chat_template_kwargs");
    snprintf(r->path, sizeof(r->path), "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs))
        return fail(r, MMGW_E_INVALID, "must be an object");
    const json_t *mode = json_object_get(kwargs, "thinking_mode"); /* NULL = undefined */
    const json_t *identity = json_object_get(kwargs, "model_identity");
    const json_t *tools = json_object_get(req, "tools");
    snprintf(r->path, sizeof(r->path), "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return fail(r, MMGW_E_INVALID, "must be an array");
    const json_t *agp = json_object_get(req, "add_generation_prompt");
    int add_generation_prompt = agp ? m3_json_truthy(agp) : 1;

    /* Step 1: split roles. */
    size_t n = json_array_size(messages), first = 0;
    const json_t *sys = NULL, *dev = NULL;
    if (n > 0 && role_is(json_array_get(messages, 0), "root")) {
        sys = json_array_get(messages, 0);
        first = 1;
        if (n > 1 && (role_is(json_array_get(messages, 1), "system") ||
                      role_is(json_array_get(messages, 1), "developer"))) {
            dev = json_array_get(messages, 1);
            first = 2;
        }
    } else if (n > 0 && (role_is(json_array_get(messages, 0), "system") ||
                         role_is(json_array_get(messages, 0), "developer"))) {
        dev = json_array_get(messages, 0);
        first = 1;
    }

    /* Step 2: the system block. */
    m3_buf_puts(&r->out, "]~!b[]~b]system\n");
    if (sys && m3_json_truthy(json_object_get(sys, "content"))) {
        snprintf(r->path, sizeof(r->path), "messages[0]");
        rc = put_visible_text(r, json_object_get(sys, "content"));
        if (rc != MMGW_OK) return rc;
    } else {
        m3_buf_puts(&r->out, identity_default);
    }
    m3_buf_puts(&r->out, thinking_intro);
    if (!mode || str_eq(mode, "adaptive"))
        m3_buf_puts(&r->out, mode_adaptive);
    else if (str_eq(mode, "enabled"))
        m3_buf_puts(&r->out, mode_enabled);
    else if (str_eq(mode, "disabled"))
        m3_buf_puts(&r->out, mode_disabled);
    m3_buf_puts(&r->out, "</thinking_instructions>[e~[\n");

    /* Step 3: the developer block. */
    m3_buf_puts(&r->out, "]~b]developer\n");
    if (dev && m3_json_truthy(json_object_get(dev, "content"))) {
        snprintf(r->path, sizeof(r->path), "messages[%zu]", first - 1);
        rc = put_visible_text(r, json_object_get(dev, "content"));
        if (rc != MMGW_OK) return rc;
    } else if (identity) {
        snprintf(r->path, sizeof(r->path), "chat_template_kwargs.model_identity");
        if (m3_put_py_str(&r->out, identity) != MMGW_OK) return fail(r, MMGW_E_INVALID, "must be a string");
    } else {
        m3_buf_puts(&r->out, "You are a helpful assistant.");
    }
    if (m3_json_truthy(tools)) {
        m3_buf_puts(&r->out, tools_preamble);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            const json_t *fn = json_object_get(json_array_get(tools, i), "function");
            snprintf(r->path, sizeof(r->path), "tools[%zu]", i);
            if (!fn) return fail(r, MMGW_E_INVALID, "a tool must be an object with a function");
            m3_buf_puts(&r->out, "<tool>");
            if (m3_dump_py_json(&r->out, fn, MAX_DEPTH) != MMGW_OK)
                return fail(r, MMGW_E_INVALID, "nests too deeply");
            m3_buf_puts(&r->out, "</tool>\n");
        }
        m3_buf_puts(&r->out, tools_howto);
    }
    m3_buf_puts(&r->out, "[e~[\n");

    /* Steps 4, 5, 7: the conversation. Later system/developer/root messages are dropped. */
    int has_tool_call = 0;
    for (size_t i = first; i < n; i++) {
        const json_t *msg = json_array_get(messages, i);
        snprintf(r->path, sizeof(r->path), "messages[%zu]", i);
        if (role_is(msg, "assistant")) {
            rc = put_assistant(r, msg, &has_tool_call);
        } else if (role_is(msg, "user")) {
            m3_buf_puts(&r->out, "]~b]user\n");
            rc = put_visible_text(r, json_object_get(msg, "content"));
            m3_buf_puts(&r->out, "[e~[\n");
        } else if (role_is(msg, "tool")) {
            if (!has_tool_call)
                return fail(r, MMGW_E_INVALID, "a tool message with no preceding assistant tool call");
            if (i == first || !role_is(json_array_get(messages, i - 1), "tool"))
                m3_buf_puts(&r->out, "]~b]tool");
            rc = put_tool_response(r, msg);
            if (i + 1 == n || !role_is(json_array_get(messages, i + 1), "tool"))
                m3_buf_puts(&r->out, "[e~[\n");
        }
        if (rc != MMGW_OK) return rc;
    }

    /* Step 8: the generation prompt. */
    if (add_generation_prompt) {
        m3_buf_puts(&r->out, "]~b]ai\n");
        if (str_eq(mode, "disabled"))
            m3_buf_puts(&r->out, THINK_END);
        else if (str_eq(mode, "enabled"))
            m3_buf_puts(&r->out, THINK_BEGIN);
    }
    return r->out.oom ? oom(r) : MMGW_OK;
}

int32_t m3_render_chat(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                       struct mmgw_sink *out, uint32_t *media_order, uint32_t media_cap, uint32_t *n_media,
                       struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    if (n_media) *n_media = 0;
    if (!request_json || !out || !out->append || !n_media || (media_cap && !media_order))
        return host->set_error(err, MMGW_E_INVALID, "m3 render_chat: missing argument");
    json_error_t jerr;
    json_t *req = json_loadb(request_json, (size_t)json_len, JSON_ALLOW_NUL, &jerr);
    if (!req)
        return host->set_error(err, MMGW_E_INVALID, "request: invalid JSON at line %d column %d: %s",
                               jerr.line, jerr.column,
                               m3_printable(jerr.text, sizeof(jerr.text), jerr.text, strlen(jerr.text)));

    struct render r;
    memset(&r, 0, sizeof(r));
    r.inst = inst;
    r.host = host;
    r.err = err;
    m3_buf_init(&r.out, host);
    /* the system block and about the request's text: one allocation for the usual prompt */
    m3_buf_reserve(&r.out, sizeof identity_default + sizeof thinking_intro + sizeof mode_enabled + 256 +
                               (size_t)json_len);
    int32_t rc = render(&r, req);
    if (rc == MMGW_OK && r.n_media > media_cap)
        rc = host->set_error(err, MMGW_E_TOO_LARGE, "request: %zu media parts rendered, room for %u",
                             r.n_media, (unsigned)media_cap);
    if (rc == MMGW_OK) {
        for (size_t i = 0; i < r.n_media; i++) media_order[i] = r.media[i].k;
        *n_media = (uint32_t)r.n_media;
        rc = out->append(out->ctx, r.out.p ? r.out.p : "", r.out.len);
        if (rc != MMGW_OK) {
            *n_media = 0;
            rc = host->set_error(err, rc, "render_chat: the output sink refused %zu bytes", r.out.len);
        }
    }
    host->free(r.media);
    m3_buf_free(&r.out);
    json_decref(req);
    return rc;
}

static const char *const m3_stops[] = {"[e~[", NULL};

const char *const *m3_stop_tokens(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    return m3_stops;
}

const char *m3_bos_token(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    return NULL; /* the template text already starts with ]~!b[ */
}
