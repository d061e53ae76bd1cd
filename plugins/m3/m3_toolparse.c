/* Tool-call argument conversion for M3 (vLLM parameters.rs semantics): schema normalisation, leaf text
 * coercion, element trees to objects/arrays. */
#include "m3_toolparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_MAX_DEPTH 64 /* deeper schemas are treated as unknown (string fallback) */
#define ARENA_CHUNK 4096

/* ---- elements ---- */

struct m3_elem *m3_elem_new(const struct mmgw_host_api *host, const char *name, size_t len)
{
    struct m3_elem *e = host->alloc(sizeof(*e));
    if (!e) return NULL;
    memset(e, 0, sizeof(*e));
    e->name = host->alloc(len + 1);
    if (!e->name) {
        host->free(e);
        return NULL;
    }
    memcpy(e->name, name, len);
    e->name[len] = '\0';
    e->name_len = len;
    m3_buf_init(&e->text, host);
    return e;
}

void m3_elem_free(const struct mmgw_host_api *host, struct m3_elem *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n_kids; i++) m3_elem_free(host, e->kids[i]);
    host->free(e->kids);
    host->free(e->name);
    m3_buf_free(&e->text);
    host->free(e);
}

int32_t m3_elem_add_kid(const struct mmgw_host_api *host, struct m3_elem *parent, struct m3_elem *kid)
{
    if (parent->n_kids == parent->cap_kids) {
        size_t cap = parent->cap_kids ? parent->cap_kids * 2 : 4;
        struct m3_elem **k = host->alloc(cap * sizeof(*k));
        if (!k) {
            m3_elem_free(host, kid);
            return MMGW_E_NOMEM;
        }
        if (parent->n_kids) memcpy(k, parent->kids, parent->n_kids * sizeof(*k));
        host->free(parent->kids);
        parent->kids = k;
        parent->cap_kids = cap;
    }
    parent->kids[parent->n_kids++] = kid;
    return MMGW_OK;
}

static int has_kid_named(const struct m3_elem *e, const char *name, size_t len)
{
    for (size_t i = 0; i < e->n_kids; i++)
        if (e->kids[i]->name_len == len && memcmp(e->kids[i]->name, name, len) == 0) return 1;
    return 0;
}

int32_t m3_elem_finish(const struct mmgw_host_api *host, struct m3_elem *e)
{
    if (e->n_kids == 0 || e->text.oom) return e->text.oom ? MMGW_E_NOMEM : MMGW_OK;
    const char *t = e->text.p;
    size_t n = e->text.len;
    m3_trim_unicode(&t, &n);
    if (n == 0) return MMGW_OK;
    /* "$text", or "$$text"... when a real child already has that name */
    size_t dollars = 1;
    char *name = NULL;
    for (;;) {
        host->free(name);
        name = host->alloc(dollars + 5);
        if (!name) return MMGW_E_NOMEM;
        memset(name, '$', dollars);
        memcpy(name + dollars, "text", 4);
        if (!has_kid_named(e, name, dollars + 4)) break;
        dollars++;
    }
    struct m3_elem *mixed = m3_elem_new(host, name, dollars + 4);
    host->free(name);
    if (!mixed) return MMGW_E_NOMEM;
    m3_buf_put(&mixed->text, e->text.p, e->text.len);
    if (mixed->text.oom) {
        m3_elem_free(host, mixed);
        return MMGW_E_NOMEM;
    }
    return m3_elem_add_kid(host, e, mixed);
}

/* ---- schema types ---- */

enum pt_kind { PT_ANY, PT_STRING, PT_INTEGER, PT_NUMBER, PT_BOOLEAN, PT_OBJECT, PT_ARRAY, PT_NULL, PT_ONEOF };

struct pt_prop;
struct pt {
    int kind;
    const struct pt_prop *props; /* PT_OBJECT */
    size_t n_props;
    const struct pt *additional;  /* PT_OBJECT, NULL = none */
    const struct pt *items;       /* PT_ARRAY, NULL = none */
    const struct pt *const *alts; /* PT_ONEOF, in declared order */
    size_t n_alts;
};

struct pt_prop {
    const char *name;
    size_t name_len;
    const struct pt *type;
};

struct m3_tool_schema {
    const char *name;
    size_t name_len;
    const struct pt_prop *params;
    size_t n_params;
};

/* Everything of a request's schemas lives in one arena freed at once. */
struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    max_align_t data[];
};

struct m3_schemas {
    const struct mmgw_host_api *host;
    struct arena_chunk *chunks;
    struct m3_tool_schema *tools;
    size_t n_tools;
    int oom;
};

static void *arena_alloc(struct m3_schemas *s, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct arena_chunk *c = s->chunks;
    if (!c || c->size - c->used < n) {
        size_t size = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        c = s->host->alloc(sizeof(*c) + size);
        if (!c) {
            s->oom = 1;
            return NULL;
        }
        c->next = s->chunks;
        c->used = 0;
        c->size = size;
        s->chunks = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

static struct pt *new_pt(struct m3_schemas *s, int kind)
{
    struct pt *t = arena_alloc(s, sizeof(*t));
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    return t;
}

static const struct pt *from_schema(struct m3_schemas *s, const json_t *schema, int depth);

static const struct pt *one_of(struct m3_schemas *s, const struct pt **types, size_t n)
{
    if (n == 1) return types[0];
    struct pt *t = new_pt(s, PT_ONEOF);
    const struct pt **alts = arena_alloc(s, n * sizeof(*alts));
    if (!t || !alts) return NULL;
    memcpy(alts, types, n * sizeof(*alts));
    t->alts = (const struct pt *const *)alts;
    t->n_alts = n;
    return t;
}

/* The `properties` map of an object schema, entries whose schema normalises to a type. */
static const struct pt_prop *props_of(struct m3_schemas *s, const json_t *props, size_t *n_out, int depth)
{
    *n_out = 0;
    if (!json_is_object(props) || json_object_size(props) == 0) return NULL;
    struct pt_prop *out = arena_alloc(s, json_object_size(props) * sizeof(*out));
    if (!out) return NULL;
    const char *key;
    size_t key_len, n = 0;
    json_t *val;
    json_object_keylen_foreach((json_t *)props, key, key_len, val)
    {
        const struct pt *t = from_schema(s, val, depth - 1);
        if (!t) continue;
        out[n].name = key; /* keys live as long as the request JSON the parser holds */
        out[n].name_len = key_len;
        out[n].type = t;
        n++;
    }
    *n_out = n;
    return out;
}

static const struct pt *object_from_schema(struct m3_schemas *s, const json_t *schema, int depth)
{
    struct pt *t = new_pt(s, PT_OBJECT);
    if (!t) return NULL;
    t->props = props_of(s, json_object_get(schema, "properties"), &t->n_props, depth);
    const json_t *add = json_object_get(schema, "additionalProperties");
    if (json_is_object(add)) t->additional = from_schema(s, add, depth - 1);
    return t;
}

static const struct pt *array_from_schema(struct m3_schemas *s, const json_t *schema, int depth)
{
    struct pt *t = new_pt(s, PT_ARRAY);
    if (!t) return NULL;
    t->items = from_schema(s, json_object_get(schema, "items"), depth - 1);
    return t;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* One `type` name, trimmed and lower-cased, with the aliases upstream schemas use. NULL = unknown. */
static const struct pt *from_type_name(struct m3_schemas *s, const json_t *name, const json_t *schema,
                                       int depth)
{
    const char *p = json_string_value(name);
    size_t n = json_string_length(name);
    m3_trim_unicode(&p, &n);
    char k[32];
    if (n >= sizeof(k) || memchr(p, '\0', n)) return NULL;
    for (size_t i = 0; i < n; i++) k[i] = (p[i] >= 'A' && p[i] <= 'Z') ? (char)(p[i] - 'A' + 'a') : p[i];
    k[n] = '\0';
    static const char *const strings[] = {"string", "str", "text", "varchar", "char", "enum"};
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
        if (strcmp(k, strings[i]) == 0) return new_pt(s, PT_STRING);
    if (!strcmp(k, "integer") || !strcmp(k, "int")) return new_pt(s, PT_INTEGER);
    if (!strcmp(k, "number") || !strcmp(k, "float") || !strcmp(k, "double")) return new_pt(s, PT_NUMBER);
    if (!strcmp(k, "boolean") || !strcmp(k, "bool") || !strcmp(k, "binary")) return new_pt(s, PT_BOOLEAN);
    if (!strcmp(k, "object") || !strcmp(k, "dict") || !strcmp(k, "map"))
        return object_from_schema(s, schema, depth);
    if (!strcmp(k, "array") || !strcmp(k, "arr") || !strcmp(k, "list") || !strcmp(k, "sequence"))
        return array_from_schema(s, schema, depth);
    if (!strcmp(k, "null")) return new_pt(s, PT_NULL);
    if (starts_with(k, "int") || starts_with(k, "uint") || starts_with(k, "long") ||
        starts_with(k, "short") || starts_with(k, "unsigned"))
        return new_pt(s, PT_INTEGER);
    if (starts_with(k, "num") || starts_with(k, "float")) return new_pt(s, PT_NUMBER);
    if (starts_with(k, "dict")) return object_from_schema(s, schema, depth);
    if (starts_with(k, "list")) return array_from_schema(s, schema, depth);
    return NULL;
}

/* JsonParamType::from_schema. NULL means "no usable type" (the argument is then untyped). */
static const struct pt *from_schema(struct m3_schemas *s, const json_t *schema, int depth)
{
    if (!json_is_object(schema) || depth <= 0 || s->oom) return NULL;
    const json_t *type = json_object_get(schema, "type");
    if (type) {
        if (json_is_string(type)) return from_type_name(s, type, schema, depth);
        if (!json_is_array(type)) return NULL;
        const struct pt **types = arena_alloc(s, (json_array_size(type) + 1) * sizeof(*types));
        if (!types) return NULL;
        size_t n = 0;
        for (size_t i = 0; i < json_array_size(type); i++) {
            const json_t *name = json_array_get(type, i);
            const struct pt *t = json_is_string(name) ? from_type_name(s, name, schema, depth) : NULL;
            if (t) types[n++] = t;
        }
        return n ? one_of(s, types, n) : NULL;
    }
    const json_t *composite = json_object_get(schema, "anyOf");
    if (!composite) composite = json_object_get(schema, "oneOf");
    if (composite) {
        size_t n = 0;
        if (json_is_array(composite)) {
            const struct pt **types = arena_alloc(s, (json_array_size(composite) + 1) * sizeof(*types));
            if (!types) return NULL;
            for (size_t i = 0; i < json_array_size(composite); i++) {
                const struct pt *t = from_schema(s, json_array_get(composite, i), depth - 1);
                if (t) types[n++] = t;
            }
            if (n) return one_of(s, types, n);
        }
        return object_from_schema(s, schema, depth);
    }
    const json_t *values = json_object_get(schema, "enum");
    if (json_is_array(values)) {
        for (size_t i = 0; i < json_array_size(values); i++) {
            if (json_is_null(json_array_get(values, i))) {
                const struct pt *types[2] = {new_pt(s, PT_STRING), new_pt(s, PT_NULL)};
                return (types[0] && types[1]) ? one_of(s, types, 2) : NULL;
            }
        }
        return new_pt(s, PT_STRING);
    }
    if (json_object_get(schema, "items")) return array_from_schema(s, schema, depth);
    if (json_object_get(schema, "properties") || json_object_get(schema, "additionalProperties"))
        return object_from_schema(s, schema, depth);
    return new_pt(s, PT_ANY);
}

int32_t m3_schemas_build(const struct mmgw_host_api *host, const json_t *tools, struct m3_schemas **out)
{
    *out = NULL;
    struct m3_schemas *s = host->alloc(sizeof(*s));
    if (!s) return MMGW_E_NOMEM;
    memset(s, 0, sizeof(*s));
    s->host = host;
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    if (n) {
        s->tools = arena_alloc(s, n * sizeof(*s->tools));
        for (size_t i = 0; i < n && s->tools; i++) {
            const json_t *fn = json_object_get(json_array_get(tools, i), "function");
            const json_t *name = json_object_get(fn, "name");
            if (!json_is_string(name)) continue;
            struct m3_tool_schema *t = &s->tools[s->n_tools++];
            t->name = json_string_value(name);
            t->name_len = json_string_length(name);
            const json_t *params = json_object_get(fn, "parameters");
            t->params = props_of(s, json_object_get(params, "properties"), &t->n_params, SCHEMA_MAX_DEPTH);
        }
    }
    if (s->oom) {
        m3_schemas_free(s);
        return MMGW_E_NOMEM;
    }
    *out = s;
    return MMGW_OK;
}

void m3_schemas_free(struct m3_schemas *s)
{
    if (!s) return;
    while (s->chunks) {
        struct arena_chunk *c = s->chunks;
        s->chunks = c->next;
        s->host->free(c);
    }
    s->host->free(s);
}

const struct m3_tool_schema *m3_schemas_find(const struct m3_schemas *s, const char *name, size_t len)
{
    if (!s) return NULL;
    for (size_t i = s->n_tools; i-- > 0;) /* the last tool of a name wins, as in a map built in order */
        if (s->tools[i].name_len == len && memcmp(s->tools[i].name, name, len) == 0) return &s->tools[i];
    return NULL;
}

static const struct pt *find_prop(const struct pt_prop *props, size_t n, const char *name, size_t len)
{
    for (size_t i = n; i-- > 0;)
        if (props[i].name_len == len && memcmp(props[i].name, name, len) == 0) return props[i].type;
    return NULL;
}

/* ---- leaf text coercion ---- */

static int ieq(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (n != m) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Rust `str::parse::<i64>`: optional sign, digits only, no overflow. */
static int parse_i64(const char *s, size_t n, json_int_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i == n) return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (!is_digit(s[i])) return 0;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = neg ? (json_int_t)(0 - v) : (json_int_t)v;
    return 1;
}

static double str_to_double(const char *s, size_t n)
{
    char tmp[512];
    if (n >= sizeof(tmp)) return NAN; /* no float literal worth keeping is that long */
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    return strtod(tmp, NULL);
}

/* serde_json::from_str::<Number>: a JSON number between JSON whitespace. Integers stay integers (i64; an
 * out-of-range or `-0` one becomes a float, as serde does); others are floats and must be finite. */
static int json_number(const char *s, size_t n, json_t **out)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    size_t i = 0;
    int neg = 0, is_int = 1;
    if (i < n && s[i] == '-') neg = 1, i++;
    if (i == n || !is_digit(s[i])) return 0;
    if (s[i] == '0')
        i++;
    else
        while (i < n && is_digit(s[i])) i++;
    if (i < n && s[i] == '.') {
        is_int = 0;
        i++;
        if (i == n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_int = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i == n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i != n) return 0;
    json_int_t v;
    if (is_int && parse_i64(s, n, &v) && !(neg && v == 0)) {
        *out = json_integer(v);
        return 1;
    }
    double d = str_to_double(s, n);
    if (!isfinite(d)) return 0;
    *out = json_real(d);
    return 1;
}

/* Rust `str::parse::<f64>` grammar: sign? (inf | infinity | nan | digits[.digits] | .digits) exponent?. */
static int rust_f64(const char *s, size_t n, double *out)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (ieq(s + i, n - i, "inf") || ieq(s + i, n - i, "infinity") || ieq(s + i, n - i, "nan")) return 0;
    size_t int_digits = 0, frac_digits = 0;
    while (i < n && is_digit(s[i])) i++, int_digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && is_digit(s[i])) i++, frac_digits++;
    }
    if (int_digits + frac_digits == 0) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i == n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i != n) return 0;
    double d = str_to_double(s, n);
    if (!isfinite(d)) return 0; /* Number::from_f64 refuses non-finite values */
    *out = d;
    return 1;
}

static int try_number(const char *s, size_t n, json_t **out)
{
    json_int_t v;
    double d;
    if (json_number(s, n, out)) return 1;
    if (parse_i64(s, n, &v)) {
        *out = json_integer(v);
        return 1;
    }
    if (rust_f64(s, n, &d)) {
        *out = json_real(d);
        return 1;
    }
    return 0;
}

static int try_boolean(const char *s, size_t n, json_t **out)
{
    m3_trim_unicode(&s, &n);
    if (ieq(s, n, "true") || (n == 1 && s[0] == '1')) {
        *out = json_true();
        return 1;
    }
    if (ieq(s, n, "false") || (n == 1 && s[0] == '0')) {
        *out = json_false();
        return 1;
    }
    return 0;
}

static int try_json(const char *s, size_t n, json_t **out)
{
    json_error_t jerr;
    *out = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    return *out != NULL;
}

/* Results: 1 converted (*out set, NULL only when out of memory), 0 not convertible. */
static int try_text(const struct pt *t, const char *s, size_t n, json_t **out)
{
    json_int_t v;
    switch (t->kind) {
    case PT_ANY:
        if (parse_i64(s, n, &v)) {
            *out = json_integer(v);
            return 1;
        }
        return try_number(s, n, out) || try_boolean(s, n, out) || try_json(s, n, out);
    case PT_STRING:
        *out = json_stringn_nocheck(s, n);
        return 1;
    case PT_INTEGER:
        if (!parse_i64(s, n, &v)) return 0;
        *out = json_integer(v);
        return 1;
    case PT_NUMBER:
        return try_number(s, n, out);
    case PT_BOOLEAN:
        return try_boolean(s, n, out);
    case PT_OBJECT:
        if (n == 0) {
            *out = json_object();
            return 1;
        }
        return try_json(s, n, out);
    case PT_ARRAY:
        if (n == 0) {
            *out = json_array();
            return 1;
        }
        return try_json(s, n, out);
    case PT_NULL:
        if (!ieq(s, n, "null")) return 0;
        *out = json_null();
        return 1;
    case PT_ONEOF:
        for (size_t i = 0; i < t->n_alts; i++)
            if (try_text(t->alts[i], s, n, out)) return 1;
        return 0;
    }
    return 0;
}

static int32_t convert(const struct pt *t, const struct m3_elem *e, json_t **out);

/* Insert, turning a repeated key into a list of its values. */
static int32_t insert_value(json_t *obj, const char *key, size_t len, json_t *v)
{
    json_t *old = json_object_getn(obj, key, len);
    if (!old) return json_object_setn_new_nocheck(obj, key, len, v) == 0 ? MMGW_OK : MMGW_E_NOMEM;
    if (json_is_array(old)) return json_array_append_new(old, v) == 0 ? MMGW_OK : MMGW_E_NOMEM;
    json_t *list = json_array();
    if (!list || json_array_append(list, old) != 0 || json_array_append_new(list, v) != 0) {
        json_decref(list);
        return MMGW_E_NOMEM;
    }
    return json_object_setn_new_nocheck(obj, key, len, list) == 0 ? MMGW_OK : MMGW_E_NOMEM;
}

static int32_t elements_to_object(const struct m3_elem *e, const struct pt_prop *props, size_t n_props,
                                  const struct pt *additional, json_t **out)
{
    json_t *obj = json_object();
    if (!obj) return MMGW_E_NOMEM;
    for (size_t i = 0; i < e->n_kids; i++) {
        const struct m3_elem *kid = e->kids[i];
        const struct pt *t = find_prop(props, n_props, kid->name, kid->name_len);
        json_t *v = NULL;
        int32_t rc = convert(t ? t : additional, kid, &v);
        if (rc == MMGW_OK) rc = insert_value(obj, kid->name, kid->name_len, v);
        if (rc != MMGW_OK) {
            json_decref(obj);
            return rc;
        }
    }
    *out = obj;
    return MMGW_OK;
}

/* Structured input under a type: 1 converted (rc in *rc), 0 not convertible. */
static int try_elements(const struct pt *t, const struct m3_elem *e, json_t **out, int32_t *rc)
{
    switch (t->kind) {
    case PT_ANY:
        *rc = elements_to_object(e, NULL, 0, NULL, out);
        return 1;
    case PT_OBJECT:
        *rc = elements_to_object(e, t->props, t->n_props, t->additional, out);
        return 1;
    case PT_ARRAY: {
        /* every child is an item, whatever its name */
        json_t *arr = json_array();
        *rc = arr ? MMGW_OK : MMGW_E_NOMEM;
        for (size_t i = 0; i < e->n_kids && *rc == MMGW_OK; i++) {
            json_t *v = NULL;
            *rc = convert(t->items, e->kids[i], &v);
            if (*rc == MMGW_OK && json_array_append_new(arr, v) != 0) *rc = MMGW_E_NOMEM;
        }
        if (*rc != MMGW_OK) {
            json_decref(arr);
            arr = NULL;
        }
        *out = arr;
        return 1;
    }
    case PT_ONEOF:
        for (size_t i = 0; i < t->n_alts; i++)
            if (try_elements(t->alts[i], e, out, rc)) return 1;
        return 0;
    default:
        return 0; /* a primitive cannot come from structured input */
    }
}

/* convert_with_optional_schema: t may be NULL (unknown argument). */
static int32_t convert(const struct pt *t, const struct m3_elem *e, json_t **out)
{
    *out = NULL;
    if (e->n_kids == 0) {
        const char *s = e->text.p ? e->text.p : "";
        size_t n = e->text.len;
        /* literal null means null, except for a plain string field */
        if (ieq(s, n, "null") && !(t && t->kind == PT_STRING))
            *out = json_null();
        else if (!(t && try_text(t, s, n, out)))
            *out = json_stringn_nocheck(s, n);
        return *out ? MMGW_OK : MMGW_E_NOMEM;
    }
    int32_t rc = MMGW_OK;
    if (t && try_elements(t, e, out, &rc)) return rc;
    return elements_to_object(e, NULL, 0, NULL, out);
}

int32_t m3_convert_argument(const struct m3_tool_schema *tool, const struct m3_elem *arg, json_t **out)
{
    const struct pt *t = tool ? find_prop(tool->params, tool->n_params, arg->name, arg->name_len) : NULL;
    return convert(t, arg, out);
}
