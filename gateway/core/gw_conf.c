/* The config file parser: lexer, directive dispatch through the tables, include, defaults, checks.
 * Setters live in gw_conf_setters.c, the tables in gw_conf_directives.c. */
#include "gw_conf.h"

#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/stat.h>

#define CONF_MAX_FILE_BYTES (16u << 20)
#define CONF_MAX_INCLUDE_DEPTH 16
#define CONF_MAX_ARGS 64
#define CONF_MAX_TOKEN 65536

enum tok_kind { TOK_EOF, TOK_WORD, TOK_SEMI, TOK_LBRACE, TOK_RBRACE };

struct conf_file {
    const char *name; /* as shown in messages */
    const char *dir;  /* for relative paths */
    const char *p, *end;
    int32_t line;
};

struct conf_seen {
    const void *conf;
    const struct gw_directive *d;
};

struct gw_conf_parse {
    struct gw_config *conf;
    struct mm_arena *arena;
    struct conf_file *file;
    int32_t line;                    /* line of the current directive */
    const char *args[CONF_MAX_ARGS]; /* args[0] is the name */
    size_t nargs;                    /* including the name */
    uint32_t block_ctx;
    void *block_conf;
    struct conf_seen *seen;
    size_t n_seen, cap_seen;
    int include_depth;
    bool allow_include;
    bool defaults; /* applying defaults: messages say "(default)" */
    struct mm_err *err;
};

/* ---- helpers for setters ---- */

size_t gw_conf_nargs(const struct gw_conf_parse *cf)
{
    return cf->nargs ? cf->nargs - 1 : 0;
}

const char *gw_conf_arg(const struct gw_conf_parse *cf, size_t i)
{
    return i + 1 < cf->nargs ? cf->args[i + 1] : NULL;
}

struct gw_config *gw_conf_config(struct gw_conf_parse *cf)
{
    return cf->conf;
}

const char *gw_conf_msg(struct gw_conf_parse *cf, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *m = mm_arena_strdup(cf->arena, buf);
    return m ? m : "out of memory";
}

char *gw_conf_strdup(struct gw_conf_parse *cf, const char *s)
{
    return mm_arena_strdup(cf->arena, s);
}

char *gw_conf_path(struct gw_conf_parse *cf, const char *s)
{
    if (s[0] == '/' || !cf->file || !cf->file->dir || !cf->file->dir[0]) return mm_arena_strdup(cf->arena, s);
    size_t dl = strlen(cf->file->dir), sl = strlen(s);
    char *p = mm_arena_alloc(cf->arena, dl + sl + 2);
    if (!p) return NULL;
    memcpy(p, cf->file->dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, s, sl + 1);
    return p;
}

const char *gw_conf_file(const struct gw_conf_parse *cf)
{
    return cf->file ? cf->file->name : "(default)";
}

int32_t gw_conf_line(const struct gw_conf_parse *cf)
{
    return cf->line;
}

void *gw_conf_push(struct gw_conf_parse *cf, void *arr_ptr, size_t *n, size_t elem_size)
{
    char **arr = arr_ptr;
    size_t cnt = *n;
    /* capacity is 4 below 4 elements and the next power of two above: grow exactly at those sizes */
    if (cnt == 0 || (cnt >= 4 && (cnt & (cnt - 1)) == 0)) {
        size_t cap = cnt == 0 ? 4 : cnt * 2;
        char *na = mm_arena_calloc(cf->arena, cap, elem_size);
        if (!na) return NULL;
        if (cnt) memcpy(na, *arr, cnt * elem_size);
        *arr = na;
    }
    char *slot = *arr + cnt * elem_size;
    memset(slot, 0, elem_size);
    *n = cnt + 1;
    return slot;
}

void gw_conf_enter_block(struct gw_conf_parse *cf, uint32_t ctx, void *conf)
{
    cf->block_ctx = ctx;
    cf->block_conf = conf;
}

/* ---- errors ---- */

static int32_t conf_error(struct gw_conf_parse *cf, int32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int32_t conf_error(struct gw_conf_parse *cf, int32_t line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mm_err_set(cf->err, MM_INVALID, "%s:%d: %s", gw_conf_file(cf), line, msg);
}

/* ---- lexer ---- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

static bool is_special(char c)
{
    return c == ';' || c == '{' || c == '}';
}

/* Next token; words are copied into the arena (quotes removed, escapes resolved). */
static int32_t lex_next(struct gw_conf_parse *cf, enum tok_kind *kind, const char **word, int32_t *line)
{
    struct conf_file *f = cf->file;
    for (;;) {
        while (f->p < f->end && is_space(*f->p)) {
            if (*f->p == '\n') f->line++;
            f->p++;
        }
        if (f->p < f->end && *f->p == '#') {
            while (f->p < f->end && *f->p != '\n') f->p++;
            continue;
        }
        break;
    }
    *line = f->line;
    if (f->p >= f->end) {
        *kind = TOK_EOF;
        return MM_OK;
    }
    char c = *f->p;
    if (c == '\0') return conf_error(cf, f->line, "unexpected NUL byte");
    if (is_special(c)) {
        f->p++;
        *kind = c == ';' ? TOK_SEMI : c == '{' ? TOK_LBRACE : TOK_RBRACE;
        return MM_OK;
    }
    const char *start = f->p;
    if (c == '"' || c == '\'') {
        char q = c;
        int32_t qline = f->line;
        f->p++;
        /* the unescaped text is never longer than the quoted one */
        const char *s = f->p;
        while (s < f->end && *s != q) {
            if (*s == '\\' && s + 1 < f->end) s++;
            s++;
        }
        if (s >= f->end) return conf_error(cf, qline, "unterminated quoted string");
        size_t raw = (size_t)(s - f->p);
        if (raw > CONF_MAX_TOKEN) return conf_error(cf, qline, "token too long");
        char *out = mm_arena_alloc(cf->arena, raw + 1);
        if (!out) return mm_err_set(cf->err, MM_NOMEM, "out of memory parsing config");
        size_t n = 0;
        while (f->p < s) {
            char ch = *f->p++;
            if (ch == '\0') return conf_error(cf, f->line, "unexpected NUL byte");
            if (ch == '\n') f->line++;
            if (ch == '\\' && f->p < s) {
                char e = *f->p++;
                switch (e) {
                case 'n':
                    ch = '\n';
                    break;
                case 't':
                    ch = '\t';
                    break;
                case 'r':
                    ch = '\r';
                    break;
                case '\n':
                    f->line++;
                    ch = '\n';
                    break;
                default:
                    ch = e; /* \" \' \\ and anything else: the character itself */
                }
            }
            out[n++] = ch;
        }
        out[n] = '\0';
        f->p++; /* closing quote */
        if (f->p < f->end && !is_space(*f->p) && !is_special(*f->p))
            return conf_error(cf, f->line, "unexpected \"%c\" after a quoted string", *f->p);
        *kind = TOK_WORD;
        *word = out;
        return MM_OK;
    }
    while (f->p < f->end && !is_space(*f->p) && !is_special(*f->p)) {
        if (*f->p == '\0') return conf_error(cf, f->line, "unexpected NUL byte");
        f->p++;
    }
    size_t len = (size_t)(f->p - start);
    if (len > CONF_MAX_TOKEN) return conf_error(cf, f->line, "token too long");
    char *w = mm_arena_strndup(cf->arena, start, len);
    if (!w) return mm_err_set(cf->err, MM_NOMEM, "out of memory parsing config");
    *kind = TOK_WORD;
    *word = w;
    return MM_OK;
}

/* Read one directive: words up to ';', '{' or '}' (or the end). *term is the terminator. */
static int32_t read_directive(struct gw_conf_parse *cf, enum tok_kind *term)
{
    cf->nargs = 0;
    cf->line = cf->file->line;
    for (;;) {
        enum tok_kind k = TOK_EOF;
        const char *w = NULL;
        int32_t line = cf->file->line;
        int32_t rc = lex_next(cf, &k, &w, &line);
        if (rc) return rc;
        if (cf->nargs == 0) cf->line = line;
        if (k != TOK_WORD) {
            *term = k;
            return MM_OK;
        }
        if (cf->nargs == CONF_MAX_ARGS) return conf_error(cf, cf->line, "too many arguments");
        cf->args[cf->nargs++] = w;
    }
}

/* ---- directive lookup and dispatch ---- */

static const struct gw_directive *find_directive(const char *name)
{
    for (size_t t = 0; gw_conf_tables[t]; t++)
        for (const struct gw_directive *d = gw_conf_tables[t]; d->name; d++)
            if (strcmp(d->name, name) == 0) return d;
    return NULL;
}

static bool nargs_ok(uint32_t flags, size_t n)
{
    if ((flags & GW_CONF_1MORE) && n >= 1) return true;
    if ((flags & GW_CONF_NOARGS) && n == 0) return true;
    if ((flags & GW_CONF_TAKE1) && n == 1) return true;
    if ((flags & GW_CONF_TAKE2) && n == 2) return true;
    if ((flags & GW_CONF_TAKE3) && n == 3) return true;
    return false;
}

static int32_t mark_seen(struct gw_conf_parse *cf, const void *conf, const struct gw_directive *d)
{
    for (size_t i = 0; i < cf->n_seen; i++)
        if (cf->seen[i].conf == conf && cf->seen[i].d == d)
            return conf_error(cf, cf->line, "\"%s\" directive is duplicate", d->name);
    if (cf->n_seen == cf->cap_seen) {
        size_t cap = cf->cap_seen ? cf->cap_seen * 2 : 32;
        struct conf_seen *ns = realloc(cf->seen, cap * sizeof *ns);
        if (!ns) return mm_err_set(cf->err, MM_NOMEM, "out of memory parsing config");
        cf->seen = ns;
        cf->cap_seen = cap;
    }
    cf->seen[cf->n_seen++] = (struct conf_seen){conf, d};
    return MM_OK;
}

static int32_t parse_block(struct gw_conf_parse *cf, uint32_t ctx, void *conf, bool braced);
static int32_t parse_file(struct gw_conf_parse *cf, const char *path, const char *shown, uint32_t ctx,
                          void *conf);

static bool has_glob_chars(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

static int32_t do_include(struct gw_conf_parse *cf, uint32_t ctx, void *conf)
{
    if (!cf->allow_include) return conf_error(cf, cf->line, "\"include\" is not allowed here");
    if (cf->nargs != 2)
        return conf_error(cf, cf->line, "invalid number of arguments in \"include\" directive");
    if (cf->include_depth >= CONF_MAX_INCLUDE_DEPTH)
        return conf_error(cf, cf->line, "includes nested deeper than %d (an include loop?)",
                          CONF_MAX_INCLUDE_DEPTH);
    const char *pattern = gw_conf_path(cf, cf->args[1]);
    if (!pattern) return mm_err_set(cf->err, MM_NOMEM, "out of memory parsing config");
    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(pattern, 0, NULL, &g); /* a missing conf.d/ is just no match */
    if (grc == GLOB_NOMATCH) {
        globfree(&g);
        /* a pattern that matches nothing is fine (conf.d/ may be empty); a plain missing file is not */
        if (has_glob_chars(cf->args[1])) return MM_OK;
        return conf_error(cf, cf->line, "cannot open \"%s\": %s", pattern, strerror(ENOENT));
    }
    if (grc != 0) {
        globfree(&g);
        return conf_error(cf, cf->line, "cannot read \"%s\"", pattern);
    }
    int32_t line = cf->line;
    struct conf_file *saved = cf->file;
    int32_t rc = MM_OK;
    for (size_t i = 0; i < g.gl_pathc && rc == MM_OK; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            if (has_glob_chars(cf->args[1])) continue; /* a pattern may match subfolders too */
            /* a plain folder would include nothing, silently: say what was probably meant */
            size_t n = strlen(cf->args[1]);
            rc = conf_error(cf, line, "cannot include \"%s\": it is a directory (include %s%s*.conf?)",
                            pattern, cf->args[1], n && cf->args[1][n - 1] == '/' ? "" : "/");
            break;
        }
        cf->include_depth++;
        rc = parse_file(cf, g.gl_pathv[i], NULL, ctx, conf);
        cf->include_depth--;
        cf->file = saved;
    }
    globfree(&g);
    cf->line = line;
    return rc;
}

static const char *term_text(enum tok_kind k)
{
    return k == TOK_SEMI ? ";" : k == TOK_LBRACE ? "{" : k == TOK_RBRACE ? "}" : "end of file";
}

static int32_t parse_block(struct gw_conf_parse *cf, uint32_t ctx, void *conf, bool braced)
{
    for (;;) {
        enum tok_kind term = TOK_EOF;
        int32_t rc = read_directive(cf, &term);
        if (rc) return rc;
        if (cf->nargs == 0) {
            if (term == TOK_EOF) {
                if (braced) return conf_error(cf, cf->file->line, "unexpected end of file, expecting \"}\"");
                return MM_OK;
            }
            if (term == TOK_RBRACE) {
                if (braced) return MM_OK;
                return conf_error(cf, cf->line, "unexpected \"}\"");
            }
            return conf_error(cf, cf->line, "unexpected \"%s\"", term_text(term));
        }
        const char *name = cf->args[0];
        if (term == TOK_EOF || term == TOK_RBRACE)
            return conf_error(cf, cf->line, "directive \"%s\" is not terminated by \";\"", name);
        if (strcmp(name, "include") == 0) {
            if (term != TOK_SEMI)
                return conf_error(cf, cf->line, "\"include\" directive is not terminated by \";\"");
            rc = do_include(cf, ctx, conf);
            if (rc) return rc;
            continue;
        }
        const struct gw_directive *d = find_directive(name);
        if (!d) return conf_error(cf, cf->line, "unknown directive \"%s\"", name);
        if (!(d->flags & ctx)) return conf_error(cf, cf->line, "\"%s\" directive is not allowed here", name);
        bool block = (d->flags & GW_CONF_BLOCK) != 0;
        if (block && term != TOK_LBRACE)
            return conf_error(cf, cf->line, "directive \"%s\" has no opening \"{\"", name);
        if (!block && term != TOK_SEMI)
            return conf_error(cf, cf->line, "directive \"%s\" is not terminated by \";\"", name);
        if (!nargs_ok(d->flags, cf->nargs - 1))
            return conf_error(cf, cf->line, "invalid number of arguments in \"%s\" directive", name);
        if (!(d->flags & GW_CONF_MULTI)) {
            rc = mark_seen(cf, conf, d);
            if (rc) return rc;
        }
        cf->block_ctx = 0;
        cf->block_conf = NULL;
        const char *msg = d->set(cf, d, conf);
        if (msg) {
            if (cf->err && cf->err->code == MM_NOMEM) return MM_NOMEM;
            return conf_error(cf, cf->line, "\"%s\" directive: %s", name, msg);
        }
        if (block) {
            if (!cf->block_ctx)
                return conf_error(cf, cf->line, "\"%s\" directive: block setter set no context", name);
            rc = parse_block(cf, cf->block_ctx, cf->block_conf, true);
            if (rc) return rc;
        }
    }
}

static const char *dir_of(struct mm_arena *a, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return "";
    if (slash == path) return "/";
    return mm_arena_strndup(a, path, (size_t)(slash - path));
}

static int32_t parse_file(struct gw_conf_parse *cf, const char *path, const char *shown, uint32_t ctx,
                          void *conf)
{
    int32_t at = cf->line;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (!cf->file) return mm_err_set(cf->err, MM_IO, "%s: cannot open: %s", path, strerror(errno));
        return conf_error(cf, at, "cannot open \"%s\": %s", path, strerror(errno));
    }
    struct mm_arena *a = cf->arena;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int32_t rc = MM_OK;
    if (!buf) rc = mm_err_set(cf->err, MM_NOMEM, "out of memory reading %s", path);
    while (rc == MM_OK) {
        if (len == cap) {
            if (cap >= CONF_MAX_FILE_BYTES) {
                rc = mm_err_set(cf->err, MM_TOO_LARGE, "%s: larger than %u bytes", path, CONF_MAX_FILE_BYTES);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = mm_err_set(cf->err, MM_NOMEM, "out of memory reading %s", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, fp);
        len += n;
        if (n == 0) {
            if (ferror(fp)) rc = mm_err_set(cf->err, MM_IO, "%s: read error", path);
            break;
        }
    }
    fclose(fp);
    if (rc == MM_OK) {
        struct conf_file f = {.name = mm_arena_strdup(a, shown ? shown : path),
                              .dir = dir_of(a, path),
                              .p = buf,
                              .end = buf + len,
                              .line = 1};
        if (!f.name || !f.dir) {
            rc = mm_err_set(cf->err, MM_NOMEM, "out of memory parsing config");
        } else {
            struct conf_file *saved = cf->file;
            cf->file = &f;
            rc = parse_block(cf, ctx, conf, false);
            cf->file = saved;
        }
    }
    free(buf);
    return rc;
}

/* ---- defaults ---- */

static int32_t apply_defaults_with(struct gw_conf_parse *cf, uint32_t ctx, void *conf)
{
    struct conf_file *saved_file = cf->file;
    int32_t saved_line = cf->line;
    const char *saved_args[CONF_MAX_ARGS];
    size_t saved_n = cf->nargs;
    memcpy(saved_args, cf->args, sizeof saved_args);
    int32_t rc = MM_OK;
    for (size_t t = 0; gw_conf_tables[t] && rc == MM_OK; t++) {
        for (const struct gw_directive *d = gw_conf_tables[t]; d->name && rc == MM_OK; d++) {
            if (!(d->flags & ctx) || !d->deflt) continue;
            char *copy = mm_arena_strdup(cf->arena, d->deflt);
            if (!copy) return mm_err_set(cf->err, MM_NOMEM, "out of memory");
            cf->nargs = 0;
            cf->args[cf->nargs++] = d->name;
            for (char *save = NULL, *w = strtok_r(copy, " ", &save); w && cf->nargs < CONF_MAX_ARGS;
                 w = strtok_r(NULL, " ", &save))
                cf->args[cf->nargs++] = w;
            const char *msg = d->set(cf, d, conf);
            if (msg) rc = mm_err_set(cf->err, MM_ERROR, "default of \"%s\" is invalid: %s", d->name, msg);
        }
    }
    cf->file = saved_file;
    cf->line = saved_line;
    memcpy(cf->args, saved_args, sizeof saved_args);
    cf->nargs = saved_n;
    return rc;
}

/* Block setters (gw_conf_directives.c) call this for the struct they create. */
int32_t gw_conf__apply_defaults(struct gw_conf_parse *cf, uint32_t ctx, void *conf);
int32_t gw_conf__apply_defaults(struct gw_conf_parse *cf, uint32_t ctx, void *conf)
{
    bool was = cf->defaults;
    cf->defaults = true;
    int32_t rc = apply_defaults_with(cf, ctx, conf);
    cf->defaults = was;
    return rc;
}

/* ---- whole-config checks ---- */

static bool same_addr(const struct gw_listen_conf *a, const struct gw_listen_conf *b)
{
    return a->addr_len == b->addr_len && memcmp(&a->addr, &b->addr, a->addr_len) == 0;
}

static uint16_t listen_port(const struct gw_listen_conf *l)
{
    if (l->addr.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&l->addr)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&l->addr)->sin_port);
}

static int32_t check_config(struct gw_conf_parse *cf)
{
    const struct gw_config *c = cf->conf;
    const struct gw_http_conf *h = &c->http;
    for (size_t i = 0; i < h->n_listen; i++) {
        const struct gw_listen_conf *l = &h->listen[i];
        if (l->ssl && (!h->ssl_certificate || !h->ssl_certificate_key))
            return mm_err_set(
                cf->err, MM_INVALID,
                "%s:%d: \"listen %s ssl\" needs \"ssl_certificate\" and \"ssl_certificate_key\"", l->file,
                l->line, l->text);
        for (size_t j = 0; j < i; j++) {
            /* port 0 asks the kernel for a fresh port each time, so it never collides */
            if (same_addr(l, &h->listen[j]) && listen_port(l) != 0)
                return mm_err_set(cf->err, MM_INVALID, "%s:%d: duplicate listen %s", l->file, l->line,
                                  l->text);
        }
    }
    for (size_t i = 0; i < c->n_models; i++) {
        const struct gw_model_conf *m = &c->models[i];
        if (!m->plugin)
            return mm_err_set(cf->err, MM_INVALID, "%s:%d: model \"%s\" has no \"plugin\" directive", m->file,
                              m->line, m->name);
        if (m->n_upstreams == 0)
            return mm_err_set(cf->err, MM_INVALID, "%s:%d: model \"%s\" has no \"upstream\" directive",
                              m->file, m->line, m->name);
    }
    return MM_OK;
}

/* ---- public entry points ---- */

static int32_t config_new(struct gw_config **out, struct mm_err *err)
{
    struct mm_arena *a = mm_arena_create(16384);
    if (!a) return mm_err_set(err, MM_NOMEM, "out of memory creating config");
    struct gw_config *c = mm_arena_calloc(a, 1, sizeof *c);
    if (!c) {
        mm_arena_destroy(a);
        return mm_err_set(err, MM_NOMEM, "out of memory creating config");
    }
    c->arena = a;
    c->refs = 1;
    *out = c;
    return MM_OK;
}

enum conf_source { FROM_FILE, FROM_TEXT, DEFAULTS_ONLY };

static int32_t conf_run(enum conf_source src, const char *name, const char *text, size_t len,
                        const char *base_dir, bool allow_include, struct gw_config **out, struct mm_err *err)
{
    struct mm_err local;
    if (!err) err = &local;
    mm_err_clear(err);
    *out = NULL;
    struct gw_config *c = NULL;
    int32_t rc = config_new(&c, err);
    if (rc) return rc;
    struct gw_conf_parse cf = {.conf = c, .arena = c->arena, .allow_include = allow_include, .err = err};
    c->path = mm_arena_strdup(c->arena, name ? name : "(config)");
    rc = c->path ? MM_OK : mm_err_set(err, MM_NOMEM, "out of memory");
    if (!rc) rc = gw_conf__apply_defaults(&cf, GW_CTX_MAIN, c);
    if (!rc) rc = gw_conf__apply_defaults(&cf, GW_CTX_HTTP, &c->http);
    if (!rc) rc = gw_conf__apply_defaults(&cf, GW_CTX_MEDIA, &c->media);
    if (!rc && src == FROM_FILE) {
        rc = parse_file(&cf, name, name, GW_CTX_MAIN, c);
    } else if (!rc && src == FROM_TEXT) {
        struct conf_file f = {.name = c->path,
                              .dir = base_dir ? mm_arena_strdup(c->arena, base_dir) : "",
                              .p = text,
                              .end = text + len,
                              .line = 1};
        if (!f.dir) {
            rc = mm_err_set(err, MM_NOMEM, "out of memory");
        } else {
            cf.file = &f;
            rc = parse_block(&cf, GW_CTX_MAIN, c, false);
            cf.file = NULL;
        }
    }
    if (!rc && src != DEFAULTS_ONLY) rc = check_config(&cf);
    free(cf.seen);
    if (rc) {
        if (err->code == MM_OK) mm_err_set(err, rc, "config error");
        mm_arena_destroy(c->arena);
        return rc;
    }
    *out = c;
    return MM_OK;
}

int32_t gw_config_load(const char *path, struct gw_config **out, struct mm_err *err)
{
    return conf_run(FROM_FILE, path, NULL, 0, NULL, true, out, err);
}

int32_t gw_config_parse_text(const char *name, const char *text, size_t len, const char *base_dir,
                             bool allow_include, struct gw_config **out, struct mm_err *err)
{
    return conf_run(FROM_TEXT, name, text, len, base_dir, allow_include, out, err);
}

int32_t gw_config_defaults(struct gw_config **out, struct mm_err *err)
{
    return conf_run(DEFAULTS_ONLY, "(defaults)", NULL, 0, NULL, false, out, err);
}

void gw_config_ref(struct gw_config *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
}

void gw_config_unref(struct gw_config *c)
{
    if (!c) return;
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) mm_arena_destroy(c->arena);
}

const struct gw_model_conf *gw_config_model(const struct gw_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (strcmp(c->models[i].name, name) == 0) return &c->models[i];
    return NULL;
}
